"""Turn a training sample into the texts a recipe's text views ask for.

A view reads one field of a :class:`~vlr_plugins.data.sample.ParagraphSample`, takes
all, the first ``count`` or a fresh random ``count`` of its texts, and carries the
token budget each text is cut to (captions 77, paragraphs 128 in the paper).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from vlr_plugins.data.errors import DataFormatError
from vlr_plugins.data.sample import ParagraphSample

__all__ = ["DrawnText", "ViewDraws", "draw_texts", "check_samples_have_views", "seeded_fraction"]


@dataclass(frozen=True)
class DrawnText:
    text: str
    max_tokens: int


def _needed(view) -> int:
    return 1 if view.take == "all" else view.count


def check_samples_have_views(
    samples: Sequence[ParagraphSample], views: Sequence, path: str
) -> None:
    """Raise :class:`DataFormatError` for the first sample lacking what a view needs.

    ``path`` names the annotation file in the message; records are counted from 1.
    """
    for i, s in enumerate(samples, start=1):
        for v in views:
            have = len(s.texts(v.field))
            need = _needed(v)
            if have < need:
                raise DataFormatError(
                    path,
                    f"sample {s.id!r} has {have} text(s) here but the recipe's view "
                    f"(take: {v.take}{'' if v.count is None else f', count: {v.count}'}) needs {need}",
                    record=i, field=v.field, record_kind="record",
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


def draw_texts(sample: ParagraphSample, views: Sequence, rng: random.Random) -> list[DrawnText]:
    """The texts of ``sample`` selected by ``views``, in view order.

    ``rng`` drives ``take: random`` so that a seeded generator reproduces the draws.
    """
    out: list[DrawnText] = []
    for v in views:
        texts = sample.texts(v.field)
        if v.take == "random":
            texts = rng.sample(list(texts), v.count)
        elif v.take == "first":
            texts = texts[: v.count]
        out.extend(DrawnText(t, v.max_tokens) for t in texts)
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
