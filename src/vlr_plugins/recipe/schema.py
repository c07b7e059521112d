"""What a recipe holds: text views, data, optimisation, evaluation splits (dataclasses).

The text views are the data layer's (:mod:`vlr_plugins.data.text_views`): a recipe only
names them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from vlr_plugins.data.text_views import TextView, TextViews
from vlr_plugins.recipe.errors import RecipeError, Source
from vlr_plugins.recipe.overrides import ValueSources

__all__ = ["TextView", "TextViews", "DataSpec", "EvalSplit", "TrainSpec", "Recipe"]


@dataclass(frozen=True)
class DataSpec:
    """Where training samples and the precomputed image embeddings live.

    ``fraction`` < 1 keeps a seeded random subset of the samples (the data-efficiency
    ablation); ``seed`` makes the subset and the per-step view draws reproducible.
    """

    train: str | None = None
    image_embeddings: str | None = None
    fraction: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class EvalSplit:
    """A retrieval split evaluated during/after training (JSON Lines of ``{id, texts}``)."""

    name: str
    ann_file: str
    max_tokens: int
    image_embeddings: str | None = None


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation hyperparameters (the paper's: AdamW 1e-5, batch 256, 500 warm-up, 10 epochs)."""

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
