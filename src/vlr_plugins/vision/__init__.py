"""Vision side: image and video towers into a shared retrieval space.

Every video tower follows :class:`VideoTower` (``encode_video``, ``encode_image`` and the
normalisation attributes). :class:`FramePooledVideoEncoder` runs any image tower (open_clip,
timm, transformers CLIP/BLIP) per frame and mean-pools; :class:`SpaceTimeViT` is a
VideoMAE / UMT-layout video ViT with joint space-time attention, loadable from VideoMAE,
UMT and SMILE checkpoints (:func:`load_video_checkpoint`); :func:`load_stage_one` starts a
Stage II tower from Stage I weights (MVC / UMT pretraining), its new heads fresh.

``import vlr_plugins.vision`` needs only torch: open_clip, timm and transformers are
imported when a tower is built.
"""

from __future__ import annotations

from vlr_plugins.vision.frame_pooled import FramePooledVideoEncoder
from vlr_plugins.vision.image_tower import (
    CLIP_MEAN,
    CLIP_STD,
    IMAGENET_MEAN,
    IMAGENET_STD,
    ImageTower,
    build_image_tower,
    wrap_image_tower,
)
from vlr_plugins.vision.positions import resample_spatial, resample_temporal, sincos_table, sincos_video_table
from vlr_plugins.vision.protocol import VideoTower
from vlr_plugins.vision.space_time_vit import SpaceTimeOutput, SpaceTimeViT
from vlr_plugins.vision.stage_one import STAGE_TWO_HEADS, load_stage_one
from vlr_plugins.vision.token_drop import gather_tokens, keep_index
from vlr_plugins.vision.video_checkpoints import (
    CHECKPOINT_LAYOUTS,
    VIDEOMAE_FC_NORM_EPS,
    LoadedCheckpoint,
    detect_layout,
    load_video_checkpoint,
    read_state_dict,
    smile_to_space_time,
    umt_to_space_time,
    videomae_to_space_time,
)

__all__ = [
    "CHECKPOINT_LAYOUTS",
    "CLIP_MEAN",
    "CLIP_STD",
    "FramePooledVideoEncoder",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "ImageTower",
    "LoadedCheckpoint",
    "SpaceTimeOutput",
    "STAGE_TWO_HEADS",
    "SpaceTimeViT",
    "VIDEOMAE_FC_NORM_EPS",
    "VideoTower",
    "build_image_tower",
    "detect_layout",
    "gather_tokens",
    "keep_index",
    "load_stage_one",
    "load_video_checkpoint",
    "read_state_dict",
    "resample_spatial",
    "resample_temporal",
    "sincos_table",
    "sincos_video_table",
    "smile_to_space_time",
    "umt_to_space_time",
    "videomae_to_space_time",
    "wrap_image_tower",
]
