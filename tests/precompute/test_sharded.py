"""``vlr precompute`` sharded: one process, two job-array shards and two torchrun-style ranks
write byte-identical stores of a tiny BLIP tower; a shard killed with SIGKILL is resumed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from _refusal import run_vlr
from _tiny_blip import save_tiny_blip

from vlr_plugins.data import EmbeddingStore

SRC = Path(__file__).resolve().parents[2] / "src"
N_IMAGES, BATCH = 13, 3  # 5 batches: shard 0 takes 2 (images 0..5), shard 1 takes 3 (6..12)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    from PIL import Image

    root = tmp_path_factory.mktemp("sharded")
    rng = np.random.default_rng(0)
    for i in range(N_IMAGES):  # sizes differ, so the processor resizes
        (root / "photos" / f"g{i % 3}").mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, size=(20 + 3 * i, 40 - i, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "photos" / f"g{i % 3}" / f"im{i:02d}.png")
    return {"root": root, "photos": root / "photos", "blip": save_tiny_blip(root / "blip")}


@pytest.fixture
def one_thread():
    """Every run here computes in one thread (as torchrun's ranks do: OMP_NUM_THREADS=1); the
    rows of a float reduction split over other thread counts may differ in their last bits."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _files(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(store.iterdir())}


def _precompute(world: dict[str, Path], out: Path, *more: str, encoder: str | None = None) -> list[str]:
    return ["precompute", "--images", str(world["photos"]), "--encoder", encoder or f"blip:{world['blip']}",
            "--out", str(out), "--batch-size", str(BATCH), "--workers", "0", *more]


def _env(**more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "PYTHONPATH": str(SRC), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1", **more}


_VLR = [sys.executable, "-c", "import sys; from vlr_plugins.cli import main; sys.exit(main())"]


def test_one_process_two_shards_and_two_ranks_write_the_same_bytes(world, tmp_path, one_thread):
    one, shards, ranks = tmp_path / "one", tmp_path / "shards", tmp_path / "ranks"
    code, _, err = run_vlr(_precompute(world, one))
    assert code == 0, err
    # a job array: the tasks in any order; the last to finish merges
    code, out, err = run_vlr(_precompute(world, shards, "--shard-index", "1", "--shard-count", "2"))
    assert code == 0 and "waiting for shard 0" in out and not shards.exists(), out + err
    assert (tmp_path / ".shards.shards" / "part-00001-of-00002" / "index.json").is_file()
    code, out, err = run_vlr(_precompute(world, shards, "--shard-index", "0", "--shard-count", "2"))
    assert code == 0 and "merged from 2 shards" in out, out + err
    # torchrun's ranks: RANK / WORLD_SIZE / LOCAL_RANK and no shard options, both at once
    procs = [subprocess.Popen(_VLR + _precompute(world, ranks), env=_env(RANK=str(r), WORLD_SIZE="2",
                                                                         LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), results
    assert sum("merged from 2 shards" in o for o, _, _ in results) == 1, results

    reference = _files(one)
    assert reference.keys() == {"index.json", "embeddings-00000.safetensors"}
    assert _files(shards) == reference and _files(ranks) == reference
    assert not (tmp_path / ".shards.shards").exists() and not (tmp_path / ".ranks.shards").exists()
    store = EmbeddingStore(shards)
    assert len(store) == N_IMAGES and list(store.ids) == sorted(store.ids)  # the folder's order, whole


KILLER = textwrap.dedent(
    """
    import os, signal
    from vlr_plugins.precompute import BlipImageEncoder

    class Blip:
        '''The tiny BLIP, killed with SIGKILL as it is called for the $KILL_AT-th time.'''

        def __init__(self):
            self.inner = BlipImageEncoder(os.environ["TINY_BLIP"])
            self.dim, self.calls = self.inner.dim, 0

        def __call__(self, images):
            self.calls += 1
            with open(os.environ["CALLS_LOG"], "a") as f:
                f.write(f"{len(images)}\\n")
            if self.calls == int(os.environ.get("KILL_AT", "0")):
                os.kill(os.getpid(), signal.SIGKILL)
            return self.inner(images)
    """
)


def test_a_shard_killed_with_sigkill_is_resumed_to_the_same_store(world, tmp_path, one_thread, monkeypatch):
    (tmp_path / "killer.py").write_text(KILLER)
    log = tmp_path / "calls.log"
    for key, value in (("TINY_BLIP", str(world["blip"])), ("CALLS_LOG", str(log))):
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    one, out = tmp_path / "one", tmp_path / "store"
    code, _, err = run_vlr(_precompute(world, one, encoder="killer:Blip"), cwd=tmp_path)
    assert code == 0, err
    log.unlink()
    shard = ["--shard-index", "1", "--shard-count", "2"]
    # in a process of its own, killed as it calls the tower for its 3rd batch; rows become durable
    # every 3 (a batch) instead of every 256 there, so that the kill finds some
    flushing = _VLR[:2] + ["import sys; import vlr_plugins.precompute.sharded as s; s._FLUSH_ROWS = 3; "
                           "from vlr_plugins.cli import main; sys.exit(main())"]
    run = subprocess.run(flushing + _precompute(world, out, *shard, encoder="killer:Blip"),
                         env=_env(KILL_AT="3", PYTHONPATH=f"{SRC}{os.pathsep}{tmp_path}"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -9, run.stderr
    partial = tmp_path / ".store.shards" / ".part-00001-of-00002.partial"
    assert sorted(p.name for p in partial.glob("embeddings-*.safetensors")) == [
        "embeddings-00000.safetensors", "embeddings-00001.safetensors"]  # 2 of its 3 batches
    assert not out.exists() and log.read_text().split() == ["3", "3", "1"]
    code, _, err = run_vlr(_precompute(world, out, *shard, encoder="killer:Blip"), cwd=tmp_path)
    assert code == 2 and "--resume" in err.splitlines()[-1], err  # its rows are there: resume or overwrite
    assert log.read_text().split() == ["3", "3", "1"]  # refused before the tower was called
    log.unlink()
    code, out_text, err = run_vlr(_precompute(world, out, *shard, "--resume", encoder="killer:Blip"), cwd=tmp_path)
    assert code == 0 and "waiting for shard 0" in out_text, err
    assert log.read_text().split() == ["1"]  # only the batch the kill interrupted (image 12) is encoded again
    code, out_text, err = run_vlr(_precompute(world, out, "--shard-index", "0", "--shard-count", "2",
                                              encoder="killer:Blip"), cwd=tmp_path)
    assert code == 0 and "merged from 2 shards" in out_text, err
    assert _files(out) == _files(one)
