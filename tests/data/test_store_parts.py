"""data/store_parts.py: parts of one store merged into what one writer writes, byte for byte;
a part that lacks rows of its range is refused, never merged into a store that lacks them."""

from __future__ import annotations

import math

import pytest
import torch

from vlr_plugins.data import ResumableEmbeddingStoreWriter
from vlr_plugins.data.store_parts import SHARD_KEY, Parts, inputs_digest
from vlr_plugins.errors import DataFormatError

IDS = [f"v{i:02d}" for i in range(10)]
ROWS = torch.randn(10, 5, generator=torch.Generator().manual_seed(0))
LAYOUT = {"writer": "resumable", "flush_rows": 4}


def _write_parts(out, ranges, *, drop=None):
    parts = Parts(out, len(ranges))
    parts.dir.mkdir(parents=True)
    for index, (start, stop) in enumerate(ranges):
        info = {"index": index, "count": len(ranges), "start": start, "stop": stop, "items": len(IDS),
                "inputs": inputs_digest(IDS), "layout": LAYOUT}
        w = ResumableEmbeddingStoreWriter(parts.part(index), 5, meta={"encoder": "x", SHARD_KEY: info}, flush_rows=3)
        keep = [k for k in range(start, stop) if IDS[k] != drop]
        w.add([IDS[k] for k in keep], ROWS[keep])
        w.close()
    return parts


def test_merged_parts_are_the_single_writers_store(tmp_path):
    one = ResumableEmbeddingStoreWriter(tmp_path / "one", 5, meta={"encoder": "x"}, flush_rows=4,
                                        flush_seconds=math.inf)
    for k in range(0, 10, 3):  # in batches, as a run adds them
        one.add(IDS[k : k + 3], ROWS[k : k + 3])
    one.close()
    parts = _write_parts(tmp_path / "merged", [(0, 3), (3, 6), (6, 10)])
    result = parts.merge(3)
    assert result.rows == 10 and result.failures == 0 and not parts.dir.exists()
    files = lambda d: {p.name: p.read_bytes() for p in sorted(d.iterdir())}  # noqa: E731
    assert files(tmp_path / "merged") == files(tmp_path / "one")
    assert sorted(files(tmp_path / "one")) == ["embeddings-00000.safetensors", "embeddings-00001.safetensors",
                                               "embeddings-00002.safetensors", "index.json"]


def test_a_part_that_lacks_a_row_of_its_range_is_refused(tmp_path):
    parts = _write_parts(tmp_path / "merged", [(0, 5), (5, 10)], drop="v07")
    with pytest.raises(DataFormatError, match=r"shard 1 of 2 should hold items 5..9 \(5\), it holds 4 rows"):
        parts.merge(2)
    assert not (tmp_path / "merged").exists() and parts.dir.is_dir()


def _open_part(parts, index, count, start, stop):
    info = {"index": index, "count": count, "start": start, "stop": stop, "items": len(IDS),
            "inputs": inputs_digest(IDS), "layout": LAYOUT}
    w = ResumableEmbeddingStoreWriter(parts.part(index), 5, meta={"encoder": "x", SHARD_KEY: info}, flush_rows=3)
    w.add(IDS[start:stop], ROWS[start:stop])
    w.flush()  # durable parts in the work folder, the store not finished
    return w


def test_a_part_finished_while_another_shard_reads_it_is_read_from_where_it_was_moved(tmp_path, monkeypatch):
    """Under torchrun a rank's settings check can list a faster rank's work folder and open its files
    after that rank moved the folder into place (CI saw `cannot read this part of an unfinished
    embedding store (No such file or directory ...)`). Here the other shard finishes between the
    listing and the first file's opening: the part's settings are read again, from the finished part."""
    from vlr_plugins.data import resumable_store

    parts = Parts(tmp_path / "merged", 2)
    parts.dir.mkdir(parents=True)
    writer = _open_part(parts, 0, 2, 0, 5)
    read_part, opened = resumable_store._read_part, []

    def finishing_first(path, dim, dtype):
        if not opened:
            writer.close()  # the other rank finishes: its work folder is moved onto the part
        opened.append(path)
        return read_part(path, dim, dtype)

    monkeypatch.setattr(resumable_store, "_read_part", finishing_first)
    settings = parts.settings(0)
    assert settings["finished"] and settings["rows"] == 5 and settings["meta"][SHARD_KEY]["index"] == 0
    assert ".partial" in str(opened[0])  # the first read did meet the moved folder


def test_a_damaged_part_of_an_unfinished_shard_is_still_refused(tmp_path):
    """The reread is only for a work folder that is gone: a damaged file in one still there stands."""
    parts = Parts(tmp_path / "merged", 2)
    parts.dir.mkdir(parents=True)
    _open_part(parts, 0, 2, 0, 5)
    from vlr_plugins.data.resumable_store import work_dir_of

    damaged = sorted(work_dir_of(parts.part(0)).glob("embeddings-*.safetensors"))[0]
    damaged.write_bytes(b"not safetensors")
    with pytest.raises(DataFormatError, match="cannot read this part of an unfinished embedding store"):
        parts.settings(0)
