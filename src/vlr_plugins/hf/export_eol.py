"""Export an MLLM embedder (CaRe, E5-V) as a Hub-ready folder: full weights, or a LoRA adapter over a named base.

The folder is the MLLM's own transformers folder, so everything that loads the base model
loads it (``AutoModelForImageTextToText``, vLLM, stage II's ``pretrained``), plus:

* ``modeling_vlr_eol.py`` and ``auto_map: {"AutoModel": ...}`` in ``config.json``, so that
  ``AutoModel.from_pretrained(folder, trust_remote_code=True)`` returns the embedding model
  (:class:`~vlr_plugins.hf.modeling_vlr_eol.VlrEOLEmbeddingModel`) -- no vlr-plugins needed;
* a ``vlr_eol`` block in ``config.json``: the EOL prompts, the frames and pixel limits of
  clips, and for an adapter export where the adapter is and which base it goes on;
* the sentence-transformers files (:mod:`~vlr_plugins.hf.sentence_transformers_eol`);
* ``README.md`` (the model card) and ``eval_results.json`` when given as ``extra_files``.

An adapter export holds ``adapter/adapter_config.json`` + ``adapter/adapter_model.safetensors``
(peft's own layout, ``base_model_name_or_path`` = the base) and, at the root, the base's
config (with the two additions above) and processor -- no base weights. The adapter lives in
a subfolder so that transformers' own adapter handling, which would swap the folder for
the base and lose the ``auto_map``, does not take over.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vlr_plugins._io import staged_dir
from vlr_plugins.errors import ConfigError
from vlr_plugins.hf.export import check_export_target

__all__ = ["ADAPTER_FOLDER", "eol_settings", "export_eol_embedder"]

#: where an adapter export keeps peft's files
ADAPTER_FOLDER = "adapter"
_REMOTE_CODE = "modeling_vlr_eol.py"
_AUTO_CLASS = "modeling_vlr_eol.VlrEOLEmbeddingModel"
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def eol_settings(embedder: Any, *, recipe: str | None = None, adapter: str | None = None,
                 base_model: str | None = None) -> dict[str, Any]:
    """The ``vlr_eol`` block of an exported ``config.json``: what the remote code needs to embed
    as ``embedder`` does (plain JSON types only)."""
    import vlr_plugins

    prompt = embedder.prompt
    video = embedder.video_input
    return {
        "kind": embedder.kind,
        "prompt": {"name": prompt.name, "text": prompt.text, "image": prompt.image, "video": prompt.video,
                   "chat_template": prompt.chat_template, "strip": prompt.strip},
        "video_input": {"num_frames": video.num_frames, "strategy": video.strategy, "frame_repeat": video.frame_repeat,
                        "min_pixels": video.min_pixels, "max_pixels": video.max_pixels},
        "max_text_tokens": embedder.max_text_tokens,
        "adapter": adapter,
        "base_model": base_model,
        "recipe": recipe,
        "vlr_plugins_version": vlr_plugins.__version__,
    }


def _peft_wrapper(model: Any) -> Any:
    """The peft ``PeftModel`` of a LoRA-trained model (``EOLContrastiveModel`` keeps it apart), or None."""
    wrappers = getattr(model, "_peft", None)
    if wrappers:
        return wrappers[-1]
    return model if type(model).__name__.startswith("Peft") else None


def _has_lora(module: torch.nn.Module) -> bool:
    return any("lora_" in name for name, _ in module.named_parameters())


def _write_config(folder: Path, settings: Mapping[str, Any], remote_code: bool) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["vlr_eol"] = dict(settings)
    if remote_code:
        config["auto_map"] = {**(config.get("auto_map") or {}), "AutoModel": _AUTO_CLASS}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _fingerprint(tensor: torch.Tensor) -> tuple[Any, ...]:
    import hashlib

    t = tensor.detach().cpu().contiguous()
    digest = hashlib.blake2b(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"", digest_size=16)
    return str(t.dtype), tuple(t.shape), digest.hexdigest()


def _verify(folder: Path, expected: Mapping[str, torch.Tensor], what: str) -> None:
    """The safetensors of ``folder`` hold exactly the tensors of ``expected`` (tied ones once),
    compared by content, one tensor at a time: transformers may rename keys on saving
    (its checkpoint conversion), so names are not compared."""
    from collections import Counter

    from safetensors import safe_open

    seen: set[tuple[int, tuple[int, ...]]] = set()
    wanted: Counter = Counter()
    for value in expected.values():
        storage = (value.data_ptr(), tuple(value.shape))
        if storage not in seen:  # tied weights (lm_head = embed_tokens) are written once
            seen.add(storage)
            wanted[_fingerprint(value)] += 1
    written: Counter = Counter()
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                written[_fingerprint(f.get_tensor(key))] += 1
    if written != wanted:
        missing, extra = sum((wanted - written).values()), sum((written - wanted).values())
        raise RuntimeError(f"{folder}: the {what} weights do not round-trip through safetensors ({missing} of "
                           f"the model's tensors not found as written, {extra} written tensors not the model's)")


def export_eol_embedder(
    model: Any,
    out_dir: str | os.PathLike[str],
    *,
    adapter: bool | None = None,
    base_model: str | None = None,
    recipe: str | None = None,
    remote_code: bool = True,
    sentence_transformers: bool = True,
    overwrite: bool = False,
    verify: bool = True,
    extra_files: Mapping[str, str | bytes] | None = None,
) -> Path:
    """Write ``out_dir``: an MLLM embedder as a folder ``AutoModel.from_pretrained(out_dir,
    trust_remote_code=True)`` turns back into it (module docstring).

    ``model``: an :class:`~vlr_plugins.mllm.EOLEmbedder`, or a trained model holding one as
    ``.embedder`` (``EOLContrastiveModel``, ``CaptionSFTModel``). ``adapter``: write only the
    LoRA adapter (default: when the model has LoRA layers); it goes over ``base_model`` (a Hub
    id or folder; default the adapter's own ``base_model_name_or_path``), which the card and
    ``config.json`` name and which a loader needs. To export a LoRA-trained model as full
    weights, merge first (``EOLContrastiveModel.merge_lora()``). ``recipe``: the name
    recorded in ``vlr_eol.recipe``. ``sentence_transformers``: add the files of
    :func:`~vlr_plugins.hf.sentence_transformers_eol.sentence_transformers_files`.
    ``extra_files``: name -> text or bytes (``README.md``, ``eval_results.json``).

    Written beside ``out_dir`` and renamed into place; ``overwrite`` replaces an earlier
    export only (:func:`~vlr_plugins.hf.check_export_target`). ``verify`` reads every
    written tensor back from the safetensors and compares it with the model's. Nothing
    that needs unpickling is written.

    Example::

        export_eol_embedder(EOLEmbedder("work_dirs/care_stage2/merged"), "care-7b", recipe="care/stage2_paper")
        AutoModel.from_pretrained("care-7b", trust_remote_code=True).encode_text(["a dog runs"])
    """
    from vlr_plugins.hf.sentence_transformers_eol import sentence_transformers_files

    out_dir = Path(out_dir)
    check_export_target(out_dir, overwrite=overwrite)
    embedder = getattr(model, "embedder", model)
    if not hasattr(embedder, "prompt") or not hasattr(embedder, "processor"):
        raise TypeError(f"expected an EOLEmbedder or a model holding one as .embedder, found {type(model).__name__}")
    peft_model = _peft_wrapper(model)
    lora = peft_model is not None or _has_lora(embedder.model)
    adapter = lora if adapter is None else bool(adapter)
    if adapter and peft_model is None:
        raise ConfigError("adapter=True needs a LoRA-trained model: an EOLContrastiveModel with finetune='lora' "
                          "(or a peft PeftModel); this one has no peft wrapper")
    if not adapter and lora:
        raise ConfigError("this model carries LoRA adapters: export them with adapter=True, or fold them into the "
                          "weights first (EOLContrastiveModel.merge_lora()) for a full-weights export")
    if adapter:
        peft_config = peft_model.peft_config[peft_model.active_adapter]
        base_model = base_model or peft_config.base_model_name_or_path
        if not base_model:
            raise ConfigError("an adapter export must name its base model: pass base_model= (a Hub id or folder)")
    settings = eol_settings(embedder, recipe=recipe, adapter=ADAPTER_FOLDER if adapter else None,
                            base_model=str(base_model) if adapter else None)

    with staged_dir(out_dir) as tmp:
        if adapter:
            from peft import get_peft_model_state_dict

            peft_model.save_pretrained(tmp / ADAPTER_FOLDER, safe_serialization=True)
            adapter_config = tmp / ADAPTER_FOLDER / "adapter_config.json"
            meta = json.loads(adapter_config.read_text(encoding="utf-8"))
            meta["base_model_name_or_path"] = str(base_model)
            adapter_config.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            embedder.model.config.to_json_file(str(tmp / "config.json"))
            expected = get_peft_model_state_dict(peft_model)
            verify_folder, what = tmp / ADAPTER_FOLDER, "adapter"
        else:
            embedder.model.save_pretrained(tmp, safe_serialization=True)
            expected, verify_folder, what = embedder.model.state_dict(), tmp, "model"
        embedder.processor.save_pretrained(tmp)
        _write_config(tmp, settings, remote_code)
        if remote_code:
            shutil.copyfile(Path(__file__).with_name(_REMOTE_CODE), tmp / _REMOTE_CODE)
        files = dict(sentence_transformers_files(embedder)) if sentence_transformers else {}
        files.update(extra_files or {})
        for name, content in files.items():
            target = tmp / name
            if ".." in Path(name).parts or Path(name).is_absolute():
                raise ValueError(f"extra file names are paths inside the folder, found {name!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
        pickled = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.name.endswith(_PICKLE_SUFFIXES))
        if pickled:
            raise RuntimeError(f"export wrote files that would need unpickling to load: {pickled}")
        if verify:
            _verify(verify_folder, expected, what)
    return out_dir
