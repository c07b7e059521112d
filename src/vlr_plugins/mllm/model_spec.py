"""``mllm:FOLDER[:PROMPT]``: a CaRe / E5-V embedder named on a command line, as ``vlr precompute
--encoder`` (its video or image side) and ``vlr eval --model`` (its text side) take it; the
spec is read by :mod:`vlr_plugins.specs`, the folder and prompt checked and loaded here.

``FOLDER`` is a transformers MLLM folder (or Hub id) or a ``vlr export`` of an
:class:`~vlr_plugins.mllm.EOLEmbedder`; ``PROMPT`` a shipped EOL prompt family (``care``,
``e5v``, ...) or a prompt YAML file. Without ``PROMPT``: the export's own prompts, else
``care`` (:func:`~vlr_plugins.mllm.load_eol_embedder`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from vlr_plugins.errors import UsageError
from vlr_plugins.mllm.embedder import EOLEmbedder
from vlr_plugins.mllm.loading import check_mllm_folder, load_eol_embedder
from vlr_plugins.mllm.prompt import list_eol_prompts

__all__ = ["EOLImageEncoder", "load_mllm_embedder"]

_FORM = "mllm:FOLDER[:PROMPT] (a transformers MLLM folder or a vlr export; PROMPT e.g. care or e5v)"


def _check_prompt(prompt: str | None, spec: str, setting: str) -> None:
    if prompt is None or prompt.endswith((".yaml", ".yml")) or os.path.isfile(prompt):
        return
    shipped = list_eol_prompts()
    if prompt not in shipped:
        raise UsageError(setting, f"{spec!r}: no EOL prompt named {prompt!r}; the shipped prompts are "
                                  f"{', '.join(sorted(shipped))} (or give a prompt YAML file)")


def load_mllm_embedder(folder: str, prompt: str | None, *, spec: str, setting: str = "--model", device: Any = None,
                       **kwargs: Any) -> EOLEmbedder:
    """The :class:`~vlr_plugins.mllm.EOLEmbedder` of ``folder`` under ``prompt``, in eval mode
    on ``device``, as ``spec`` (``mllm:FOLDER[:PROMPT]``, read by
    :func:`vlr_plugins.specs.load_mllm_spec`) names it.

    ``kwargs`` go to :func:`~vlr_plugins.mllm.load_eol_embedder` (``dtype``: ``"auto"``, the
    default, is the checkpoint's own; :mod:`vlr_plugins.mllm.model_dtype`). Refused, naming
    ``setting``, with a :class:`~vlr_plugins.errors.UsageError`: a folder that is not there or
    holds no model, an unknown prompt name (the message lists the shipped ones), and a
    text-only language model (it embeds no videos); a model that cannot be loaded is a
    :class:`~vlr_plugins.errors.ModelLoadError`.
    """
    _check_prompt(prompt, spec, setting)
    check_mllm_folder(folder, setting, spec=spec, form=_FORM,
                      needs="an mllm: spec needs one that embeds videos, such as Qwen2-VL or a vlr export of CaRe")
    embedder = load_eol_embedder(folder, prompt=prompt, setting=setting, device=device, **kwargs)
    if embedder.kind != "mllm":
        raise UsageError(setting, f"{spec!r}: {folder} is a text-only language model (its config has no "
                                  "vision_config); an mllm: spec needs a multimodal LLM that embeds videos")
    return embedder.eval()


class EOLImageEncoder:
    """The image side of an :class:`~vlr_plugins.mllm.EOLEmbedder` as ``vlr precompute --images``
    calls an encoder: ``images`` (n PIL images) -> (n, D) float32 on the CPU, L2-normalised.

    ``dim`` (D, the LLM's hidden size) and ``name`` (the spec) go into the store's meta.

    Example::

        >>> enc = EOLImageEncoder(specs.load_mllm_spec("mllm:CaRe-7B:care"), "mllm:CaRe-7B:care")  # doctest: +SKIP
        >>> enc([Image.open("cat.jpg").convert("RGB")]).shape  # doctest: +SKIP
        torch.Size([1, 3584])
    """

    def __init__(self, embedder: EOLEmbedder, name: str) -> None:
        self.embedder = embedder
        self.dim: int = embedder.embedding_dim
        self.name = name

    def __repr__(self) -> str:
        return f"EOLImageEncoder({self.name!r}, dim={self.dim})"

    def __call__(self, images: Sequence[Any]) -> torch.Tensor:
        return self.embedder.encode_image(list(images)).cpu()
