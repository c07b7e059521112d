"""What a recipe holds: text views, data, video, optimisation, evaluation splits (dataclasses).

The text views are the data layer's (:mod:`vlr_plugins.data.text_views`): a recipe only
names them. ``data.schema`` says which training samples the views read: ``paragraph``
(images, the paragraph-supervision paper) or ``mvc`` (videos with multi-view captions,
whose recipes add a ``video`` section: the video tower and how clips are read).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from vlr_plugins.data.text_views import TextView, TextViews
from vlr_plugins.data.video.sampling import ClipSampler
from vlr_plugins.recipe.errors import RecipeError, Source
from vlr_plugins.recipe.overrides import ValueSources

__all__ = ["TextView", "TextViews", "HardNegativeBatching", "DataSpec", "VideoSpec", "EvalSplit", "TrainSpec", "Recipe"]


@dataclass(frozen=True)
class HardNegativeBatching:
    """``data.hard_negatives`` of an ``mvc`` recipe: batches composed so that each anchor video
    shares its batch with up to ``per_anchor`` of its mined hard-negative videos (the
    corpus's ``hard_negatives``, ``vlr mine mvc``), where VTC and VTM see them
    (:class:`~vlr_plugins.data.HardNegativeBatchSampler`)."""

    per_anchor: int = 1


@dataclass(frozen=True)
class DataSpec:
    """Where training samples and the precomputed image embeddings live.

    ``schema``: the samples' kind, ``paragraph`` (:func:`~vlr_plugins.data.read_paragraph_samples`,
    against ``image_embeddings``) or ``mvc`` (:func:`~vlr_plugins.data.read_mvc_samples`: videos
    whose relative paths are taken from ``video_root``, default the samples file's folder).
    ``fraction`` < 1 keeps a seeded random subset of the samples (the data-efficiency
    ablation); ``seed`` makes the subset and the per-step view draws reproducible.
    ``hard_negatives`` (``mvc`` only; ``None``: off): batch each video with its mined
    hard-negative videos (:class:`HardNegativeBatching`).
    """

    train: str | None = None
    image_embeddings: str | None = None
    fraction: float = 1.0
    seed: int = 0
    schema: Literal["paragraph", "mvc"] = "paragraph"
    video_root: str | None = None
    hard_negatives: HardNegativeBatching | None = None


@dataclass(frozen=True)
class VideoSpec:
    """The video side of an ``mvc`` recipe: the tower that trains and how its clips are read.

    ``encoder``: a registered video tower config (``type: SpaceTimeViT`` and its arguments;
    ``num_frames`` / ``image_size`` follow ``frames`` / ``image_size``). ``checkpoint``: the
    weights it starts from (MVC: SMILE's, Stage I), in ``checkpoint_layout``; the heads the
    checkpoint lacks (``pool_norm``, ``proj``) start fresh. ``'???'`` marks a path the run must
    give (``--set video.checkpoint=PATH``; ``null``: random weights).

    Clips: ``frames`` frames per video picked by ``sampler`` (``rand``: one random frame in
    each of N segments, UMT's training rule), randomly resized and cropped to ``image_size``
    (area ``crop_scale``) and flipped, normalised with ``mean`` / ``std`` (``null``: the
    tower's own). ``backend``: the decoder. ``check_files``: every video file is looked for
    before the first step. ``trainable: false`` freezes the tower (no gradient through it).
    """

    encoder: dict[str, Any] | None = None
    checkpoint: str | None = None
    checkpoint_layout: Literal["auto", "videomae", "umt", "smile", "native"] = "auto"
    frames: int = 16
    sampler: ClipSampler = "rand"
    image_size: int = 224
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    crop_scale: tuple[float, float] = (0.5, 1.0)
    backend: Literal["pyav", "torchcodec"] = "pyav"
    check_files: bool = True
    trainable: bool = True


@dataclass(frozen=True)
class EvalSplit:
    """A retrieval split evaluated during/after training (JSON Lines of ``{id, texts}``)."""

    name: str
    ann_file: str
    max_tokens: int
    image_embeddings: str | None = None


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation hyperparameters (the paper's: AdamW 1e-5, batch 256, 500 warm-up, 10 epochs).

    ``mvc`` recipes also read ``warmup_epochs`` (a warm-up in epochs instead of
    ``warmup_steps``; MVC: one), ``amp_dtype`` (``float16`` or ``bfloat16`` under
    ``amp: true``) and ``grad_checkpointing`` (recompute the towers' blocks in the backward
    pass: the video tower's and the text layers').

    ``length_blocks`` (paragraph recipes): encode each batch's texts in at most that many
    blocks of similar length, each cut to its own longest text
    (:func:`~vlr_plugins.text.encode_in_length_blocks`); 1 pads every text of the batch to
    the longest one. Same embeddings and gradients (to float rounding), fewer padded tokens
    when captions and paragraphs share a batch.
    """

    batch_size: int = 256
    epochs: int = 10
    lr: float = 1e-5
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_steps: int = 500
    warmup_start_factor: float = 0.001
    min_lr: float = 0.0
    schedule: Literal["cosine", "constant"] = "cosine"
    grad_clip: float | None = None
    amp: bool = False
    num_workers: int = 2
    seed: int = 0
    checkpoint_interval: int = 1
    max_keep_checkpoints: int = 3
    log_interval: int = 10
    drop_last: bool = True
    warmup_epochs: int = 0
    amp_dtype: Literal["float16", "bfloat16"] = "float16"
    grad_checkpointing: bool = False
    length_blocks: int = 1


@dataclass(frozen=True)
class Recipe:
    """A validated recipe; ``source`` is the file it came from, ``sources`` where each value
    was written (the file, a ``_base_``, an option such as ``--set``), for :meth:`error`."""

    name: str
    text_views: TextViews
    loss: dict[str, Any]
    model: dict[str, Any]
    description: str = ""
    reading: str = ""
    paper: str = ""
    data: DataSpec = field(default_factory=DataSpec)
    train: TrainSpec = field(default_factory=TrainSpec)
    eval: tuple[EvalSplit, ...] = ()
    video: VideoSpec | None = None
    source: str | None = None
    sources: ValueSources | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source")
        d.pop("sources")
        return d

    def where(self, key: str) -> str:
        """Where ``key``'s value was written: ``recipes/my.yaml: train.epochs``,
        ``--set train.epochs``, ``--train``."""
        return self._sources.where(key)

    def error(self, key: str, message: str) -> RecipeError:
        """A :class:`RecipeError` about ``key``, naming where its value was written; for checks
        made after loading (by a trainer's integration) against the data or the model."""
        return self._sources.error(key, message)

    @property
    def _sources(self) -> ValueSources:
        return self.sources or ValueSources(Source(self.source or "<recipe>"))

    def replace(self, **changes: Any) -> Recipe:
        return dataclasses.replace(self, **changes)
