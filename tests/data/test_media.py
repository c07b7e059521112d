"""Media sources: stored embeddings by id, image files by path; both pickle into workers."""

from __future__ import annotations

import pickle

import pytest
import torch

from vlr_plugins.data import (
    EmbeddingStore,
    EmbeddingStoreWriter,
    ImageFiles,
    ParagraphSample,
    StoredEmbeddings,
)
from vlr_plugins.errors import DataFormatError, MissingEmbeddingsError


def _store(path, n=6, dim=4):
    emb = torch.randn(n, dim)
    with EmbeddingStoreWriter(path, dim, shard_size=4) as w:
        w.add([f"s{i}" for i in range(n)], emb)
    return emb


def test_stored_embeddings_load_by_id_and_report_every_missing_id_at_once(tmp_path):
    emb = _store(tmp_path / "store")
    media = StoredEmbeddings(tmp_path / "store")
    samples = [ParagraphSample(id=f"s{i}", caption="c") for i in (4, 1)]
    media.check(samples)
    assert torch.equal(media.load(samples[0]), emb[4]) and torch.equal(media.load(samples[1]), emb[1])
    with pytest.raises(MissingEmbeddingsError) as e:
        media.check([ParagraphSample(id=i, caption="c") for i in ("s0", "x1", "x2")])
    assert e.value.missing == ["x1", "x2"] and str(tmp_path / "store") in str(e.value)


def test_stored_embeddings_pickle_without_open_handles(tmp_path):
    emb = _store(tmp_path / "store")
    media = StoredEmbeddings(tmp_path / "store")
    media.load(ParagraphSample(id="s5", caption="c"))  # opens the store and a shard
    assert isinstance(media.store, EmbeddingStore)
    copy = pickle.loads(pickle.dumps(media))
    assert copy._store is None  # a worker opens its own
    assert torch.equal(copy.load(ParagraphSample(id="s5", caption="c")), emb[5])


def test_image_files_transform_the_image_and_name_a_bad_file(tmp_path):
    from PIL import Image

    Image.new("RGB", (6, 4), (255, 0, 0)).save(tmp_path / "red.png")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    size = ImageFiles(lambda im: im.size)
    good = ParagraphSample(id="a", caption="c", media=str(tmp_path / "red.png"))
    size.check([good])
    assert size.load(good) == (6, 4)
    broken = ParagraphSample(id="b", caption="c", media=str(tmp_path / "broken.png"))
    with pytest.raises(DataFormatError, match=r"broken.png: cannot read the image of sample 'b'"):
        size.load(broken)
    with pytest.raises(ValueError, match=r"1 sample\(s\) name no image file.*'n'"):
        size.check([good, ParagraphSample(id="n", caption="c")])
