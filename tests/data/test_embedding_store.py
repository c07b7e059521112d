"""The embedding store: sharded round trips, lazy ordered reads, all-or-nothing writes."""

from __future__ import annotations

import json
import math
import pickle
import re

import pytest
import torch

from vlr_plugins.data import (
    EmbeddingStore,
    EmbeddingStoreWriter,
    check_store_target,
)
from vlr_plugins.errors import DataFormatError, MissingEmbeddingsError, MissingFileError, OutputExistsError

DIM = 8


def _ids(n: int, prefix: str = "img") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def _write(out_dir, ids, emb, **kwargs) -> None:
    with EmbeddingStoreWriter(out_dir, emb.shape[1], **kwargs) as writer:
        writer.add(ids, emb)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_round_trip_across_shards(tmp_path, dtype):
    torch.manual_seed(0)
    ids = _ids(23)
    emb = torch.randn(len(ids), DIM)
    out = tmp_path / "store"
    shard_size = 5
    with EmbeddingStoreWriter(
        out, DIM, dtype=dtype, shard_size=shard_size, meta={"encoder": "test"}
    ) as writer:
        # uneven adds: shards must fill across add() calls
        for a, b in [(0, 7), (7, 8), (8, 23)]:
            writer.add(ids[a:b], emb[a:b])

    store = EmbeddingStore(out)
    index = json.loads((out / "index.json").read_text())
    assert index["format"] == "vlr-embedding-store" and index["version"] == 1
    assert index["dtype"] == str(dtype).removeprefix("torch.")
    assert len(index["shards"]) == math.ceil(len(ids) / shard_size)
    assert sorted(p.name for p in out.glob("*.safetensors")) == [s["file"] for s in index["shards"]]
    assert (store.dim, len(store), store.ids) == (DIM, len(ids), tuple(ids))
    assert store.meta == {"encoder": "test"}
    assert store.dtype == dtype

    stored = emb.to(dtype).float()  # what the storage dtype can hold
    order = torch.randperm(len(ids)).tolist() + [4, 4, 22, 0]  # repeats and shard edges too
    got = store.get([ids[i] for i in order])
    assert got.dtype == torch.float32 and got.shape == (len(order), DIM)
    torch.testing.assert_close(got, stored[order], rtol=0, atol=0)

    runs_only = EmbeddingStore(out)
    runs_only._list_index = False  # the path for safetensors versions without list indexing
    torch.testing.assert_close(runs_only.get([ids[i] for i in order]), got, rtol=0, atol=0)

    assert all(i in store for i in ids) and "nope" not in store
    assert [store.index_of(i) for i in ids] == list(range(len(ids)))


def test_get_nothing_gives_an_empty_matrix(tmp_path):
    _write(tmp_path / "s", _ids(3), torch.randn(3, DIM))
    assert EmbeddingStore(tmp_path / "s").get([]).shape == (0, DIM)


def test_all_missing_ids_are_reported_at_once(tmp_path):
    ids = _ids(10)
    _write(tmp_path / "s", ids, torch.randn(10, DIM), shard_size=4)
    store = EmbeddingStore(tmp_path / "s")
    asked = [ids[0], "gone1", ids[5], "gone2", "gone1", "gone3"]

    with pytest.raises(MissingEmbeddingsError) as info:
        store.get(asked)
    assert info.value.missing == ["gone1", "gone2", "gone3"]
    assert str(tmp_path / "s") in str(info.value) and str(info.value).startswith("3 ids")

    with pytest.raises(MissingEmbeddingsError) as info:
        store.check(asked)
    assert info.value.missing == ["gone1", "gone2", "gone3"]
    store.check(ids, dim=DIM)  # all there: no error

    with pytest.raises(MissingEmbeddingsError, match="'gone1'"):
        store.index_of("gone1")


def test_check_names_store_and_both_dims(tmp_path):
    _write(tmp_path / "s", _ids(2), torch.randn(2, DIM))
    expected = f"{tmp_path / 's'} holds {DIM}-d embeddings, expected 256-d"
    with pytest.raises(ValueError, match=re.escape(expected)):
        EmbeddingStore(tmp_path / "s").check(_ids(2), dim=256)


def test_interrupted_writer_leaves_no_store(tmp_path):
    out = tmp_path / "store"
    with pytest.raises(RuntimeError, match="encoder crashed"):
        with EmbeddingStoreWriter(out, DIM, shard_size=2) as writer:
            writer.add(_ids(5), torch.randn(5, DIM))  # two shards already on disk
            raise RuntimeError("encoder crashed")
    assert list(tmp_path.iterdir()) == []  # neither the store nor its temporary sibling
    with pytest.raises(FileNotFoundError, match="no embedding store"):
        EmbeddingStore(out)


def test_existing_store_is_replaced_only_with_overwrite(tmp_path):
    out = tmp_path / "store"
    _write(out, _ids(3), torch.zeros(3, DIM))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        EmbeddingStoreWriter(out, DIM)

    new = torch.ones(4, DIM)
    _write(out, _ids(4, "new"), new, overwrite=True)
    store = EmbeddingStore(out)
    assert store.ids == tuple(_ids(4, "new"))
    torch.testing.assert_close(store.get(_ids(4, "new")), new)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_check_store_target_says_how_to_overwrite_and_never_replaces_what_is_not_a_store(tmp_path):
    store, photos, note = tmp_path / "store", tmp_path / "photos", tmp_path / "note.txt"
    _write(store, _ids(2), torch.zeros(2, DIM))
    photos.mkdir()
    (photos / "a.jpg").write_bytes(b"x")
    note.write_text("a file")
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "absent", tmp_path / "empty"):
        check_store_target(target)
    check_store_target(store, overwrite=True)
    with pytest.raises(OutputExistsError, match=f"already exists at {store}; pass --overwrite to replace it"):
        check_store_target(store, flag="--overwrite")
    with pytest.raises(OutputExistsError, match="refusing to replace it even with --overwrite"):
        check_store_target(photos, overwrite=True, flag="--overwrite")
    with pytest.raises(OutputExistsError, match=f"{note}: it is a file"):
        check_store_target(note, overwrite=True)


def test_check_finds_a_missing_or_broken_shard_before_any_read(tmp_path):
    out = tmp_path / "store"
    _write(out, _ids(6), torch.randn(6, DIM), shard_size=4)
    (out / "embeddings-00001.safetensors").unlink()
    with pytest.raises(MissingFileError, match="is missing its shard .*embeddings-00001.safetensors"):
        EmbeddingStore(out).check(_ids(2))  # ids of the first shard only: every shard is checked
    (out / "embeddings-00001.safetensors").write_bytes(b"garbage")
    with pytest.raises(DataFormatError, match=re.escape(str(out / "embeddings-00001.safetensors"))):
        EmbeddingStore(out).check(_ids(2))


def test_a_directory_that_is_not_a_store_is_never_replaced(tmp_path):
    out = tmp_path / "photos"
    out.mkdir()
    (out / "holiday.jpg").write_bytes(b"precious")
    with pytest.raises(FileExistsError, match="even with overwrite=True"):
        EmbeddingStoreWriter(out, DIM, overwrite=True)
    assert (out / "holiday.jpg").read_bytes() == b"precious"


def test_add_rejects_bad_input_without_adding_it(tmp_path):
    with EmbeddingStoreWriter(tmp_path / "s", DIM) as writer:
        writer.add(["a", "b"], torch.randn(2, DIM))
        with pytest.raises(ValueError, match="duplicate id 'b'"):
            writer.add(["c", "b"], torch.randn(2, DIM))
        with pytest.raises(ValueError, match="duplicate id 'd'"):
            writer.add(["d", "d"], torch.randn(2, DIM))
        with pytest.raises(ValueError, match=rf"shape \(n, {DIM}\), found \(2, 3\)"):
            writer.add(["e", "f"], torch.randn(2, 3))
        with pytest.raises(ValueError, match="2 ids for 3 embeddings"):
            writer.add(["e", "f"], torch.randn(3, DIM))
        with pytest.raises(ValueError, match="id 'h' is not finite"):
            writer.add(["g", "h"], torch.tensor([[0.0] * DIM, [float("nan")] * DIM]))
        writer.add(["c"], torch.randn(1, DIM))
    assert EmbeddingStore(tmp_path / "s").ids == ("a", "b", "c")

    with EmbeddingStoreWriter(tmp_path / "h", DIM, dtype=torch.float16) as half:
        with pytest.raises(ValueError, match=r"id 'big' is not finite \(NaN or inf\) as float16"):
            half.add(["big"], torch.full((1, DIM), 1e6))  # overflows float16


def test_unreadable_index_names_the_file(tmp_path):
    _write(tmp_path / "s", _ids(2), torch.randn(2, DIM))
    index = tmp_path / "s" / "index.json"

    index.write_text("{not json")
    with pytest.raises(DataFormatError, match=re.escape(f"{index}: not valid JSON")):
        EmbeddingStore(tmp_path / "s")

    index.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(DataFormatError, match=r"field 'format': expected 'vlr-embedding-store'"):
        EmbeddingStore(tmp_path / "s")


def test_store_pickles_for_dataloader_workers(tmp_path):
    emb = torch.randn(6, DIM)
    _write(tmp_path / "s", _ids(6), emb, shard_size=4)
    store = EmbeddingStore(tmp_path / "s")
    store.get(_ids(6))  # opens the shard handles
    clone = pickle.loads(pickle.dumps(store))
    torch.testing.assert_close(clone.get(_ids(6)[::-1]), emb.flip(0))
