"""Webdataset shards through open_clip_train's shard pipeline, with several texts per image."""

from __future__ import annotations

import argparse
import io
import json
import random
import tarfile

import pytest

pytest.importorskip("open_clip_train")
import open_clip  # noqa: E402
import torchvision.transforms as T  # noqa: E402

from vlr_plugins.errors import DataFormatError  # noqa: E402
from vlr_plugins.integrations.open_clip import SampleTokenizer  # noqa: E402
from vlr_plugins.integrations.open_clip.text_batch import TextBatch  # noqa: E402
from vlr_plugins.integrations.open_clip.webdataset import get_wds_text_views_data  # noqa: E402
from vlr_plugins.recipe import TextView, TextViews  # noqa: E402


def write_shards(folder, per_shard=4, shards=2):
    from PIL import Image

    for s in range(shards):
        with tarfile.open(folder / f"shard-{s}.tar", "w") as tar:
            for i in range(per_shard):
                key = f"s{s}_{i}"
                buf = io.BytesIO()
                Image.new("RGB", (36, 36), (40 * i, 0, 0)).save(buf, format="PNG")
                texts = (
                    {"caption": f"picture {key}", "hard_negatives": [f"not {key}"]}
                    if i % 2
                    else None
                )
                members = {
                    "png": buf.getvalue(),
                    **(
                        {"json": json.dumps(texts).encode()}
                        if texts
                        else {"txt": f"plain {key}".encode()}
                    ),
                }
                for ext, data in members.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return str(folder / f"shard-{{0..{shards - 1}}}.tar")


def test_shards_give_text_batches_with_negatives(tmp_path):
    random.seed(0)
    args = argparse.Namespace(
        train_data=write_shards(tmp_path),
        train_num_samples=8,
        dataset_resampled=False,
        train_data_upsampling_factors=None,
        seed=0,
        batch_size=4,
        workers=0,
        world_size=1,
    )
    texts = SampleTokenizer(
        open_clip.get_tokenizer("ViT-B-32"),
        77,
        TextViews((TextView("caption", 77),), (TextView("hard_negatives", 77, "first", 1),)),
    )
    with pytest.raises(
        DataFormatError, match=r"shard-\d.tar#s\d_\d.*has 0 text\(s\) here.*needs 1"
    ):
        next(
            iter(
                get_wds_text_views_data(
                    args, T.Compose([T.Resize(32), T.ToTensor()]), texts
                ).dataloader
            )
        )
    texts = SampleTokenizer(
        open_clip.get_tokenizer("ViT-B-32"), 77, TextViews((TextView("caption", 77),))
    )
    info = get_wds_text_views_data(args, T.Compose([T.Resize(32), T.ToTensor()]), texts)
    assert info.dataloader.num_batches == 2 and info.dataloader.num_samples == 8
    batches = list(info.dataloader)
    assert len(batches) == 2
    ids = []
    for images, batch in batches:
        assert images.shape == (4, 3, 32, 32) and isinstance(batch, TextBatch)
        assert batch.tokens.shape == (4, 77) and batch.text_owner.tolist() == [0, 1, 2, 3]
        ids += batch.ids
    assert sorted(ids) == sorted(f"s{s}_{i}" for s in range(2) for i in range(4)), (
        "the key is the id"
    )
