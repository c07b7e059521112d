"""``vlr export open_clip:MODEL:CHECKPOINT OUT``: an open_clip checkpoint -> an open_clip Hub folder.

The model is built exactly as ``vlr eval --model open_clip:MODEL:CHECKPOINT`` builds it
(:func:`~vlr_plugins.integrations.open_clip.text_model.load_open_clip_text_model`: the
``-ctxN`` long-context names, Long-CLIP's two-table checkpoints), and written the way
open_clip's own ``push_to_hf_hub`` writes a model (``open_clip.push_to_hf_hub.save_config_for_hf``):
``open_clip_config.json`` holding the full ``model_cfg`` (the context length of a ``-ctx248``
model included, so plain open_clip builds it without this package) and ``preprocess_cfg``,
the weights as ``open_clip_model.safetensors`` (no pickle), and an HF tokenizer's files
where the model has one (open_clip's default CLIP tokenizer is set by ``text_cfg`` alone),
and the sentence-transformers files (:func:`sentence_transformers_files`: ``modules.json`` naming
the module whose code ships in the folder,
:mod:`~vlr_plugins.integrations.open_clip.open_clip_sentence_transformers`). Then::

    model, preprocess = open_clip.create_model_from_pretrained("local-dir:OUT")  # or hf-hub:me/name
    tokenizer = open_clip.get_tokenizer("local-dir:OUT")
    st = SentenceTransformer("OUT", trust_remote_code=True)  # st.encode(texts), st.encode(images)

Before the folder is renamed into place it is loaded back with plain open_clip and its
``encode_image`` / ``encode_text`` and tokenizer compared with the checkpoint's own model,
and (where sentence-transformers >= 6 is installed) the same for the folder's
sentence-transformers module, so ``OUT`` is either a folder that reproduces the checkpoint or absent.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from vlr_plugins._sentence_transformers import json_files, model_config
from vlr_plugins.errors import UsageError

__all__ = ["export_open_clip", "open_clip_model_config", "sentence_transformers_files"]

# the sentence-transformers module's code, copied into the folder; modules.json names its class
_ST_CODE = "open_clip_sentence_transformers.py"
_ST_CLASS = "OpenCLIPEncoder"

_PROBE_TEXTS = ["a photo of a dog running on the beach", "two people riding bicycles past a red building", ""]


def open_clip_model_config(model_name: str, context_length: int) -> dict[str, Any]:
    """The open_clip config ``model_name`` (a known name, ``<base>-ctx<N>``, or open_clip's
    ``local-dir:`` / ``hf-hub:`` model, whose ``open_clip_config.json`` holds it) is built from,
    with ``context_length`` text positions (what the built model has)."""
    import open_clip

    from vlr_plugins.integrations.open_clip.long_context import long_context_config, parse_long_context_name

    cfg = open_clip.get_model_config(model_name)
    if cfg is None:
        parsed = parse_long_context_name(model_name)
        if parsed is None:
            raise ValueError(f"open_clip has no model config {model_name!r}")
        cfg = long_context_config(parsed[0], parsed[1])
    cfg["text_cfg"]["context_length"] = context_length
    return cfg


def sentence_transformers_files() -> dict[str, str]:
    """``{file name: JSON text}`` that, with the module's code (``open_clip_sentence_transformers.py``),
    make an open_clip folder a sentence-transformers model: ``modules.json`` (the one input module, at
    the folder's root), its empty ``sentence_bert_config.json``, ``config_sentence_transformers.json``."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": f"{Path(_ST_CODE).stem}.{_ST_CLASS}"}]
    reason = "the module is a sentence_transformers.base.modules.InputModule with modalities (6.x)"
    return json_files({"modules.json": modules, "sentence_bert_config.json": {},
                       "config_sentence_transformers.json": model_config(reason)})


def _check_sentence_transformers(folder: Path, model: torch.nn.Module, tokenizer: Any) -> None:
    """Where sentence-transformers >= 6 is installed: the folder's module (this package's copy of its
    code, so no dynamic-module cache is written) embeds texts and an image as ``model`` does."""
    try:
        import sentence_transformers
    except ImportError:
        return
    if int(sentence_transformers.__version__.split(".")[0]) < 6:
        return
    from PIL import Image

    from vlr_plugins.integrations.open_clip.open_clip_sentence_transformers import OpenCLIPEncoder

    module = OpenCLIPEncoder.load(str(folder))
    pixels = torch.randint(0, 256, (48, 40, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    image = Image.fromarray(pixels.numpy())
    device = next(model.parameters()).device
    with torch.no_grad():
        got_text = module(module.preprocess(_PROBE_TEXTS))["sentence_embedding"]
        got_image = module(module.preprocess([image]))["sentence_embedding"]
        want_text = model.encode_text(tokenizer(_PROBE_TEXTS).to(device), normalize=True).cpu()
        want_image = model.encode_image(module.image_preprocess(image)[None].to(device), normalize=True).cpu()
    for what, a, b in (("texts", got_text, want_text), ("images", got_image, want_image)):
        if a.shape != b.shape or not torch.allclose(a.float(), b.float(), rtol=0, atol=1e-6):
            raise RuntimeError(f"the exported folder's sentence-transformers module embeds {what} differently "
                               "from the checkpoint")


def _probe(model: torch.nn.Module, tokens: torch.Tensor, image_size: Any) -> tuple[torch.Tensor, torch.Tensor]:
    size = tuple(image_size) if isinstance(image_size, (tuple, list)) else (image_size, image_size)
    images = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    device = next(model.parameters()).device
    with torch.no_grad():
        return (model.encode_image(images.to(device)).float().cpu(),
                model.encode_text(tokens.to(device)).float().cpu())


def _check_folder(folder: Path, model: torch.nn.Module, tokenizer: Any) -> None:
    """Load ``folder`` with plain open_clip; it must embed as ``model`` does (else a RuntimeError:
    an export that does not reproduce its checkpoint is a bug, never written)."""
    import open_clip

    loaded = open_clip.create_model(f"local-dir:{folder}", device="cpu").eval()
    loaded_tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
    if loaded.context_length != model.context_length:
        raise RuntimeError(f"the exported model has {loaded.context_length} text positions, "
                           f"the checkpoint's {model.context_length}")
    tokens = tokenizer(_PROBE_TEXTS)
    if not torch.equal(loaded_tokenizer(_PROBE_TEXTS), tokens):
        raise RuntimeError("open_clip's tokenizer of the exported folder tokenizes differently from the model's")
    image_size = model.visual.image_size
    for what, a, b in zip(("encode_image", "encode_text"), _probe(model, tokens, image_size),
                          _probe(loaded, tokens, image_size)):
        if a.shape != b.shape or not torch.allclose(a, b, rtol=0, atol=1e-6):
            raise RuntimeError(f"the exported model's {what} differs from the checkpoint's")


def export_open_clip(model_name: str, pretrained: str | None, own_scheme: bool, out_dir: str | os.PathLike, *,
                     spec: str, overwrite: bool = False, setting: str = "CHECKPOINT",
                     flag: str = "--overwrite", sentence_transformers: bool = True,
                     card: dict[str, Any] | None = None) -> Path:
    """Write the open_clip model ``spec`` names (``open_clip:MODEL:CHECKPOINT``, read by
    :func:`vlr_plugins.specs.parse_model_spec` into ``model_name``, ``pretrained`` and
    ``own_scheme``) as an open_clip Hub folder at ``out_dir``; returns its path.

    ``card``: the model card's fields (``model_name``, ``repo_id``, ``eval_paths``, ``license``;
    :func:`vlr_plugins.hf.open_clip_card.open_clip_card_files`) to write ``README.md``; none
    without it.

    ``out_dir`` must be absent, or (with ``overwrite``) an earlier export; it is written
    beside itself and renamed into place. ``hf-hub:`` / ``local-dir:`` models are refused
    (they already are Hub folders) unless a checkpoint follows them
    (``open_clip:local-dir:tiny-clip:logs/tiny/checkpoints/epoch_1.pt``: the folder's config,
    the checkpoint's weights). ``sentence_transformers``: also write the sentence-transformers
    files and module code (:func:`sentence_transformers_files`; ``vlr export --no-remote-code`` leaves
    them out, and the folder holds no code).

    Example::

        export_open_clip("ViT-B-16-quickgelu-ctx248", "logs/run/checkpoints/epoch_6.pt", False,
                         "exports/longclip-b16", spec="open_clip:ViT-B-16-quickgelu-ctx248:...")
    """
    from open_clip.constants import HF_CONFIG_NAME, HF_SAFE_WEIGHTS_NAME
    from open_clip.push_to_hf_hub import save_config_for_hf
    from safetensors.torch import save_file

    from vlr_plugins._io import staged_dir
    from vlr_plugins.hf.export import check_export_target
    from vlr_plugins.integrations.open_clip.text_model import load_open_clip_text_model

    if own_scheme and pretrained is None:
        raise UsageError(setting, f"{spec!r} is already an open_clip Hub model; `vlr push` a local-dir "
                                  "folder as it is, or give open_clip:MODEL:CHECKPOINT (or "
                                  "open_clip:local-dir:FOLDER:CHECKPOINT)")
    out_dir = Path(out_dir)
    check_export_target(out_dir, overwrite=overwrite, flag=flag)
    text = load_open_clip_text_model(model_name, pretrained, own_scheme, spec=spec, setting=setting)
    model, tokenizer = text.model.float().eval(), text.tokenizer
    cfg = open_clip_model_config(model_name, int(model.context_length))

    with staged_dir(out_dir) as tmp:
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        save_file(state, tmp / HF_SAFE_WEIGHTS_NAME, metadata={"format": "pt"})
        if hasattr(tokenizer, "save_pretrained"):  # an HFTokenizer: open_clip reads it from the folder
            tokenizer.save_pretrained(tmp)
        save_config_for_hf(model, tmp / HF_CONFIG_NAME, model_config=cfg)
        if card is not None:  # README.md (+ eval_results.json): vlr_plugins.hf.open_clip_card
            from vlr_plugins.hf.open_clip_card import open_clip_card_files
            from vlr_plugins.integrations.open_clip.long_context import parse_long_context_name

            files = open_clip_card_files(architecture=model_name, context_length=int(model.context_length),
                                         embed_dim=int(cfg["embed_dim"]), sentence_transformers=sentence_transformers,
                                         long_context=parse_long_context_name(model_name) is not None, **card)
            for name, text in files.items():
                (tmp / name).write_text(text, encoding="utf-8")
        if sentence_transformers:
            for name, text in sentence_transformers_files().items():
                (tmp / name).write_text(text, encoding="utf-8")
            shutil.copyfile(Path(__file__).with_name(_ST_CODE), tmp / _ST_CODE)
        _check_folder(tmp, model, tokenizer)
        if sentence_transformers:
            _check_sentence_transformers(tmp, model, tokenizer)
    return out_dir
