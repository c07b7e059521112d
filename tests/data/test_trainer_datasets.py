"""Every trainer's training dataset is the core TextViewsDataset: same subset, same draws, same media."""

from __future__ import annotations

import pytest
import torch

from vlr_plugins.data import TextViewsDataset, read_paragraph_samples
from vlr_plugins.recipe import TextView, TextViews

VIEWS = TextViews((TextView("caption", 77), TextView("positives", 77, "random", 2)),
                  (TextView("hard_negatives", 77, "random", 1),))


def _mmengine(world, fraction, seed):
    pytest.importorskip("mmengine.registry")
    from vlr_plugins.integrations.mmengine.dataset import ParagraphTextViewsDataset

    as_dicts = [dict(field=v.field, max_tokens=v.max_tokens, take=v.take, count=v.count) for v in VIEWS.all]
    return ParagraphTextViewsDataset(world["train"], world["image_embeddings"], as_dicts[:2], world["tokenizer"],
                                     as_dicts[2:], fraction=fraction, seed=seed)


def _open_clip(world, fraction, seed):
    pytest.importorskip("open_clip_train")
    from vlr_plugins.integrations.open_clip.dataset import SampleTokenizer, TextViewsImageDataset

    texts = SampleTokenizer(lambda t, context_length: torch.zeros(len(t), context_length), 77, VIEWS)
    return TextViewsImageDataset(read_paragraph_samples(world["train"]), texts,
                                 image_embeddings=world["image_embeddings"], fraction=fraction, seed=seed)


def _lavis(world, fraction, seed):
    pytest.importorskip("lavis.common.registry", reason="LAVIS lives in its own environment (docs/lavis.md)")
    from vlr_plugins.integrations.lavis.datasets import VlrParagraphDataset

    return VlrParagraphDataset(world["train"], world["image_embeddings"], VIEWS, fraction=fraction, seed=seed)


@pytest.mark.parametrize("build", [_mmengine, _open_clip, _lavis], ids=["mmengine", "open_clip", "lavis"])
def test_each_trainer_adapts_the_one_core_dataset(build, tiny_world):
    core = TextViewsDataset(read_paragraph_samples(tiny_world["train"]), VIEWS, fraction=0.5, seed=7)
    adapted = build(tiny_world, 0.5, 7)
    assert isinstance(adapted, TextViewsDataset)
    assert adapted.samples == core.samples
    from vlr_plugins.data import EmbeddingStore

    store = EmbeddingStore(tiny_world["image_embeddings"])
    for index in range(4):
        torch.manual_seed(index)
        want = core.item(index)
        torch.manual_seed(index)
        got = adapted.item(index)  # the core draw under the trainer's transform
        assert (got.positives, got.negatives) == (want.positives, want.negatives)
        assert torch.equal(got.media, store.get([want.id])[0])
