"""Text views: which texts of a training sample are its positives and hard negatives.

A view reads one field of a sample -- or one *candidate set* of fields, whose texts are
pooled -- takes all, the first ``count`` or a fresh random ``count`` of its texts, and
carries the token budget each text is cut to (captions 77, paragraphs 128 in the
paragraph paper) and, optionally, a name that travels with each drawn text (MVC's
``summary`` / ``detailed`` views, which a dual-CLS text encoder reads).

Everything here works on any sample that has an ``id`` and ``texts(field)`` (a
:class:`~vlr_plugins.data.sample.ParagraphSample`, or another corpus' sample type).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from vlr_plugins.data.schemas import FIELD_KINDS
from vlr_plugins.errors import DataFormatError

__all__ = [
    "TextSample",
    "TextView",
    "TextViews",
    "DrawnText",
    "ViewDraws",
    "draw_texts",
    "check_samples_have_views",
    "seeded_fraction",
]


class TextSample(Protocol):
    """What the views need of a sample: its id and the texts of a field (a tuple)."""

    id: str

    def texts(self, field: str) -> tuple[str, ...]: ...


@dataclass(frozen=True)
class TextView:
    """One source of texts for a sample: a field (or candidate fields), how many, the budget.

    ``field``: a sample field, or a tuple of fields whose texts are pooled into one
    candidate set (MVC draws one summary caption from ``(O, S1, S2)``: ``field=("O",
    "S1", "S2"), take="random", count=1``). ``take='all'`` uses every text; ``'random'``
    draws ``count`` of them without replacement at every step (a new draw each epoch);
    ``'first'`` the first ``count``. ``max_tokens`` is the tokenizer budget, special
    tokens included. ``name`` labels every text this view draws (``DrawnText.view``).
    """

    field: str | tuple[str, ...]
    max_tokens: int
    take: Literal["all", "random", "first"] = "all"
    count: int | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.field, list):  # from YAML / JSON
            object.__setattr__(self, "field", tuple(self.field))

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields this view pools, in order."""
        return (self.field,) if isinstance(self.field, str) else tuple(self.field)

    @property
    def label(self) -> str:
        """The field, or the candidate fields joined by ``|``, for messages."""
        return "|".join(self.fields)

    @property
    def key(self) -> str:
        """What a model records this view's budget under: its name, else :attr:`label`."""
        return self.name or self.label

    def texts_of(self, sample: TextSample) -> tuple[str, ...]:
        """Every candidate text of ``sample`` for this view, field by field."""
        return tuple(t for f in self.fields for t in sample.texts(f))


@dataclass(frozen=True)
class TextViews:
    """Which texts are positives of a sample and which are its hard negatives."""

    positives: tuple[TextView, ...]
    negatives: tuple[TextView, ...] = ()

    @property
    def all(self) -> tuple[TextView, ...]:
        return (*self.positives, *self.negatives)

    @property
    def fields(self) -> set[str]:
        return {f for v in self.all for f in v.fields}

    @property
    def max_positives(self) -> int | None:
        """Upper bound of positives per sample, ``None`` when a view takes a whole list."""
        return _bound(self.positives)

    @property
    def max_negatives(self) -> int | None:
        return _bound(self.negatives)


def _bound(views: tuple[TextView, ...]) -> int | None:
    total = 0
    for v in views:
        if v.take != "all":
            total += v.count or 0
        elif all(FIELD_KINDS.get(f) == "one" for f in v.fields):
            total += len(v.fields)
        else:
            return None
    return total


@dataclass(frozen=True)
class DrawnText:
    """One text drawn by a view, with the view's token budget and name."""

    text: str
    max_tokens: int
    view: str | None = None


def _needed(view: TextView) -> int:
    return 1 if view.take == "all" else int(view.count or 1)


def check_samples_have_views(
    samples: Sequence[TextSample], views: Sequence[TextView], path: str
) -> None:
    """Raise :class:`DataFormatError` for the first sample lacking what a view needs.

    ``path`` names the annotation file in the message; records are counted from 1.
    """
    for i, s in enumerate(samples, start=1):
        for v in views:
            have, need = len(v.texts_of(s)), _needed(v)
            if have < need:
                raise DataFormatError(
                    path,
                    f"sample {s.id!r} has {have} text(s) here but the recipe's view "
                    f"(take: {v.take}{'' if v.count is None else f', count: {v.count}'}) needs {need}",
                    record=i, field=v.label, record_kind="record",
                )


def seeded_fraction(items: Sequence, fraction: float, seed: int) -> list:
    """A seeded random subset of ``round(fraction * len)`` items (at least one), in their
    original order: the data-efficiency ablation's subset, the same under every trainer."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], found {fraction}")
    if fraction == 1.0:
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), max(1, round(fraction * len(items)))))
    return [items[i] for i in keep]


def draw_texts(sample: TextSample, views: Sequence[TextView], rng: random.Random) -> list[DrawnText]:
    """The texts of ``sample`` selected by ``views``, in view order.

    ``rng`` drives ``take: random`` so that a seeded generator reproduces the draws.
    """
    out: list[DrawnText] = []
    for v in views:
        texts = v.texts_of(sample)
        if v.take == "random":
            texts = rng.sample(list(texts), v.count)
        elif v.take == "first":
            texts = texts[: v.count]
        out.extend(DrawnText(t, v.max_tokens, v.name) for t in texts)
    return out


class ViewDraws:
    """The random source of a dataset's ``take: random`` views, one ``Random`` per step.

    Reproducible for a seed, and different every epoch: DataLoader workers get a new
    seed each epoch (unless they persist, which the per-process draw counter covers);
    in the main process the seeded torch generator supplies it.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._draws = 0

    def rng(self, index: int) -> random.Random:
        import torch
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        base = info.seed if info is not None else int(torch.randint(2**62, ()).item())
        self._draws += 1
        return random.Random(f"{self.seed}/{base}/{self._draws}/{index}")
