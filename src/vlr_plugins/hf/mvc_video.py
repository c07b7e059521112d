"""The video side of an MVC export: the trained tower a ``vlr train mvc`` checkpoint holds, and
the video processor that makes its clips as ``vlr precompute --encoder vlr:CHECKPOINT`` does.

:func:`checkpoint_video_tower` rebuilds the tower from ``meta['vlr_video_encoder']`` and the
``video_encoder.*`` weights (as :func:`vlr_plugins.precompute.video_encoders.trained_tower`
does for ``vlr precompute``), refusing with one error naming the file and the key a tower
type the export does not restate, a config that does not build, weights that do not fit,
or a tower whose embeddings are not in the text encoder's space.
:func:`video_processor_for` is the folder's ``VlrVideoProcessor`` for a ``video_config``.
"""

from __future__ import annotations

import os
from typing import Any

from vlr_plugins.errors import DataFormatError

__all__ = ["checkpoint_video_tower", "save_video_processor", "video_processor_for"]

_KEY = "meta.vlr_video_encoder"
_PREFIX = "video_encoder."


def checkpoint_video_tower(checkpoint: str | os.PathLike, text_encoder: Any = None) -> Any:
    """The trained video tower of ``checkpoint`` (a ``SpaceTimeViT`` in eval mode), or ``None``
    when the checkpoint records none (a text-only run).

    ``text_encoder``: when given, the tower must embed into its space (same ``embed_dim``) and
    give tokens as wide as its fusion layers read (``video_width``).
    """
    from vlr_plugins.checkpoint_meta import load_weights_only
    from vlr_plugins.hf.configuration_vlr_video import VIDEO_TOWER_TYPES
    from vlr_plugins.vision import SpaceTimeViT

    path = os.fspath(checkpoint)
    ckpt = load_weights_only(path)
    meta = ckpt.get("meta") if isinstance(ckpt, dict) else None
    cfg = meta.get("vlr_video_encoder") if isinstance(meta, dict) else None
    if cfg is None:
        return None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("type"), str):
        raise DataFormatError(path, f"expected the video tower's registry config (a mapping with 'type'), found "
                                    f"{type(cfg).__name__ if not isinstance(cfg, dict) else 'no type'}", field=_KEY)
    kind = cfg["type"]
    if kind not in VIDEO_TOWER_TYPES:
        raise DataFormatError(path, f"records a {kind!r} video tower; vlr export bundles only "
                                    f"{', '.join(VIDEO_TOWER_TYPES)} towers (the ones `vlr train mvc` trains)",
                              field=f"{_KEY}.type")
    args = {k: v for k, v in cfg.items() if k not in ("type", "pretrained", "checkpoint_layout")}
    try:
        tower = SpaceTimeViT(**args)
    except (TypeError, ValueError) as e:
        raise DataFormatError(path, f"cannot build its {kind} from the recorded config: {e}", field=_KEY) from None
    state = ckpt.get("state_dict") if isinstance(ckpt.get("state_dict"), dict) else {}
    weights = {k[len(_PREFIX):]: v for k, v in state.items() if str(k).startswith(_PREFIX)}
    if not weights:
        raise DataFormatError(path, f"records a {kind} video tower but holds no '{_PREFIX}*' weights",
                              field="state_dict")
    try:
        missing, unexpected = tower.load_state_dict(weights, strict=False)
    except RuntimeError as e:  # shapes that do not fit
        problem = " ".join(str(e).split("\n\t")[1:2]) or str(e)
        raise DataFormatError(path, f"its '{_PREFIX}*' weights do not fit the recorded {kind}: {problem}",
                              field="state_dict") from None
    if missing or unexpected:
        raise DataFormatError(path, f"its '{_PREFIX}*' weights do not fit the recorded {kind} (missing "
                                    f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})", field="state_dict")
    if text_encoder is not None:
        if tower.embed_dim != text_encoder.embed_dim:
            raise DataFormatError(path, f"its video tower embeds in {tower.embed_dim} dims but its text encoder in "
                                        f"{text_encoder.embed_dim}: they do not share one space", field=_KEY)
        if tower.width != text_encoder.video_width:
            raise DataFormatError(path, f"its video tower's tokens are {tower.width} wide but the text encoder's "
                                        f"fusion layers read {text_encoder.video_width}-wide tokens", field=_KEY)
    return tower.eval()


def video_processor_for(video_config: dict[str, Any]) -> Any:
    """The ``VlrVideoProcessor`` that makes ``video_config``'s clips: ``num_frames`` middle frames,
    shorter side to ``image_size`` (bicubic, antialiased), centre crop, the tower's mean / std."""
    from transformers.image_utils import PILImageResampling

    from vlr_plugins.hf.video_processing_vlr import VlrVideoProcessor

    size = int(video_config["image_size"])
    return VlrVideoProcessor(
        size={"shortest_edge": size}, crop_size={"height": size, "width": size},
        resample=PILImageResampling.BICUBIC, num_frames=int(video_config["num_frames"]), do_sample_frames=True,
        image_mean=[float(v) for v in video_config["image_mean"]],
        image_std=[float(v) for v in video_config["image_std"]])


def save_video_processor(video_config: dict[str, Any], folder: str | os.PathLike, *, remote_code: bool,
                         tokenizer: Any = None) -> None:
    """Write :func:`video_processor_for` ``video_config`` into ``folder``
    (``video_preprocessor_config.json``; with ``remote_code`` also ``video_processing_vlr.py``
    and the ``auto_map`` that lets ``AutoVideoProcessor`` load it without vlr-plugins).

    With ``tokenizer``, also the pair as one ``AutoProcessor`` (``processor_config.json``,
    ``processing_vlr.VlrVideoTextProcessor``), which sentence-transformers loads."""
    from vlr_plugins.hf._auto_class import registered_for_auto_class
    from vlr_plugins.hf.processing_vlr import VlrVideoTextProcessor

    processor = video_processor_for(video_config)
    pair = VlrVideoTextProcessor(video_processor=processor, tokenizer=tokenizer) if tokenizer is not None else None
    code = [(type(processor), "AutoVideoProcessor")] + ([(VlrVideoTextProcessor, "AutoProcessor")] if pair else [])
    with registered_for_auto_class(*(code if remote_code else ())):
        processor.save_pretrained(folder)  # video_preprocessor_config.json: AutoVideoProcessor reads only it
        if pair is not None:
            pair.save_pretrained(folder)
