"""What ``vlr eval`` scores: a text side that embeds texts into the space of the stored item
embeddings, and optionally a matching head that re-ranks each query's best candidates.

The protocol a model follows (``--model module:callable``, docs/eval.md):

======================================  ========  ============================================
member                                  needed    meaning
======================================  ========  ============================================
``encode_text(texts) -> (N, D)``        yes       one finite row per text (a list of N str);
                                                  rows need not be normalised
``encode_text(..., max_tokens=)``       no        taken if named: the benchmark's token budget
``encode_text(..., view=)``             no        taken if named: the protocol's text view
                                                  (``"summary"`` or ``"detailed"``)
``embed_dim: int``                      no        checked against every store before encoding
                                                  (without it the first benchmark's first text
                                                  is encoded to learn D)
``max_positions: int``                  no        the largest budget it takes
``match_scores(item_ids, item_emb,      no        a matching head (ITM): the score of P (item,
texts) -> (P,)``                                  text) pairs, higher is a better match;
                                                  ``item_emb`` (P, D) are the store's rows.
                                                  ``--rerank-k K`` re-ranks each query's top K
======================================  ========  ============================================

Our checkpoints (``vlr train``, ``blip:``) are scored through their tokenizer (the CLI's
path); ``open_clip:MODEL:CHECKPOINT_OR_TAG`` through
:class:`~vlr_plugins.eval.open_clip_text.OpenCLIPTextModel`; ``mllm:FOLDER[:PROMPT]`` (CaRe,
E5-V) through :meth:`~vlr_plugins.mllm.EOLEmbedder.encode_text`.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch
from tqdm.auto import tqdm

from vlr_plugins.errors import ConfigError, UsageError
from vlr_plugins.eval.rerank import rerank_pairs

__all__ = ["TextModel", "encode_with_model", "load_text_model", "match_reranker", "takes_keyword",
           "text_model_dim", "text_model_source"]

_PYTHON_SPEC = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_PROBE = "a person walks a dog along the beach"


@runtime_checkable
class TextModel(Protocol):
    """A text side ``vlr eval`` can score: ``encode_text(texts: list[str]) -> (N, D)``.

    The optional members (``max_tokens=``/``view=`` keywords, ``embed_dim``,
    ``max_positions``, ``match_scores``) are listed in the module docstring.
    ``isinstance(obj, TextModel)`` checks the name only.

    Example::

        class Bag:
            embed_dim = 4

            def encode_text(self, texts):
                return torch.stack([torch.tensor([t.count(w) for w in ("dog", "cat", "car", "sea")],
                                                 dtype=torch.float32) for t in texts])
    """

    def encode_text(self, texts: Sequence[str]) -> torch.Tensor: ...


def _name(model: Any) -> str:
    return str(getattr(model, "name", None) or type(model).__name__)


def takes_keyword(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` has a parameter called ``name`` that can be passed by keyword."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params and params[name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                    inspect.Parameter.KEYWORD_ONLY)


def _rows(out: Any, count: int, what: str) -> torch.Tensor:
    """``out`` as a (count, D) float32 CPU tensor of finite rows, or a ConfigError naming ``what``."""
    try:
        emb = torch.as_tensor(out)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"{what} returned a {type(out).__name__}; expected a tensor ({count}, D)") from None
    if emb.ndim != 2 or emb.shape[0] != count or emb.shape[1] < 1:
        raise ConfigError(f"{what} returned shape {tuple(emb.shape)} for {count} texts; expected ({count}, D)")
    emb = emb.detach().float().cpu()
    if not bool(torch.isfinite(emb).all()):
        row = int((~torch.isfinite(emb).all(dim=1)).nonzero()[0])
        raise ConfigError(f"{what} returned a row that is not finite (NaN or inf), row {row} of {count}")
    return emb


def encode_with_model(model: Any, texts: Sequence[str], *, max_tokens: int | None = None, view: str | None = None,
                      batch_size: int = 256, progress: bool = True, desc: str = "encode texts") -> torch.Tensor:
    """``model.encode_text`` over ``texts`` (M,) in batches -> (M, D) float32 on the CPU.

    ``max_tokens`` and ``view`` are passed when given and when ``encode_text`` names them
    (:func:`takes_keyword`). Each batch must come back as (batch, D) with finite rows, or
    a :class:`~vlr_plugins.errors.ConfigError` names the model.
    """
    options = {key: value for key, value in (("max_tokens", max_tokens), ("view", view))
               if value is not None and takes_keyword(model.encode_text, key)}
    if len(texts) == 0:
        raise ValueError("no texts to encode")
    out = []
    with torch.no_grad():
        for start in tqdm(range(0, len(texts), batch_size), desc=desc, disable=not progress, unit="batch",
                          leave=False):
            batch = list(texts[start:start + batch_size])
            out.append(_rows(model.encode_text(batch, **options), len(batch), f"{_name(model)}.encode_text"))
    if len({e.shape[1] for e in out}) > 1:
        raise ConfigError(f"{_name(model)}.encode_text returned rows of different widths: "
                          f"{sorted({e.shape[1] for e in out})}")
    return torch.cat(out)


def text_model_dim(model: Any, text: str = _PROBE) -> int:
    """The width D of ``model``'s text embeddings: its ``embed_dim``, else that of ``text`` encoded."""
    dim = getattr(model, "embed_dim", None)
    if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0:
        return dim
    return int(encode_with_model(model, [text], progress=False).shape[1])


def match_reranker(model: Any, item_ids: Sequence[str], texts: Sequence[str],
                   item_emb: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor, str], torch.Tensor]:
    """The ``rerank`` hook of :func:`~vlr_plugins.eval.retrieval_recall` from ``model.match_scores``.

    For each query and each of its candidates the hook forms the (item, text) pair (the
    query is the item for ``"i2t"``, the text for ``"t2i"``) and asks
    ``model.match_scores(item_ids (P,), item_emb (P, D), texts (P,)) -> (P,)`` for their
    scores; ``item_emb`` are the rows of the store, in the order of ``item_ids``.
    """
    name = f"{_name(model)}.match_scores"

    def rerank(queries: torch.Tensor, candidates: torch.Tensor, direction: str) -> torch.Tensor:
        q, k = candidates.shape
        items, text_rows = rerank_pairs(queries, candidates, direction)
        items, text_rows = items.cpu(), text_rows.cpu()
        with torch.no_grad():
            out = model.match_scores([item_ids[i] for i in items.tolist()], item_emb[items],
                                     [texts[j] for j in text_rows.tolist()])
        scores = torch.as_tensor(out).detach().float().cpu()
        if scores.shape != (q * k,):
            raise ConfigError(f"{name} returned shape {tuple(scores.shape)} for {q * k} pairs; expected ({q * k},)")
        if not bool(torch.isfinite(scores).all()):
            raise ConfigError(f"{name} returned a score that is not finite (NaN or inf)")
        return scores.reshape(q, k).to(candidates.device)

    return rerank


def text_model_source(spec: str) -> str:
    """What ``--model spec`` names: ``"open_clip"`` (``open_clip:...``), ``"mllm"``
    (``mllm:FOLDER[:PROMPT]``), ``"python"`` (``module.sub:attr``, not a path that exists) or
    ``"checkpoint"`` (a ``vlr train`` checkpoint or ``blip:<name>``; anything else is taken
    for a checkpoint path)."""
    if spec.startswith("open_clip:"):
        return "open_clip"
    if spec.startswith("mllm:"):
        return "mllm"
    if spec.startswith("blip:") or os.path.exists(spec):
        return "checkpoint"
    return "python" if _PYTHON_SPEC.match(spec) else "checkpoint"


def _python_model(spec: str, setting: str) -> Any:
    from vlr_plugins.data.precompute import _current_folder_importable

    module_name, _, attr = spec.partition(":")
    try:
        with _current_folder_importable():
            obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(setting, f"{spec!r}: cannot import {module_name!r}: {e} (searched the current folder "
                                  f"{os.getcwd()} and the installed packages)") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(setting, f"{spec!r}: {module_name} has no {attr!r}")
        obj = getattr(obj, part)
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "encode_text")):
        obj = obj()
    if not callable(getattr(obj, "encode_text", None)):
        raise UsageError(setting, f"{spec!r} gives a {type(obj).__name__}, which has no encode_text(texts) -> "
                                  "(N, D); see docs/eval.md (the text model protocol)")
    if isinstance(obj, torch.nn.Module):
        obj.eval()
    return obj


def load_text_model(spec: str, *, setting: str = "--model", device: str | torch.device = "cpu",
                    dtype: str | torch.dtype | None = None) -> Any:
    """The text model ``spec`` names, for ``open_clip:``, ``mllm:`` and ``module:callable`` specs.

    - ``open_clip:MODEL:CHECKPOINT_OR_TAG``: an open_clip or Long-CLIP model
      (:func:`~vlr_plugins.eval.open_clip_text.load_open_clip_text_model`), on ``device``;
    - ``mllm:FOLDER[:PROMPT]``: a CaRe / E5-V :class:`~vlr_plugins.mllm.EOLEmbedder` (an MLLM
      folder or a ``vlr export``; :func:`~vlr_plugins.mllm.model_spec.load_mllm_spec`), on
      ``device``, in ``dtype`` (``"auto"`` or None: the checkpoint's own;
      :mod:`vlr_plugins.mllm.model_dtype`): its ``encode_text`` embeds each text under the
      EOL prompt;
    - ``module.sub:attr``: ``attr`` of ``module.sub`` (the current folder searched first):
      an object with ``encode_text``, or a class or function that returns one when
      called without arguments. It is used as returned (an ``nn.Module`` is put in eval
      mode, not moved: its ``encode_text`` places its inputs).

    Every way the spec can be unusable is one :class:`~vlr_plugins.errors.UserError`
    naming ``setting``, as is a ``dtype`` for any spec but ``mllm:``; a model that cannot be
    downloaded (offline) a :class:`~vlr_plugins.errors.ModelLoadError`.
    """
    source = text_model_source(spec)
    if dtype not in (None, "auto") and source != "mllm":
        from vlr_plugins.errors import UsageError

        raise UsageError(setting, f"{spec!r}: a model dtype ({dtype}) is chosen for mllm: specs only; this model "
                                  "is loaded as its own code loads it")
    if source == "open_clip":
        from vlr_plugins.eval.open_clip_text import load_open_clip_text_model

        return load_open_clip_text_model(spec[len("open_clip:"):], setting=setting, device=device)
    if source == "mllm":
        from vlr_plugins.mllm.model_spec import load_mllm_spec

        return load_mllm_spec(spec, setting=setting, device=device, dtype=dtype)
    if source == "python":
        return _python_model(spec, setting)
    raise ValueError(f"{spec!r} names a checkpoint, which is loaded with its tokenizer, not by load_text_model")
