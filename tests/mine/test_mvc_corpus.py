"""`vlr mine mvc` end to end on a small multi-view-captions corpus with a real text model (a
bag-of-words `module:callable`): each video's mined videos equal a brute-force search written
here over the model's own embeddings (one text per video, the first present of the view's
fields), never a video that shares a caption with it, and the output is the input's records as
they were plus `hard_negatives`, read back by the trainer's reader."""

from __future__ import annotations

import json

import pytest
import torch

from _bow_model import BagOfWords
from _refusal import run_vlr
from vlr_plugins.data.mvc_samples import read_mvc_samples

MODEL = "_bow_model:BagOfWords"
COLOURS = ["red", "blue", "green", "black", "white", "brown"]
ANIMALS = ["dog", "cat", "horse", "bird", "cow"]
FIELDS = ("O", "S1", "S2", "D1", "D2", "D1*", "D2*", "P1", "P2")


def mvc_corpus(path, n=14):
    rows = []
    for i in range(n):
        c, a = COLOURS[i % 6], ANIMALS[i % 5]
        rows.append({"id": f"v{i}" if i != 5 else 5, "video": f"clips/v{i}.mp4",
                     "O": f"{a} video {i}", "S1": f"a {c} {a} runs on the grass", "S2": f"the {c} {a} is running",
                     "D1*": f"A {c} {a} runs across a wide field of green grass near trees {i}.",
                     "P1": f"the {a} turns its head {i}", "meta": {"source": "test", "n": i}})
    del rows[2]["S1"]  # summary falls back to S2
    del rows[4]["S1"], rows[4]["S2"]  # ... and to O
    del rows[6]["D1*"], rows[6]["P1"]  # no detailed view: not in a detailed gallery
    rows[7]["O"] = rows[11]["O"]  # a web caption two videos share: mined for neither
    rows[3]["P1"] = rows[9]["D1*"]  # a caption shared across fields: 3 and 9 are positives of each other
    rows[8]["start"], rows[8]["end"] = 1.5, 4.0
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def first(row, fields):
    return next((row[f] for f in fields if f in row), None)


def brute_force(queries, gallery, positives, k, range_min=0, range_max=None, margin=None):
    """Every query's gallery sorted by (-cosine, index) in float64, positives (and, with a
    margin, entries within it of the lowest positive) removed, then the window."""
    q = torch.nn.functional.normalize(queries.double(), dim=1)
    g = torch.nn.functional.normalize(gallery.double(), dim=1)
    out = []
    for row, own in zip((q @ g.T).tolist(), positives):
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))
        limit = min(row[j] for j in own) - margin if margin is not None else None
        kept = [j for j in order if j not in own and (limit is None or row[j] <= limit)]
        out.append(kept[range_min:range_max][:k])
    return out


def reference(rows, pool, k, queries=None, query_fields=("S1", "S2", "O"), **window):
    """The mined ids of every video: gallery = the videos having the pool view (its first
    field present), positives = itself and every video sharing any caption."""
    gallery = [i for i, r in enumerate(rows) if first(r, pool) is not None]
    texts = [set(r[f] for f in FIELDS if f in r) for r in rows]
    positives = [{j for j, g in enumerate(gallery) if texts[g] & texts[i]} for i in range(len(rows))]
    model = BagOfWords()
    if queries is None:
        queries = model.encode_text([first(r, query_fields) for r in rows])
    found = brute_force(queries, model.encode_text([first(rows[g], pool) for g in gallery]), positives, k, **window)
    return [[str(rows[gallery[j]]["id"]) for j in w] for w in found], [{str(rows[gallery[j]]["id"]) for j in p}
                                                                       for p in positives]


def mine(tmp_path, *options, out="mined.jsonl"):
    code, stdout, stderr = run_vlr(["mine", "mvc", tmp_path / "train.jsonl", "--model", MODEL,
                                    "--out", tmp_path / out, *options])
    assert code == 0, stderr
    return tmp_path / out, stdout


@pytest.mark.parametrize("options, pool, window", [
    ([], ("S1", "S2", "O"), dict(k=3)),
    (["--range-min", "2", "--range-max", "7"], ("S1", "S2", "O"), dict(k=3, range_min=2, range_max=7)),
    (["--margin", "0.05"], ("S1", "S2", "O"), dict(k=3, margin=0.05)),
    (["--pool", "detailed", "-k", "4"], ("D1*", "D2*", "P1", "P2"), dict(k=4)),
    (["--query", "O,S2", "-k", "2"], ("O", "S2"), dict(k=2, query_fields=("O", "S2"))),
])
def test_every_video_gets_the_brute_force_hard_negative_videos(tmp_path, options, pool, window):
    rows = mvc_corpus(tmp_path / "train.jsonl")
    out, stdout = mine(tmp_path, "-k", "3", *options)
    want, positives = reference(rows, pool, **window)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    for row, line, expected, own in zip(rows, lines, want, positives):
        assert line.get("hard_negatives", []) == expected
        assert not set(expected) & own and (str(row["id"]) in own or first(row, pool) is None)
        assert {k: v for k, v in line.items() if k != "hard_negatives"} == row  # the record as it was
        assert list(line)[:len(row)] == list(row)  # keys in their order, meta kept, paths as written
    assert len(lines) == len(rows) and any(want) and "mined" in stdout
    samples = read_mvc_samples(out)  # the trainer's reader takes it, hard negatives included
    assert [list(s.hard_negatives) for s in samples] == want
    assert samples[8].window == (1.5, 4.0)


def test_shared_captions_make_videos_positives_of_each_other(tmp_path):
    rows = mvc_corpus(tmp_path / "train.jsonl")
    out, _ = mine(tmp_path, "-k", "13", "--query", "O", "--pool", "O")  # the whole gallery but positives
    got = {str(s.id): set(s.hard_negatives) for s in read_mvc_samples(out)}
    assert "v11" not in got["v7"] and "v7" not in got["v11"]
    assert "v9" not in got["v3"] and "v3" not in got["v9"]
    assert got["v0"] == {str(r["id"]) for r in rows} - {"v0"}  # shares nothing: everything else


def test_queries_can_be_the_videos_of_a_store(tmp_path):
    from vlr_plugins.data.embedding_store import EmbeddingStoreWriter

    rows = mvc_corpus(tmp_path / "train.jsonl")
    videos = torch.randn(len(rows), 24, generator=torch.Generator().manual_seed(0))
    ids = [str(r["id"]) for r in rows]
    with EmbeddingStoreWriter(tmp_path / "store", dim=24) as writer:
        writer.add(ids[::-1], videos.flip(0))  # stored in another order
    out, _ = mine(tmp_path, "--query", "video", "--video-embeddings", tmp_path / "store", "-k", "2")
    want, _ = reference(rows, ("S1", "S2", "O"), k=2, queries=videos)
    assert [list(s.hard_negatives) for s in read_mvc_samples(out)] == want


def test_keep_existing_adds_the_mined_after_the_given(tmp_path):
    rows = mvc_corpus(tmp_path / "train.jsonl")
    rows[0]["hard_negatives"] = ["v13"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, _ = mine(tmp_path, "-k", "2", "--keep-existing")
    plain, _ = mine(tmp_path, "-k", "2", out="plain.jsonl")
    kept, mined = read_mvc_samples(out)[0].hard_negatives, read_mvc_samples(plain)[0].hard_negatives
    assert kept == ("v13", *[i for i in mined if i != "v13"])


def test_a_parquet_corpus_is_written_as_json_lines(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = mvc_corpus(tmp_path / "train.jsonl")
    table = pa.Table.from_pylist([{k: (str(v) if k == "id" else v) for k, v in r.items() if k != "meta"}
                                  for r in rows])
    pq.write_table(table, tmp_path / "train.parquet")
    code, _, stderr = run_vlr(["mine", "mvc", tmp_path / "train.parquet", "--model", MODEL, "--out",
                               tmp_path / "mined.jsonl", "-k", "3"])
    assert code == 0, stderr
    want, _ = reference(rows, ("S1", "S2", "O"), k=3)
    assert [list(s.hard_negatives) for s in read_mvc_samples(tmp_path / "mined.jsonl")] == want
