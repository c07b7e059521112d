"""The (images, TextBatch) collate: owners, padding to one length, negatives, short captions."""

from __future__ import annotations

import pytest
import torch

from vlr_plugins.integrations.open_clip.text_batch import TextBatch, TextItem, collate_text_batch


def rows(n, value, length=6):
    return torch.full((n, length), value, dtype=torch.long)


def item(i, positives, negatives=0, short=False):
    return torch.zeros(3, 4, 4) + i, TextItem(
        f"s{i}",
        rows(positives, 10 * i + 1),
        rows(negatives, 10 * i + 2) if negatives else None,
        rows(1, 10 * i + 3)[0] if short else None,
    )


def test_owners_follow_the_images_and_negatives_come_separately():
    images, batch = collate_text_batch([item(0, 2), item(1, 1, negatives=2), item(2, 3)])
    assert images.shape == (3, 3, 4, 4) and len(batch) == 3
    assert batch.tokens.shape == (6, 6)
    assert batch.text_owner.tolist() == [0, 0, 1, 2, 2, 2]
    assert batch.tokens[:, 0].tolist() == [1, 1, 11, 21, 21, 21]
    assert batch.neg_owner.tolist() == [1, 1] and batch.neg_tokens[:, 0].tolist() == [12, 12]
    assert batch.short_tokens is None and batch.ids == ["s0", "s1", "s2"]


def test_one_pass_through_the_text_tower_and_back():
    _, batch = collate_text_batch([item(0, 2, negatives=1, short=True), item(1, 1, short=True)])
    everything = batch.all_tokens()
    assert everything.shape == (3 + 1 + 2, 6)
    parts = batch.split(everything[:, :1].float())
    assert parts["text_features"][:, 0].tolist() == [1, 1, 11]
    assert parts["neg_features"][:, 0].tolist() == [2]
    assert parts["short_text_features"][:, 0].tolist() == [3, 13]


def test_to_moves_tensors_and_keeps_token_dtypes():
    _, batch = collate_text_batch([item(0, 1), item(1, 2, negatives=1)])
    moved = batch.to(device="cpu", dtype=torch.float16, non_blocking=True)
    assert isinstance(moved, TextBatch) and moved.tokens.dtype == torch.long
    assert moved.ids == batch.ids and torch.equal(moved.neg_owner, batch.neg_owner)


def test_bad_batches_say_what_is_wrong():
    a = item(0, 1)
    b = (torch.zeros(3, 4, 4), TextItem("s1", rows(1, 5, length=8)))
    with pytest.raises(ValueError, match="lengths \\[6, 8\\]"):
        collate_text_batch([a, b])
    with pytest.raises(ValueError, match="short caption"):
        collate_text_batch([item(0, 1, short=True), item(1, 1)])
    with pytest.raises(ValueError, match="at least one positive"):
        collate_text_batch([(torch.zeros(3, 4, 4), TextItem("s", rows(0, 1)))])
