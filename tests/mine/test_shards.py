"""`vlr mine --shard-index I --shard-count N`: shards run one after another give exactly the
single-process corpus, a rerun redoes only a missing part, and a rerun with other settings is
refused (mine/shards.py)."""

from __future__ import annotations

import json

import pytest

from _refusal import run_vlr
from vlr_plugins.mine.shards import shard_range, work_dir_of

MODEL = "_bow_model:BagOfWords"
COLOURS = ["red", "blue", "green", "black", "white", "brown"]
ANIMALS = ["dog", "cat", "horse", "bird", "cow"]


def paragraph_corpus(path, n=14):
    rows = [{"id": f"img{i}", "caption": f"a {COLOURS[i % 6]} {ANIMALS[i % 5]} on the grass",
             "positives": [f"the {ANIMALS[i % 5]} is {COLOURS[i % 6]}", f"{COLOURS[i % 6]} {ANIMALS[i % 5]} {i}"],
             "paragraph": f"A {COLOURS[i % 6]} {ANIMALS[i % 5]} stands on green grass."} for i in range(n)]
    rows[3]["positives"].append(rows[9]["caption"])  # a text two samples share
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def nli_corpus(path):
    pairs = [(f"a {c} {a} runs", f"the {a} that is {c} is running") for c in COLOURS[:4] for a in ANIMALS[:3]]
    pairs.append((pairs[0][0], "an animal moves"))
    path.write_text("sent0,sent1\n" + "".join(f"{a},{b}\n" for a, b in pairs))


CORPORA = {"paragraph": ("train.jsonl", ".jsonl", lambda p: paragraph_corpus(p)), "nli": ("nli.csv", ".csv", nli_corpus)}


def mine(tmp_path, fmt, out, *options):
    name = CORPORA[fmt][0]
    return run_vlr(["mine", fmt, tmp_path / name, "--model", MODEL, "--out", out, "-k", "3", *options])


def single(tmp_path, fmt, *options):
    CORPORA[fmt][2](tmp_path / CORPORA[fmt][0])
    out = tmp_path / f"single{CORPORA[fmt][1]}"
    code, _, stderr = mine(tmp_path, fmt, out, *options)
    assert code == 0, stderr
    assert not work_dir_of(out).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no work folder, no temp
    return out.read_bytes()


def test_shard_ranges_cover_the_records_once_in_order():
    for n in (0, 1, 7, 14):
        for count in (1, 3, 8, 20):
            ranges = [shard_range(n, i, count) for i in range(count)]
            assert [i for a, b in ranges for i in range(a, b)] == list(range(n))


@pytest.mark.parametrize("fmt, options", [("paragraph", []), ("paragraph", ["--range-min", "1", "--margin", "0.05"]),
                                          ("nli", [])])
def test_three_shards_give_the_single_process_corpus(tmp_path, fmt, options):
    want = single(tmp_path, fmt, *options)
    out = tmp_path / f"sharded{CORPORA[fmt][1]}"
    for i in range(3):
        code, stdout, stderr = mine(tmp_path, fmt, out, *options, "--shard-index", str(i), "--shard-count", "3")
        assert code == 0, stderr
        if i < 2:
            assert not out.exists() and "not complete" in stdout
            assert len(list(work_dir_of(out).glob("part-*.json"))) == i + 1
    assert out.read_bytes() == want
    assert not work_dir_of(out).exists()


def test_more_shards_than_records_and_merge_only(tmp_path):
    want = single(tmp_path, "nli")
    out = tmp_path / "sharded.csv"
    for i in reversed(range(20)):  # 13 records: some shards are empty; any order
        assert mine(tmp_path, "nli", out, "--shard-index", str(i), "--shard-count", "20")[0] == 0
    assert out.read_bytes() == want


def test_a_rerun_redoes_only_the_missing_part(tmp_path):
    want = single(tmp_path, "paragraph")
    out = tmp_path / "sharded.jsonl"
    for i in range(2):
        assert mine(tmp_path, "paragraph", out, "--shard-index", str(i), "--shard-count", "3")[0] == 0
    work = work_dir_of(out)
    kept = work / "part-00000-of-00003.json"
    before = (kept.read_bytes(), kept.stat().st_mtime_ns)
    (work / "part-00001-of-00003.json").unlink()  # as if shard 1 was killed before its part was renamed
    code, stdout, _ = mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "3")
    assert code == 0 and "already mined" in stdout
    assert (kept.read_bytes(), kept.stat().st_mtime_ns) == before  # not redone
    code, _, stderr = mine(tmp_path, "paragraph", out, "--merge-only")
    assert code == 2 and "--merge-only" in stderr and "shard 1" in stderr and not out.exists()
    for i in (2, 1):
        assert mine(tmp_path, "paragraph", out, "--shard-index", str(i), "--shard-count", "3")[0] == 0
    assert (kept.read_bytes() if kept.exists() else None) is None
    assert out.read_bytes() == want


def test_merge_only_finishes_an_interrupted_merge(tmp_path):
    want = single(tmp_path, "paragraph")
    out = tmp_path / "sharded.jsonl"
    for i in range(2):
        assert mine(tmp_path, "paragraph", out, "--shard-index", str(i), "--shard-count", "2")[0] == 0
    assert out.read_bytes() == want
    # a merge killed after claiming: the shards leave it; --merge-only writes the corpus
    out.unlink()
    assert mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "2")[0] == 0
    (work_dir_of(out) / "merging").mkdir()
    assert mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2")[0] == 0
    assert not out.exists()
    code, _, stderr = mine(tmp_path, "paragraph", out, "--merge-only")
    assert code == 0, stderr
    assert out.read_bytes() == want and not work_dir_of(out).exists()


@pytest.mark.parametrize("change, option", [
    (["-k", "2"], "--num-negatives"),
    (["--range-min", "1"], "--range-min"),
    (["--margin", "0.1"], "--margin"),
    (["--pool", "caption"], "--pool"),
    (["--query", "paragraph"], "--query"),
    (["--keep-existing"], "--keep-existing"),
    (["--shard-count", "4"], "--shard-count"),
    (["--model", "_bow_model:Other"], "--model"),
    ("input", "INPUT"),
])
def test_other_settings_between_shards_are_refused(tmp_path, change, option):
    paragraph_corpus(tmp_path / "train.jsonl")
    out = tmp_path / "sharded.jsonl"
    assert mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "3")[0] == 0
    manifest = (work_dir_of(out) / "manifest.json").read_bytes()
    argv = ["--shard-index", "1", "--shard-count", "3"]
    if change == "input":
        paragraph_corpus(tmp_path / "train.jsonl", n=15)
    elif change[0] == "--shard-count":
        argv = ["--shard-index", "1", *change]
    else:
        argv += change
    code, _, stderr = mine(tmp_path, "paragraph", out, *argv)  # a second --model is the one argparse keeps
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {option}:"), stderr
    assert "shards already written" in lines[0] and str(work_dir_of(out)) in lines[0]
    assert (work_dir_of(out) / "manifest.json").read_bytes() == manifest
    assert len(list(work_dir_of(out).glob("part-*"))) == 1 and not out.exists()


def test_a_spelled_out_default_is_the_same_run(tmp_path):
    paragraph_corpus(tmp_path / "train.jsonl")
    out = tmp_path / "sharded.jsonl"
    assert mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "2")[0] == 0
    code, _, stderr = mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2",
                           "--query", "caption", "--pool", "caption, positives")
    assert code == 0, stderr
    assert json.loads(out.read_text().splitlines()[0])["id"] == "img0"


def test_a_corrupt_manifest_is_refused_naming_it(tmp_path):
    paragraph_corpus(tmp_path / "train.jsonl")
    out = tmp_path / "sharded.jsonl"
    assert mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "2")[0] == 0
    (work_dir_of(out) / "manifest.json").write_text("{not json")
    for argv in (["--shard-index", "1", "--shard-count", "2"], ["--merge-only"]):
        code, _, stderr = mine(tmp_path, "paragraph", out, *argv)
        assert code == 2 and "manifest.json" in stderr and "Traceback" not in stderr, stderr
    assert not out.exists()
