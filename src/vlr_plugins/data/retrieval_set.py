"""The common retrieval-set type: items (images or videos) and texts that describe them."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import torch

from vlr_plugins.data._text_files import json_lines
from vlr_plugins.errors import DataFormatError, MissingFileError
from vlr_plugins.registry import READERS

__all__ = ["RetrievalSet", "read_retrieval_jsonl"]


@dataclass(frozen=True)
class RetrievalSet:
    """Items (images or videos) and the texts that describe them, as every reader returns.

    ``item_ids`` (N,), ``texts`` (M,) and ``text_owner`` (M,): the item index each text
    describes; any number of texts per item (Flickr30k/COCO ~5, DOCCI/ShareGPT4V 1).
    Optional: ``media`` (N,) the item's file (absolute, or relative to ``media_root``),
    ``categories`` (N,) a category per item (CaReBench's 4 major categories),
    ``text_kinds`` (M,) what each text is (``"general"``, ``"spatial"``, ``"temporal"``,
    ``"event"`` ...) so a benchmark's variants share one item list.
    """

    name: str
    item_ids: tuple[str, ...]
    texts: tuple[str, ...]
    text_owner: torch.Tensor
    media: tuple[str, ...] | None = None
    media_root: str | None = None
    categories: tuple[str | None, ...] | None = None
    text_kinds: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        n, m = len(self.item_ids), len(self.texts)
        if self.text_owner.shape != (m,):
            raise ValueError(f"{self.name}: text_owner must have one entry per text ({m}), "
                             f"found shape {tuple(self.text_owner.shape)}")
        for attr, size in (("media", n), ("categories", n), ("text_kinds", m)):
            value = getattr(self, attr)
            if value is not None and len(value) != size:
                raise ValueError(f"{self.name}: {attr} must have {size} entries, found {len(value)}")

    def __len__(self) -> int:
        return len(self.item_ids)

    def texts_of(self, index: int) -> list[str]:
        return [t for t, o in zip(self.texts, self.text_owner.tolist()) if o == index]

    def kinds(self) -> list[str]:
        """The distinct text kinds, in first-seen order (``[]`` when texts have none)."""
        return list(dict.fromkeys(self.text_kinds)) if self.text_kinds else []

    def with_texts(self, kind: str) -> RetrievalSet:
        """The same items with only the texts of one kind (e.g. CaReBench ``"spatial"``).

        Items left without a text are dropped, as a benchmark's variant never scores them.
        """
        if not self.text_kinds or kind not in self.text_kinds:
            raise KeyError(f"{self.name} has no texts of kind {kind!r} (kinds: {self.kinds() or 'none'})")
        keep_t = [i for i, k in enumerate(self.text_kinds) if k == kind]
        owners = self.text_owner[keep_t]
        items = sorted(set(owners.tolist()))
        remap = {old: new for new, old in enumerate(items)}
        return RetrievalSet(
            name=f"{self.name}/{kind}",
            item_ids=tuple(self.item_ids[i] for i in items),
            texts=tuple(self.texts[i] for i in keep_t),
            text_owner=torch.tensor([remap[o] for o in owners.tolist()], dtype=torch.long),
            media=None if self.media is None else tuple(self.media[i] for i in items),
            media_root=self.media_root,
            categories=None if self.categories is None else tuple(self.categories[i] for i in items),
            text_kinds=tuple(kind for _ in keep_t),
        )

    def media_paths(self) -> list[str]:
        if self.media is None:
            raise ValueError(f"{self.name} lists no media files")
        root = self.media_root or ""
        return [os.path.join(root, m) for m in self.media]

    def check_media(self) -> None:
        """Raise :class:`~vlr_plugins.errors.MissingFileError` (a ``FileNotFoundError``)
        listing every missing media file at once."""
        missing = [p for p in self.media_paths() if not os.path.exists(p)]
        if missing:
            # one line: `vlr` prints a refusal as one error line
            shown = ", ".join(missing[:20])
            more = f", ... and {len(missing) - 20} more" if len(missing) > 20 else ""
            raise MissingFileError(f"{self.name}: {len(missing)} of {len(self)} media files are missing "
                                   f"(root {self.media_root or '.'}): {shown}{more}")


@READERS.register(name="retrieval_jsonl")
def read_retrieval_jsonl(path: str | os.PathLike, name: str | None = None) -> RetrievalSet:
    """Retrieval split as JSON Lines of ``{"id": ..., "texts": [...]}``, one item per line."""
    path = str(path)
    ids: list[str] = []
    texts: list[str] = []
    owner: list[int] = []
    seen: dict[str, int] = {}
    for line_no, rec in json_lines(path):
        if not isinstance(rec, dict):
            raise DataFormatError(path, f"expected an object, found {type(rec).__name__}", record=line_no)
        if isinstance(rec.get("id"), bool) or not isinstance(rec.get("id"), (str, int)) or rec["id"] == "":
            raise DataFormatError(path, f"expected a non-empty string or an integer, found {json.dumps(rec.get('id'))}",
                                  record=line_no, field="id")
        item_texts = rec.get("texts")
        if (not isinstance(item_texts, list) or not item_texts
                or not all(isinstance(t, str) and t.strip() for t in item_texts)):
            raise DataFormatError(path, "expected a non-empty list of non-empty strings", record=line_no, field="texts")
        item_id = str(rec["id"])
        if item_id in seen:
            raise DataFormatError(path, f"duplicate id {item_id!r} (first on line {seen[item_id]})", record=line_no, field="id")
        seen[item_id] = line_no
        owner.extend([len(ids)] * len(item_texts))
        texts.extend(item_texts)
        ids.append(item_id)
    if not ids:
        raise DataFormatError(path, "no items")
    return RetrievalSet(name or os.path.splitext(os.path.basename(path))[0], tuple(ids), tuple(texts),
                        torch.tensor(owner, dtype=torch.long))
