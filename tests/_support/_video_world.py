"""A tiny video world for the video-evaluation tests, written at test time.

* :func:`save_tiny_open_clip`: a random tiny open_clip CLIP (32-d, 24 text positions) saved
  as open_clip saves a model folder (``open_clip_config.json`` + safetensors weights), so
  ``open_clip:local-dir:<folder>`` loads it;
* :func:`write_msrvtt` / :func:`write_carebench`: videos (``tests/data/_videos.py``) and their
  official annotation files: MSR-VTT's ``MSRVTT_JSFUSION_test.csv`` (1k-A) and CaReBench's
  ``json/metadata.json``;
* :func:`write_video_store`: the store ``vlr precompute --videos`` would write: each video's
  frames sampled, transformed for evaluation, frame-pooled by a
  :class:`~vlr_plugins.vision.FramePooledVideoEncoder`, with ``frames``/``sampler`` in its meta.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

from _videos import write_video  # noqa: E402

TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 24, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}

MSRVTT = {  # video id -> its 1k-A sentence
    "video7579": "a girl wearing red top and black trousers is putting a sweater on a dog",
    "video7725": "young people sit around the edges of a room clapping",
    "video9258": "a man is talking, then he sings",
}

CAREBENCH = ["v_00000030_5", "v_00002049_5", "v_00001105_2", "v_00004411_7"]


def save_tiny_open_clip(folder: Path, seed: int = 0) -> Path:
    """A random tiny CLIP in ``folder`` (created), as open_clip's ``local-dir:`` reads it."""
    import open_clip
    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = open_clip.CLIP(**TINY_CLIP)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": TINY_CLIP, "preprocess_cfg": {}}))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / "open_clip_model.safetensors"))
    return folder


def load_tiny_open_clip(folder: Path):
    """``(model, tokenizer)`` of a folder written by :func:`save_tiny_open_clip`, in eval mode."""
    import open_clip

    model = open_clip.create_model(f"local-dir:{folder}").eval()
    return model, open_clip.get_tokenizer(f"local-dir:{folder}")


def _videos(folder: Path, ids: list[str]) -> dict[str, str]:
    """One small H.264 video per id, each of a different length (so their sampled frames differ)."""
    folder.mkdir(parents=True, exist_ok=True)
    return {vid: write_video(folder / vid, "h264", num_frames=18 + 7 * i, width=48, height=40)
            for i, vid in enumerate(ids)}


def write_msrvtt(root: Path) -> tuple[Path, dict[str, str]]:
    """``(MSRVTT_JSFUSION_test.csv, {video id: video path})``."""
    videos = _videos(root / "MSRVTT" / "videos" / "all", list(MSRVTT))
    path = root / "msrvtt_data" / "MSRVTT_JSFUSION_test.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["key", "vid_key", "video_id", "sentence"])
        for i, (vid, sentence) in enumerate(MSRVTT.items()):
            writer.writerow([f"ret{i}", f"msr{vid[5:]}", vid, sentence])
    return path, videos


def write_carebench(root: Path) -> tuple[Path, dict[str, str]]:
    """``(json/metadata.json, {video id: video path})``: one general, spatial and temporal caption per video."""
    videos = _videos(root / "CaReBench" / "videos", CAREBENCH)
    actions = ["jumps over a bar", "folds a towel", "pours tea for a friend", "brushes a dog"]
    records = [{"video": f"{vid}.mp4",
                "caption": f"A person in a {color} shirt {act}, then turns to the camera and smiles.",
                "spatial_caption": f"A person in a {color} shirt stands in a bright room with a {thing}.",
                "temporal_caption": f"The person {act} and then turns around slowly.",
                "category": "sports & exercise"}
               for vid, color, act, thing in zip(CAREBENCH, ["red", "blue", "green", "white"], actions,
                                                 ["bar", "towel", "teapot", "dog"])]
    path = root / "CaReBench" / "json" / "metadata.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records), encoding="utf-8")
    return path, videos


def embed_videos(videos: dict[str, str], encoder, frames: int, sampler: str) -> dict[str, torch.Tensor]:
    """Each video's embedding: ``frames`` frames by ``sampler``, resized and normalised for the
    encoder's tower, frame-pooled. ``{id: (D,)}``."""
    from vlr_plugins.data.video import sample_frames, video_transform

    transform = video_transform(False, encoder.image_size, encoder.image_mean, encoder.image_std)
    with torch.no_grad():
        return {vid: encoder.encode_video(transform(sample_frames(path, frames, sampler))[None])[0]
                for vid, path in videos.items()}


def write_video_store(out: Path, embeddings: dict[str, torch.Tensor], *, frames: int | None, sampler: str | None,
                      encoder: str = "tiny-clip") -> Path:
    """A store of ``embeddings`` whose meta records the frames they come from (``None``: not recorded)."""
    from vlr_plugins.data import EmbeddingStoreWriter

    meta = {"encoder": encoder, **({"frames": frames} if frames is not None else {}),
            **({"sampler": sampler} if sampler is not None else {})}
    dim = next(iter(embeddings.values())).shape[0]
    with EmbeddingStoreWriter(out, dim, meta=meta) as writer:
        writer.add(list(embeddings), torch.stack(list(embeddings.values())))
    return out
