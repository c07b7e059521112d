"""Stage I weights into a Stage II video tower (MVC / UMT two-stage pretraining).

MVC's Stage I, *video representation initialization*, is a video-only model (public SMILE
checkpoints; VideoMAE and UMT ones load too); Stage II, *video-text alignment*, starts its
video tower from it (multi-view-captions sec. 4). The tower's pooled head and projection
(:data:`STAGE_TWO_HEADS`) exist only in Stage II, so they may be missing from the file and
start fresh; any other gap means the tower is not the checkpoint's architecture and is
refused, naming the file.
"""

from __future__ import annotations

import logging

from torch import nn

from vlr_plugins.errors import ConfigError
from vlr_plugins.vision.video_checkpoints import load_video_checkpoint

__all__ = ["STAGE_TWO_HEADS", "load_stage_one"]

logger = logging.getLogger(__name__)

#: the video tower's parts a Stage I (SMILE / VideoMAE) checkpoint lacks: they start fresh
STAGE_TWO_HEADS = ("pool_norm.", "proj.")


def load_stage_one(tower: nn.Module, path: str, layout: str = "auto") -> list[str]:
    """Load Stage I weights (SMILE, VideoMAE, UMT) into ``tower``; returns the keys it lacked,
    which may only be :data:`STAGE_TWO_HEADS`. Any other gap, or a key the tower has no place
    for, is a :class:`~vlr_plugins.errors.ConfigError` naming the file.

    ``tower``: a :class:`~vlr_plugins.vision.SpaceTimeViT`; ``path``: the checkpoint file;
    ``layout``: one of :data:`~vlr_plugins.vision.CHECKPOINT_LAYOUTS` or ``"auto"``.
    """
    try:
        loaded = load_video_checkpoint(tower, path, layout=layout, strict=False)
    except (ValueError, KeyError, TypeError, FileNotFoundError) as e:
        message = str(e.args[0] if isinstance(e, KeyError) and e.args else e)
        if message.startswith(f"{path} "):  # the loader's own messages start with the file
            raise ConfigError(f"video checkpoint {message}") from None
        raise ConfigError(f"video checkpoint {path}: {message}") from None
    gaps = [k for k in loaded.missing if not k.startswith(STAGE_TWO_HEADS)]
    if gaps or loaded.unexpected:
        parts = ([f"the tower has no weights for {gaps[:5]}"] if gaps else []) + (
            [f"the tower has no place for {loaded.unexpected[:5]}"] if loaded.unexpected else [])
        raise ConfigError(f"video checkpoint {path} ({loaded.layout} layout) does not fit video.encoder: "
                          f"{'; '.join(parts)} (check width, depth, tubelet_size, final_norm and the layout)")
    if loaded.missing:
        logger.info("video checkpoint %s: %s start fresh", path, sorted({k.split('.')[0] for k in loaded.missing}))
    return loaded.missing
