"""``vlr mine``: exact hard-negative mining over a training corpus, written back in the format
the trainers read (the paragraph samples' ``hard_negatives`` for ``vlr train paragraph/c7``,
SimCSE's ``sent0,sent1,hard_neg`` CSV for CaRe stage II, an MVC corpus with each video's
``hard_negatives`` video ids, :mod:`vlr_plugins.mine.mvc_corpus`). The search itself is the engine's
:func:`~vlr_plugins.eval.hard_negatives.mine_hard_negatives` (exact, bounded memory); the gallery can
be embedded once into a store and read by every shard (:mod:`vlr_plugins.mine.gallery_store`)."""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = ["MiningTask", "nli_task", "paragraph_task"]

_LAZY = {name: f"vlr_plugins.mine.{module}" for module, names in {
    "corpora": ("MiningTask", "nli_task", "paragraph_task"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
