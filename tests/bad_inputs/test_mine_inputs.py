"""The bad-input catalogue for `vlr mine`: one `error:` line naming what is wrong, exit 2,
and no output corpus written (refused before the model embeds anything where it can be)."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
import torch
from _refusal import assert_refused, run_vlr

MODEL = "_bow_model:BagOfWords"


def corpus(t):
    rows = [{"id": f"img{i}", "caption": f"a dog number {i}", "positives": [f"dog {i}"] if i % 2 else []}
            for i in range(6)]
    (t / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (t / "nli.csv").write_text("sent0,sent1\na dog runs,an animal runs\na cat sits,an animal sits\n")
    (t / "bad.jsonl").write_text('{"id": "img0", "caption": "a dog"}\n{"id": "img1"}\n')
    (t / "exists.jsonl").write_text("")
    from vlr_plugins.data.embedding_store import EmbeddingStoreWriter

    with EmbeddingStoreWriter(t / "store8", dim=8) as writer:
        writer.add([f"img{i}" for i in range(6)], torch.randn(6, 8))
    with EmbeddingStoreWriter(t / "store-short", dim=24) as writer:
        writer.add(["img0"], torch.randn(1, 24))
    videos = [{"id": f"v{i}", "video": f"v{i}.mp4", "S1": f"a dog number {i}", "O": f"dog {i}",
               **({"D1*": f"a long dog {i}"} if i % 2 else {})} for i in range(4)]
    _jsonl(t / "mvc.jsonl", videos)
    _jsonl(t / "mvc-unknown-key.jsonl", [videos[0], {**videos[1], "hard_negative": ["v0"]}])
    _jsonl(t / "mvc-self.jsonl", [videos[0], {**videos[1], "hard_negatives": ["v0", "v1"]}])
    _jsonl(t / "mvc-unknown-id.jsonl", [videos[0], videos[1], {**videos[2], "hard_negatives": ["v9"]}])
    _jsonl(t / "mvc-twice.jsonl", [videos[0], {**videos[1], "hard_negatives": ["v0", "v0"]}, videos[2]])
    _jsonl(t / "mvc-not-a-list.jsonl", [{**videos[0], "hard_negatives": "v1"}, videos[1]])
    _jsonl(t / "mvc-no-summary.jsonl", [videos[0], {"id": "raw", "video": "raw.mp4", "D1": "only raw"}])
    _jsonl(t / "mvc-no-s2.jsonl", [{**videos[0], "S2": "a summary"}, videos[1]])
    (t / "mvc.txt").write_text(json.dumps(videos[0]) + "\n")
    (t / "mvc.csv").write_text("id,video,S1\nv0,v0.mp4,a dog\n")
    with EmbeddingStoreWriter(t / "video-store8", dim=8) as writer:
        writer.add([f"v{i}" for i in range(4)], torch.randn(4, 8))
    with EmbeddingStoreWriter(t / "video-store-short", dim=24) as writer:
        writer.add(["v0"], torch.randn(1, 24))


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


P = ["paragraph", "{t}/train.jsonl", "--model", MODEL]
M = ["mvc", "{t}/mvc.jsonl", "--model", MODEL]


def _mvc(name):
    return ["mvc", f"{{t}}/{name}.jsonl", "--model", MODEL, "--out", "{t}/out.jsonl"]

CASES = {
    "out-is-input": ([*P, "--out", "{t}/train.jsonl"], ["--out", "is the input corpus"], "train.jsonl"),
    "out-exists": ([*P, "--out", "{t}/exists.jsonl"], ["--out", "exists.jsonl", "--overwrite"], None),
    "out-suffix": ([*P, "--out", "{t}/out.csv"], ["--out", ".jsonl", "out.csv"], "out.csv"),
    "no-input": (["paragraph", "{t}/gone.jsonl", "--model", MODEL, "--out", "{t}/out.jsonl"], ["gone.jsonl"],
                 "out.jsonl"),
    "bad-record": (["paragraph", "{t}/bad.jsonl", "--model", MODEL, "--out", "{t}/out.jsonl"],
                   ["bad.jsonl", "caption"], "out.jsonl"),
    "k-zero": ([*P, "--out", "{t}/out.jsonl", "-k", "0"], ["--num-negatives/-k"], "out.jsonl"),
    "range-min-negative": ([*P, "--out", "{t}/out.jsonl", "--range-min", "-1"], ["--range-min"], "out.jsonl"),
    "range-window": ([*P, "--out", "{t}/out.jsonl", "--range-min", "5", "--range-max", "5"],
                     ["--range-max", "--range-min (5)"], "out.jsonl"),
    "margin-negative": ([*P, "--out", "{t}/out.jsonl", "--margin", "-0.1"], ["--margin"], "out.jsonl"),
    "margin-without-positives": ([*P, "--out", "{t}/out.jsonl", "--margin", "0.1", "--pool", "positives"],
                                 ["--margin", "no positive", "record 1"], "out.jsonl"),
    "unknown-pool-field": ([*P, "--out", "{t}/out.jsonl", "--pool", "caption,hard_negatives"],
                           ["--pool", "'hard_negatives'"], "out.jsonl"),
    "image-without-store": ([*P, "--out", "{t}/out.jsonl", "--query", "image"],
                            ["--image-embeddings", "--query image"], "out.jsonl"),
    "store-without-image": ([*P, "--out", "{t}/out.jsonl", "--image-embeddings", "{t}/store8"],
                            ["--image-embeddings", "--query caption"], "out.jsonl"),
    "store-of-another-dim": ([*P, "--out", "{t}/out.jsonl", "--query", "image", "--image-embeddings", "{t}/store8"],
                             ["--image-embeddings", "8-d", "24 dimensions"], "out.jsonl"),
    "store-missing-ids": ([*P, "--out", "{t}/out.jsonl", "--query", "image", "--image-embeddings",
                           "{t}/store-short"], ["store-short", "img1"], "out.jsonl"),
    "nli-with-query": (["nli", "{t}/nli.csv", "--model", MODEL, "--out", "{t}/out.csv", "--query", "caption"],
                       ["--query", "paragraph corpora"], "out.csv"),
    "nli-out-suffix": (["nli", "{t}/nli.csv", "--model", MODEL, "--out", "{t}/out.jsonl"], ["--out", ".csv"],
                       "out.jsonl"),
    "unknown-format": (["mvc-corpus", "{t}/train.jsonl", "--model", MODEL, "--out", "{t}/out.jsonl"],
                       ["invalid choice: 'mvc-corpus'"], "out.jsonl"),
    "tokenizer-of-a-text-model": ([*P, "--out", "{t}/out.jsonl", "--tokenizer", "{t}/tok"],
                                  ["--tokenizer", "tokenizes its texts itself"], "out.jsonl"),
    "bad-model": ([*P[:3], "no_such_module:Model", "--out", "{t}/out.jsonl"], ["--model", "no_such_module"],
                  "out.jsonl"),
    "shard-index-out-of-range": ([*P, "--out", "{t}/out.jsonl", "--shard-index", "3", "--shard-count", "3"],
                                 ["--shard-index", "0 .. 2", "found 3"], "out.jsonl"),
    "shard-index-without-count": ([*P, "--out", "{t}/out.jsonl", "--shard-index", "0"], ["--shard-count"],
                                  "out.jsonl"),
    "shard-count-without-index": ([*P, "--out", "{t}/out.jsonl", "--shard-count", "2"],
                                  ["--shard-index", "$SLURM_ARRAY_TASK_ID"], "out.jsonl"),
    "shard-count-zero": ([*P, "--out", "{t}/out.jsonl", "--shard-index", "0", "--shard-count", "0"],
                         ["--shard-count"], "out.jsonl"),
    "shard-index-negative": ([*P, "--out", "{t}/out.jsonl", "--shard-index", "-1", "--shard-count", "2"],
                             ["--shard-index"], "out.jsonl"),
    "claim-timeout-negative": ([*P, "--out", "{t}/out.jsonl", "--merge-only", "--claim-timeout", "-1"],
                               ["--claim-timeout"], "out.jsonl"),
    "merge-only-with-index": ([*P, "--out", "{t}/out.jsonl", "--merge-only", "--shard-index", "0"],
                              ["--shard-index", "--merge-only"], "out.jsonl"),
    "ray-with-shard-index": ([*P, "--out", "{t}/out.jsonl", "--engine", "ray", "--shard-index", "0", "--shard-count",
                              "2"], ["--shard-index", "--engine ray", "--shard-count N"], "out.jsonl"),
    "ray-with-merge-only": ([*P, "--out", "{t}/out.jsonl", "--engine", "ray", "--merge-only"],
                            ["--merge-only", "drop --engine ray"], "out.jsonl"),
    "ray-workers-without-ray": ([*P, "--out", "{t}/out.jsonl", "--ray-workers", "2"],
                                ["--ray-workers", "--engine ray"], "out.jsonl"),
    "ray-address-without-ray": ([*P, "--out", "{t}/out.jsonl", "--ray-address", "auto"],
                                ["--ray-address", "--engine ray"], "out.jsonl"),
    "ray-workers-zero": ([*P, "--out", "{t}/out.jsonl", "--engine", "ray", "--ray-workers", "0"], ["--ray-workers"],
                         "out.jsonl"),
    "ray-device-index": ([*P, "--out", "{t}/out.jsonl", "--engine", "ray", "--device", "cuda:1"],
                         ["--device", "cuda:1", "Ray gives each task its GPU"], "out.jsonl"),
    "ray-input-missing": (["paragraph", "{t}/nope.jsonl", "--model", MODEL, "--out", "{t}/out.jsonl", "--engine",
                           "ray"], ["INPUT", "nope.jsonl"], "out.jsonl"),
    "ray-range-max-below-min": ([*P, "--out", "{t}/out.jsonl", "--engine", "ray", "--range-min", "3", "--range-max",
                                 "2"], ["--range-max", "--range-min"], "out.jsonl"),
    "merge-only-nothing-to-merge": ([*P, "--out", "{t}/out.jsonl", "--merge-only"],
                                    ["--merge-only", ".out.jsonl.parts", "does not exist"], "out.jsonl"),
    "shard-with-bad-model": ([*P[:3], "no_such_module:Model", "--out", "{t}/out.jsonl", "--shard-index", "0",
                              "--shard-count", "2"], ["--model", "no_such_module"], "out.jsonl"),
    "shard-store-of-another-dim": ([*P, "--out", "{t}/out.jsonl", "--query", "image", "--image-embeddings",
                                    "{t}/store8", "--shard-index", "1", "--shard-count", "2"],
                                   ["--image-embeddings", "8-d", "24 dimensions"], "out.jsonl"),
    "shard-of-bad-record": (["paragraph", "{t}/bad.jsonl", "--model", MODEL, "--out", "{t}/out.jsonl",
                             "--shard-index", "0", "--shard-count", "2"], ["bad.jsonl", "caption"], "out.jsonl"),
    "paragraph-unknown-query": ([*P, "--out", "{t}/out.jsonl", "--query", "summary"],
                                ["--query", "caption, paragraph, image", "'summary'"], "out.jsonl"),
    "paragraph-with-video-store": ([*P, "--out", "{t}/out.jsonl", "--video-embeddings", "{t}/video-store8"],
                                   ["--video-embeddings", "mvc corpora"], "out.jsonl"),
    "paragraph-input-suffix": (["paragraph", "{t}/mvc.txt", "--model", MODEL, "--out", "{t}/out.jsonl"],
                               ["INPUT", ".jsonl", "mvc.txt"], "out.jsonl"),
    # vlr mine mvc: the corpus (read by the trainer's reader), the views, the store
    "mvc-out-is-input": ([*M, "--out", "{t}/mvc.jsonl"], ["--out", "is the input corpus"], None),
    "mvc-out-suffix": ([*M, "--out", "{t}/out.parquet"], ["--out", ".jsonl", "out.parquet"], "out.parquet"),
    "mvc-input-suffix": (["mvc", "{t}/mvc.csv", "--model", MODEL, "--out", "{t}/out.jsonl"],
                         ["INPUT", ".jsonl, .json, .parquet", "mvc.csv"], "out.jsonl"),
    "mvc-unknown-key": (_mvc("mvc-unknown-key"), ["mvc-unknown-key.jsonl", "line 2", "hard_negative",
                                                  "did you mean 'hard_negatives'"], "out.jsonl"),
    "mvc-own-id-negative": (_mvc("mvc-self"), ["mvc-self.jsonl", "line 2", "hard_negatives", "own id 'v1'"],
                            "out.jsonl"),
    "mvc-unknown-id-negative": (_mvc("mvc-unknown-id"), ["mvc-unknown-id.jsonl", "line 3", "hard_negatives",
                                                         "'v9'", "no record"], "out.jsonl"),
    "mvc-id-twice": (_mvc("mvc-twice"), ["mvc-twice.jsonl", "line 2", "hard_negatives", "'v0' given twice"],
                     "out.jsonl"),
    "mvc-negatives-not-a-list": (_mvc("mvc-not-a-list"), ["mvc-not-a-list.jsonl", "line 1", "hard_negatives",
                                                          "list of video ids"], "out.jsonl"),
    "mvc-no-summary-view": (_mvc("mvc-no-summary"), ["mvc-no-summary.jsonl", "line 2", "S1|S2|O", "'raw'",
                                                     "--query summary"], "out.jsonl"),
    "mvc-no-field-of-the-query": ([*_mvc("mvc-no-s2"), "--query", "S2"], ["mvc-no-s2.jsonl", "line 2", "field 'S2'",
                                                                         "'v1' has no S2"], "out.jsonl"),
    "mvc-unknown-view": ([*M, "--out", "{t}/out.jsonl", "--query", "summery"], ["--query", "'summery'", "summary"],
                         "out.jsonl"),
    "mvc-unknown-pool-field": ([*M, "--out", "{t}/out.jsonl", "--pool", "S1,D3"], ["--pool", "'D3' is no field"],
                               "out.jsonl"),
    "mvc-video-pool": ([*M, "--out", "{t}/out.jsonl", "--pool", "video"], ["--pool", "'video'"], "out.jsonl"),
    "mvc-video-without-store": ([*M, "--out", "{t}/out.jsonl", "--query", "video"],
                                ["--video-embeddings", "--query video"], "out.jsonl"),
    "mvc-store-without-video": ([*M, "--out", "{t}/out.jsonl", "--video-embeddings", "{t}/video-store8"],
                                ["--video-embeddings", "--query summary"], "out.jsonl"),
    "mvc-image-store": ([*M, "--out", "{t}/out.jsonl", "--image-embeddings", "{t}/store8"],
                        ["--image-embeddings", "--video-embeddings"], "out.jsonl"),
    "mvc-store-of-another-dim": ([*M, "--out", "{t}/out.jsonl", "--query", "video", "--video-embeddings",
                                  "{t}/video-store8"], ["--video-embeddings", "8-d", "24 dimensions"], "out.jsonl"),
    "mvc-store-missing-ids": ([*M, "--out", "{t}/out.jsonl", "--query", "video", "--video-embeddings",
                               "{t}/video-store-short"], ["video-store-short", "v1"], "out.jsonl"),
    "mvc-margin-without-positives": ([*M, "--out", "{t}/out.jsonl", "--pool", "detailed", "--margin", "0.1"],
                                     ["--margin", "no positive", "record 1"], "out.jsonl"),
    "mvc-shard-of-bad-record": ([*_mvc("mvc-self"), "--shard-index", "0", "--shard-count", "2"],
                                ["mvc-self.jsonl", "line 2", "hard_negatives"], "out.jsonl"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_mine_refuses_bad_input(tmp_path, case):
    corpus(tmp_path)
    argv, where, leaves = CASES[case]
    argv = ["mine", *[a.replace("{t}", str(tmp_path)) for a in argv]]
    assert_refused(argv, *where, leaves=[tmp_path / leaves, tmp_path / f".{leaves}.parts"]
                   if leaves and leaves != "train.jsonl" else [])
    if case == "out-is-input":
        assert (tmp_path / "train.jsonl").read_text().count("\n") == 6  # untouched


# ---------------------------------------------------------------- a sharded run's state on disk

def _mine(t, *argv):
    return run_vlr(["mine", *[str(a).replace("{t}", str(t)) for a in (*P, *argv)]])[0]


def _merged(t):
    """A 2-shard run of train.jsonl merged into t/out.jsonl (its run record beside it)."""
    out = t / "out.jsonl"
    for i in range(2):
        assert _mine(t, "--out", out, "--shard-index", i, "--shard-count", 2) == 0
    return out


def _claimed_by_a_live_process(t):
    """Shard 0 of 2 mined, the merge claimed by a process running on this host (pytest's parent)."""
    out = t / "out.jsonl"
    assert _mine(t, "--out", out, "--shard-index", 0, "--shard-count", 2) == 0
    (t / ".out.jsonl.parts" / "merging.json").write_text(
        json.dumps({"host": socket.gethostname(), "pid": os.getppid(), "started": time.time()}))
    assert _mine(t, "--out", out, "--shard-index", 1, "--shard-count", 2) == 0


def _single(t):
    assert _mine(t, "--out", t / "out.jsonl") == 0


def _corrupt_record(t):
    _merged(t)
    (t / ".out.jsonl.run.json").write_text("{not json")


def _changed(t):
    out = _merged(t)
    out.write_text(out.read_text() + "\n")


S = [*P, "--out", "{t}/out.jsonl"]
STATE_CASES = {
    "out-exists-from-another-run": (_merged, [*S, "--shard-index", "0", "--shard-count", "2", "-k", "2"],
                                    ["--out", "out.jsonl", "exists from another run", "--num-negatives",
                                     "--overwrite"]),
    "out-of-another-run-merge-only": (_merged, [*S, "--merge-only", "--range-min", "1"],
                                      ["--out", "exists from another run", "--range-min"]),
    "out-changed-since-the-run": (_changed, [*S, "--shard-index", "1", "--shard-count", "2"],
                                  ["--out", "out.jsonl", "changed since"]),
    "out-of-a-single-process-run": (_single, [*S, "--shard-index", "0", "--shard-count", "2"],
                                    ["--out", "out.jsonl", "exists", "--overwrite"]),
    "run-record-corrupt": (_corrupt_record, [*S, "--shard-index", "0", "--shard-count", "2"],
                           [".out.jsonl.run.json", "run record", "--overwrite"]),
    "merge-claimed-by-a-live-process": (_claimed_by_a_live_process, [*S, "--merge-only"],
                                        ["--merge-only", "claimed by host", "pid", "running", "--claim-timeout"]),
}


@pytest.mark.parametrize("case", list(STATE_CASES))
def test_mine_refuses_a_sharded_state(tmp_path, case):
    corpus(tmp_path)
    setup, argv, where = STATE_CASES[case]
    setup(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = ["mine", *[a.replace("{t}", str(tmp_path)) for a in argv]]
    if case.startswith("merge"):
        where = [*where, f"pid {os.getppid()}"]
    assert_refused(argv, *where, leaves=[] if case.startswith("merge") else [tmp_path / ".out.jsonl.parts"])
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written


# ---------------------------------------------------------------- under torchrun (RANK / WORLD_SIZE)

TORCHRUN_CASES = {
    "torchrun-rank-and-shard-options-disagree": ({"RANK": "1", "WORLD_SIZE": "2"},
                                                 [*S, "--shard-index", "0", "--shard-count", "2"],
                                                 ["--shard-index", "rank 1 of 2", "torchrun"]),
    "torchrun-rank-outside-the-world": ({"RANK": "2", "WORLD_SIZE": "2"}, S, ["RANK", "0 .. 1", "found 2"]),
    "torchrun-and-ray": ({"RANK": "0", "WORLD_SIZE": "2"}, [*S, "--engine", "ray"], ["--engine", "torchrun", "once"]),
    "torchrun-world-size-not-a-number": ({"RANK": "0", "WORLD_SIZE": "two"}, S, ["WORLD_SIZE", "'two'"]),
}


@pytest.mark.parametrize("case", list(TORCHRUN_CASES))
def test_mine_under_torchrun_refuses_a_rank_that_disagrees(tmp_path, monkeypatch, case):
    corpus(tmp_path)
    env, argv, where = TORCHRUN_CASES[case]
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    argv = ["mine", *[a.replace("{t}", str(tmp_path)) for a in argv]]
    assert_refused(argv, *where, leaves=[tmp_path / "out.jsonl", tmp_path / ".out.jsonl.parts"])


# ---------------------------------------------------------------- --gallery-store and --embed-gallery

G = ["paragraph", "{t}/train.jsonl", "--model", MODEL, "--gallery-store"]


def _gallery(t, *options):
    """t/g: the gallery of train.jsonl embedded by `--embed-gallery` (its meta is what mining checks)."""
    code, _, stderr = run_vlr(["mine", *[str(a).replace("{t}", str(t)) for a in (*G, "{t}/g", "--embed-gallery",
                                                                                *options)]])
    assert code == 0, stderr
    return t / "g"


def _variant(name, *, meta=None, rows=None, dim=None, dtype=torch.float32, replace=None):
    """t/NAME: the store of _gallery with its meta edited, fewer rows, another width or dtype, or
    one text replaced by another (the same count)."""
    def setup(t):
        from vlr_plugins.data.embedding_store import EmbeddingStore, EmbeddingStoreWriter

        with EmbeddingStore(_gallery(t)) as good:
            ids, emb, stored = list(good.ids), good.get(list(good.ids)), dict(good.meta)
        ids = ids[:rows] if rows else [replace if replace and i == 0 else text for i, text in enumerate(ids)]
        emb = emb[: len(ids)] if dim is None else torch.randn(len(ids), dim)
        with EmbeddingStoreWriter(t / name, emb.shape[1], dtype=dtype, meta={**stored, **(meta or {})}) as writer:
            writer.add(ids, emb)
    return setup


def _unfinished(t):
    _gallery(t, "--shard-index", "0", "--shard-count", "2", "--batch-size", "2")


O = ["--out", "{t}/out.jsonl"]
GALLERY_CASES = {
    "gallery-store-missing": (None, [*G, "{t}/nowhere", *O], ["--gallery-store", "nowhere", "no such store",
                                                              "--embed-gallery"]),
    "gallery-store-still-being-written": (_unfinished, [*G, "{t}/g", *O],
                                          ["--gallery-store", "is not finished", "1 of 2", "--shard-index 1",
                                           ".g.shards"]),
    "gallery-store-of-another-model": (_variant("other", meta={"model": "other_module:Model"}), [*G, "{t}/other", *O],
                                       ["other/index.json", "field 'meta.model'", "'other_module:Model'", MODEL]),
    "gallery-store-of-another-text-budget": (_gallery, [*G, "{t}/g", *O, "--max-tokens", "16"],
                                             ["g/index.json", "field 'meta.max_tokens'", "--max-tokens not given",
                                              "gives 16"]),
    "gallery-store-of-another-tokenizer": (_variant("tok", meta={"tokenizer": "bert-base-uncased"}),
                                           [*G, "{t}/tok", *O], ["tok/index.json", "field 'meta.tokenizer'"]),
    "gallery-store-of-another-dim": (_variant("d8", dim=8), [*G, "{t}/d8", *O],
                                     ["d8/index.json", "field 'dim'", "8-d", "queries are 24-d"]),
    "gallery-store-with-fewer-rows-than-the-gallery": (_variant("short", rows=5), [*G, "{t}/short", *O],
                                                       ["short/index.json", "field 'count'", "holds 5 texts",
                                                        "has 9"]),
    "gallery-store-of-another-gallery": (_variant("other-texts", replace="a cat number 0"),
                                         [*G, "{t}/other-texts", *O], ["other-texts/index.json", "field 'ids'",
                                                                       "'a dog number 0'"]),
    "gallery-store-of-another-pool": (_gallery, [*G, "{t}/g", *O, "--pool", "caption"],
                                      ["g/index.json", "field 'count'", "holds 9 texts", "has 6"]),
    "gallery-store-of-images": (None, [*G, "{t}/store8", *O], ["store8/index.json", "field 'meta.mine_gallery'",
                                                                "--embed-gallery"]),
    "gallery-store-of-float16-rows": (_variant("half", dtype=torch.float16), [*G, "{t}/half", *O],
                                      ["half/index.json", "field 'dtype'", "float16"]),
    "shard-with-a-gallery-store-of-another-model": (_variant("other", meta={"model": "other_module:Model"}),
                                                    [*G, "{t}/other", *O, "--shard-index", "1", "--shard-count", "2"],
                                                    ["other/index.json", "field 'meta.model'"]),
    "no-out-to-mine-into": (None, P, ["--out", "needed", "--embed-gallery"]),
    "embed-gallery-without-a-store": (None, [*P, "--embed-gallery"], ["--embed-gallery", "--gallery-store STORE"]),
    "embed-gallery-with-out": (None, [*G, "{t}/g", "--embed-gallery", *O], ["--out", "drop --out"]),
    "ray-without-out": (None, [*P, "--engine", "ray"], ["--out", "needed"]),
    "ray-embed-gallery-without-a-store": (None, [*P, "--engine", "ray", "--embed-gallery"],
                                          ["--embed-gallery", "--gallery-store STORE"]),
    "embed-gallery-over-another-gallery": (_gallery, [*G, "{t}/g", "--embed-gallery", "--pool", "caption"],
                                           ["--gallery-store", "another gallery or model", "--overwrite"]),
    "embed-gallery-over-images": (None, [*G, "{t}/store8", "--embed-gallery"],
                                  ["--gallery-store", "store8", "--overwrite"]),
    "embed-gallery-shards-of-another-batch-size": (_unfinished, [*G, "{t}/g", "--embed-gallery", "--shard-index", "1",
                                                                 "--shard-count", "2", "--batch-size", "3"],
                                                   ["--batch-size", "shard 0", "2", "3"]),
    "embed-gallery-shards-of-another-text-budget": (_unfinished, [*G, "{t}/g", "--embed-gallery", "--shard-index", "1",
                                                                  "--shard-count", "2", "--batch-size", "2",
                                                                  "--max-tokens", "16"],
                                                    ["--max-tokens", "shard 0", "16"]),
    "embed-gallery-merge-only-with-no-parts": (None, [*G, "{t}/g", "--embed-gallery", "--merge-only"],
                                               ["--merge-only", "no parts of", ".g.shards"]),
    "embed-gallery-merge-only-with-a-part-missing": (_unfinished, [*G, "{t}/g", "--embed-gallery", "--merge-only"],
                                                     ["--merge-only", "shard 1 of 2", "nothing merged"]),
}


@pytest.mark.parametrize("case", list(GALLERY_CASES))
def test_mine_refuses_a_gallery_store_and_writes_nothing(tmp_path, case):
    corpus(tmp_path)
    setup, argv, where = GALLERY_CASES[case]
    if setup is not None:
        setup(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = ["mine", *[a.replace("{t}", str(tmp_path)) for a in argv]]
    assert_refused(argv, *where, leaves=[tmp_path / "out.jsonl", tmp_path / ".out.jsonl.parts"])
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # nothing written
    if setup is None and "--embed-gallery" in argv:
        assert not (tmp_path / "g").exists() and not (tmp_path / ".g.shards").exists()
