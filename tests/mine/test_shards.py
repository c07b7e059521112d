"""`vlr mine --shard-index I --shard-count N`: shards run one after another give exactly the
single-process corpus, a rerun redoes only a missing part, and a rerun with other settings is
refused (mine/shards.py)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from _mine_corpora import CORPORA, MODEL, paragraph_corpus
from _refusal import run_vlr
from vlr_plugins._merge_claim import read_claim, take_claim
from vlr_plugins.mine.shards import run_record_of, shard_range, work_dir_of

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
                                          ("nli", []), ("mvc", []),
                                          ("mvc", ["--pool", "detailed", "--range-min", "1", "--margin", "0.05"])])
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


def two_parts_and_a_claim(tmp_path, host, pid, started=None, raw=None):
    """Shard 0 of 2 mined, the merge claimed by ``host``/``pid`` (a merge killed, or running)."""
    if not (tmp_path / "train.jsonl").exists():
        paragraph_corpus(tmp_path / "train.jsonl")
    out = tmp_path / "sharded.jsonl"
    assert mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "2")[0] == 0
    claim = work_dir_of(out) / "merging.json"
    claim.write_text(raw if raw is not None else json.dumps({"host": host, "pid": pid,
                                                               "started": time.time() if started is None else started}))
    return out


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_merge_only_finishes_an_interrupted_merge(tmp_path):
    want = single(tmp_path, "paragraph")
    # a merge killed after claiming, on another host (it cannot be shown gone): the shards leave it
    out = two_parts_and_a_claim(tmp_path, "node-b", 4242)
    code, stdout, _ = mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2")
    assert code == 0 and not out.exists()
    assert "host node-b pid 4242" in stdout and "--merge-only" in stdout and "--claim-timeout" in stdout
    code, stdout, stderr = mine(tmp_path, "paragraph", out, "--merge-only")
    assert code == 0, stderr
    assert "took over" in stdout and "node-b" in stdout
    assert out.read_bytes() == want and not work_dir_of(out).exists()


def test_a_claim_whose_pid_is_gone_is_taken_over(tmp_path):
    want = single(tmp_path, "paragraph")
    out = two_parts_and_a_claim(tmp_path, socket.gethostname(), dead_pid())
    code, stdout, stderr = mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2")
    assert code == 0 and "took over" in stdout and "gone" in stdout, stderr
    assert out.read_bytes() == want and not work_dir_of(out).exists()


@pytest.mark.parametrize("age, timeout, taken", [(100, "50", True), (100, "500", False), (0, None, False)])
def test_a_claim_on_another_host_is_taken_over_after_the_timeout(tmp_path, age, timeout, taken):
    want = single(tmp_path, "paragraph")
    out = two_parts_and_a_claim(tmp_path, "node-b", 4242, started=time.time() - age)
    extra = ["--claim-timeout", timeout] if timeout else []
    code, stdout, stderr = mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2", *extra)
    assert code == 0, stderr
    assert ("took over" in stdout) == taken and out.exists() == taken
    if taken:
        assert out.read_bytes() == want


def test_a_live_holder_on_this_host_is_left_alone(tmp_path):
    out = two_parts_and_a_claim(tmp_path, socket.gethostname(), os.getppid())  # alive: pytest's parent
    code, stdout, _ = mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2")
    assert code == 0 and f"pid {os.getppid()}" in stdout and "running" in stdout and not out.exists()
    code, _, stderr = mine(tmp_path, "paragraph", out, "--merge-only")
    assert code == 2 and f"pid {os.getppid()}" in stderr and "running" in stderr and not out.exists()
    assert (work_dir_of(out) / "merging.json").is_file() and len(list(work_dir_of(out).glob("part-*"))) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [work_dir_of(out).name]


def test_an_unreadable_claim_is_judged_by_its_age(tmp_path):
    out = two_parts_and_a_claim(tmp_path, None, None, raw='{"host": "node')  # as a kill mid-write may leave
    code, stdout, _ = mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2")
    assert code == 0 and "unreadable claim" in stdout and not out.exists()
    old = time.time() - 120
    os.utime(work_dir_of(out) / "merging.json", (old, old))
    code, stdout, _ = mine(tmp_path, "paragraph", out, "--shard-index", "1", "--shard-count", "2",
                           "--claim-timeout", "60")
    assert code == 0 and "took over" in stdout and out.is_file()


def test_one_of_two_claimants_holds_the_claim(tmp_path):
    path = tmp_path / "merging.json"
    assert take_claim(path, timeout=3600) == (True, None)
    held = read_claim(path)
    assert held.host == socket.gethostname() and held.pid == os.getpid() and time.time() - held.started < 60
    # a second claimant (another live process, here this one seen from outside) is refused
    path.write_text(json.dumps({"host": held.host, "pid": os.getppid(), "started": held.started}))
    claimed, claim = take_claim(path, timeout=3600)
    assert not claimed and claim.pid == os.getppid()
    assert [p.name for p in tmp_path.iterdir()] == ["merging.json"]  # no temporary left


def test_a_requeued_task_after_the_merge_does_nothing(tmp_path):
    want = single(tmp_path, "paragraph")
    out = tmp_path / "sharded.jsonl"
    for i in range(2):
        assert mine(tmp_path, "paragraph", out, "--shard-index", str(i), "--shard-count", "2")[0] == 0
    record = run_record_of(out)
    assert out.read_bytes() == want and record.is_file() and not work_dir_of(out).exists()
    stamp = out.stat().st_mtime_ns
    for argv in (["--shard-index", "0", "--shard-count", "2"], ["--merge-only"]):
        code, stdout, stderr = mine(tmp_path, "paragraph", out, *argv)
        assert code == 0 and "already written by this run" in stdout, stderr
    assert out.stat().st_mtime_ns == stamp and not work_dir_of(out).exists()
    # the same output path from other settings, or changed since: refused, nothing written
    code, _, stderr = mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "2", "-k", "2")
    assert code == 2 and "exists from another run" in stderr and "--num-negatives" in stderr, stderr
    out.write_bytes(want + b"\n")
    code, _, stderr = mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "2")
    assert code == 2 and "changed since" in stderr and not work_dir_of(out).exists(), stderr
    # a single-process --overwrite replaces the output and its record goes: a shard then refuses it
    assert mine(tmp_path, "paragraph", out, "--overwrite")[0] == 0
    assert not record.exists()
    code, _, stderr = mine(tmp_path, "paragraph", out, "--shard-index", "0", "--shard-count", "2")
    assert code == 2 and "--overwrite" in stderr and not work_dir_of(out).exists()


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


def test_an_mvc_view_spelled_out_is_the_same_run(tmp_path):
    want = single(tmp_path, "mvc")
    out = tmp_path / "sharded.jsonl"
    assert mine(tmp_path, "mvc", out, "--shard-index", "0", "--shard-count", "2")[0] == 0
    code, _, stderr = mine(tmp_path, "mvc", out, "--shard-index", "1", "--shard-count", "2", "--query", "S1, S2,O",
                           "--pool", "summary")
    assert code == 0, stderr
    assert out.read_bytes() == want
    code, _, stderr = mine(tmp_path, "mvc", tmp_path / "other.jsonl", "--shard-index", "0", "--shard-count", "2")
    assert code == 0, stderr
    code, _, stderr = mine(tmp_path, "mvc", tmp_path / "other.jsonl", "--shard-index", "1", "--shard-count", "2",
                           "--pool", "detailed")
    assert code == 2 and "error: --pool:" in stderr and "shards already written" in stderr, stderr


def test_torchrun_ranks_take_their_shards_and_give_the_single_process_corpus(tmp_path):
    """A real ``torchrun --standalone --nproc-per-node 2``: no shard options, each rank mines its
    shard by RANK / WORLD_SIZE, and whichever finishes last merges the single-process bytes."""
    pytest.importorskip("torch.distributed.run", reason="no torchrun (torch.distributed.run) in this torch")
    from _torchrun import cpu_env

    want = single(tmp_path, "paragraph")
    out = tmp_path / "ranked.jsonl"
    env = cpu_env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], os.path.dirname(__file__) + "/../_support"])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
            "vlr_plugins.cli", "mine", "paragraph", str(tmp_path / "train.jsonl"), "--model", MODEL, "--out", str(out),
            "-k", "3"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert out.read_bytes() == want
    assert not work_dir_of(out).exists() and run_record_of(out).is_file()
    record = json.loads(run_record_of(out).read_text())
    assert record["manifest"]["settings"]["shard_count"] == 2
    assert "shard 0 of 2" in done.stdout and "shard 1 of 2" in done.stdout


def test_a_shard_that_finds_the_parts_merged_meanwhile_knows_it_was_this_run(tmp_path):
    """Two ranks finishing at once: the one that lost the merge finds the work folder gone; it is
    this run's merge only when the run record beside --out holds this run's manifest."""
    from vlr_plugins.cli import build_parser
    from vlr_plugins.mine.shards import open_shards

    paragraph_corpus(tmp_path / "train.jsonl")
    out = tmp_path / "sharded.jsonl"
    for i in range(2):
        assert mine(tmp_path, "paragraph", out, "--shard-index", str(i), "--shard-count", "2")[0] == 0

    def run_of(*more):
        args = build_parser().parse_args(["mine", "paragraph", str(tmp_path / "train.jsonl"), "--model", MODEL,
                                          "--out", str(out), "-k", "3", "--shard-index", "1", "--shard-count", "2",
                                          *more])
        return open_shards(args, 14)

    assert run_of().merged_already(out)
    assert not run_of("-k", "2").merged_already(out)  # another run's record: not merged by a shard of this one
    run_record_of(out).unlink()
    assert not run_of().merged_already(out)
