"""An export as an MTEB encoder: ``encode`` of MTEB's DataLoader batches (texts, images, videos) with the export's towers.

:class:`VlrExportEncoder` implements ``mteb.models.EncoderProtocol`` (through ``AbsEncoder``)
and carries its ``ModelMeta`` (:func:`~vlr_plugins.integrations.mteb.meta.export_model_meta`),
so ``mteb.evaluate(VlrExportEncoder(folder), tasks)`` scores an export on any of MTEB's
retrieval tasks whose modalities it has. Similarity is cosine (every export's space).

Each batch of MTEB's DataLoader is a dict of columns: ``text`` (strings, truncated at the
export's token budget by its tokenizer), ``image`` (PIL images, through the export's own
preprocessing) and ``video`` (decoders of the clips: this encoder's collator decodes the
frames the export samples, :func:`vlr_plugins.data.video.frame_indices` with the export's
``num_frames`` and strategy). An input with several modalities (an image and its caption)
is the sum of their embeddings, as MTEB's own CLIP wrappers do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from mteb.models.abs_encoder import AbsEncoder

from vlr_plugins.integrations.mteb._folder import ExportFolder, read_export_folder
from vlr_plugins.integrations.mteb.meta import export_model_meta
from vlr_plugins.integrations.mteb.towers import Towers, load_towers

__all__ = ["ClipCollator", "VlrExportEncoder", "load_export_encoder"]

_MODALITIES = ("text", "image", "video")


class ClipCollator:
    """A batch of MTEB rows -> a dict of columns, each ``video`` decoded to (T, 3, H, W) uint8 frames:
    ``num_frames`` of them picked by ``strategy`` (vlr's :func:`~vlr_plugins.data.video.frame_indices`)."""

    def __init__(self, num_frames: int, strategy: str) -> None:
        self.num_frames, self.strategy = num_frames, strategy

    def frames(self, video: Any) -> torch.Tensor:
        if isinstance(video, torch.Tensor):  # frames already decoded
            return video
        from vlr_plugins.data.video.sampling import frame_indices

        count = video.metadata.num_frames
        if not count:
            raise ValueError("a video without a frame count in its metadata cannot be sampled")
        fps = getattr(video.metadata, "average_fps", None)
        indices = frame_indices(int(count), self.num_frames, self.strategy, seed=0, video_fps=fps)
        return video.get_frames_at(indices).data

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
        columns: dict[str, list[Any]] = {key: [] for key in rows[0]}
        for row in rows:
            for key, value in row.items():
                columns[key].append(self.frames(value) if key == "video" else value)
        return columns


class VlrExportEncoder(AbsEncoder):
    """An exported folder (any of the four kinds, ``docs/hub.md``) as an MTEB encoder.

    Args:
        model_name: the export's folder (MTEB's loader passes the model's name first; the
            folder is ``folder`` when given, else this).
        revision: ignored (the revision is a fingerprint of the folder's files).
        device: where the towers run (default: CUDA when available).
        folder: the export's folder.
        name: the model's name in MTEB's results (``organization/name``; default: the Hub id
            the card records, else ``vlr-local/<folder name>``).
        view: the caption view whose token budget (and MVC CLS) texts get; default: the export's.
        dtype: an EOL model's dtype (``bfloat16``, ...); default: as saved.
    """

    def __init__(self, model_name: str | None = None, revision: str | None = None, *, device: str | None = None,
                 folder: str | Path | None = None, name: str | None = None, view: str | None = None,
                 dtype: str | None = None, export: ExportFolder | None = None, **kwargs: Any) -> None:
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.export = export or read_export_folder(folder if folder is not None else model_name)
        self.towers: Towers = load_towers(self.export, device, view=view, dtype=dtype)
        self.model = self.towers.model
        self.mteb_model_meta = export_model_meta(self.export, self.towers, loader=load_export_encoder, name=name, view=view, dtype=dtype)

    def _embed(self, modality: str, items: list[Any]) -> torch.Tensor:
        return getattr(self.towers, modality)(items)

    def encode(self, inputs: Any, *, task_metadata: Any, hf_split: str, hf_subset: str, prompt_type: Any = None,
               show_progress_bar: bool = False, **kwargs: Any) -> torch.Tensor:
        """(N, D) unit-norm float32 rows, one per row of ``inputs`` (an MTEB DataLoader), in order."""
        features = set(inputs.dataset.features)
        modalities = [m for m in _MODALITIES if m in features]
        if not modalities:
            raise ValueError(f"no text, image or video column in this input (columns: {sorted(features)})")
        for m in modalities:
            if not self.towers.has(m):
                self._embed(m, [])  # raises the tower's own MissingTowerError
        if "video" in modalities:
            inputs.collate_fn = ClipCollator(self.towers.num_frames, self.towers.frame_strategy)
        rows: list[torch.Tensor] = []
        from tqdm.auto import tqdm

        for batch in tqdm(inputs, disable=not show_progress_bar, desc=f"Encoding {'+'.join(modalities)}"):
            parts = [self._embed(m, list(batch[m])) for m in modalities]
            rows.append(torch.stack(parts).sum(0) if len(parts) > 1 else parts[0])
        return torch.cat(rows) if rows else torch.empty(0, self.towers.embed_dim)


def load_export_encoder(model_name: str, revision: str | None = None, **kwargs: Any) -> VlrExportEncoder:
    """The loader a :class:`~mteb.models.ModelMeta` of an export names (``meta.load_model()``)."""
    return VlrExportEncoder(model_name, revision, **kwargs)
