"""`vlr mine --gallery-store STORE`: the gallery embedded once (`--embed-gallery`, sharded or
not) and mined against by every shard gives byte for byte the corpus one process mines
embedding the gallery on the fly (mine/gallery_store.py), with a tokenized checkpoint whose
batches are padded to their longest text, and with a `module:callable` text model."""

from __future__ import annotations

import argparse
import filecmp

import pytest
import torch

from _blip_world import paragraph_checkpoint, tiny_blip_text_encoder
from _mine_corpora import CORPORA, MODEL, paragraph_corpus
from _refusal import run_vlr
from vlr_plugins.data.embedding_store import EmbeddingStore
from vlr_plugins.data.sample import read_paragraph_samples
from vlr_plugins.mine.corpora import paragraph_task
from vlr_plugins.mine.text_embedder import text_embedder


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny BLIP text encoder over a WordPiece vocabulary of the corpus' words, as a checkpoint."""
    from vlr_plugins.text import build_wordpiece_tokenizer

    root = tmp_path_factory.mktemp("ckpt")
    paragraph_corpus(root / "train.jsonl")
    words = sorted({w.strip(".").lower() for line in (root / "train.jsonl").read_text().split('"')
                    for w in line.split()})
    tokenizer = build_wordpiece_tokenizer(words)
    tokenizer.save_pretrained(root / "tok")
    return str(paragraph_checkpoint(root / "c5.pth", tiny_blip_text_encoder(tokenizer, root / "tok"), None))


def vlr_mine(*argv):
    code, stdout, stderr = run_vlr(["mine", *map(str, argv)])
    assert code == 0, stderr
    return stdout


def three_ways(tmp_path, fmt, model, *options):
    """The corpus mined on the fly by one process, with a store one process embedded, and by
    2 mining shards with a store 3 gallery shards embedded: the outputs' bytes, the stores."""
    name, suffix, write = CORPORA[fmt]
    write(tmp_path / name)
    common = [fmt, tmp_path / name, "--model", model, *options]
    outs = {}
    vlr_mine(*common, "--out", tmp_path / f"fly{suffix}", "-k", "3")
    vlr_mine(*common, "--gallery-store", tmp_path / "g1", "--embed-gallery")
    vlr_mine(*common, "--gallery-store", tmp_path / "g1", "--out", tmp_path / f"one{suffix}", "-k", "3")
    for i in (2, 0, 1):  # any order: the last to finish merges
        vlr_mine(*common, "--gallery-store", tmp_path / "g3", "--embed-gallery", "--shard-index", i, "--shard-count", 3)
    for i in range(2):
        vlr_mine(*common, "--gallery-store", tmp_path / "g3", "--out", tmp_path / f"two{suffix}", "-k", "3",
                 "--shard-index", i, "--shard-count", 2)
    for way in ("fly", "one", "two"):
        outs[way] = (tmp_path / f"{way}{suffix}").read_bytes()
    return outs, tmp_path / "g1", tmp_path / "g3"


def same_tree(a, b):
    cmp = filecmp.dircmp(a, b)
    return not (cmp.left_only or cmp.right_only or cmp.diff_files) and all(
        filecmp.cmp(a / f, b / f, shallow=False) for f in cmp.common_files)


def test_checkpoint_gallery_rows_are_the_on_the_fly_bits_and_the_corpus_is_identical(tmp_path, checkpoint):
    outs, one, sharded = three_ways(tmp_path, "paragraph", checkpoint, "--batch-size", "4", "--range-min", "1")
    assert outs["fly"] == outs["one"] == outs["two"]
    assert same_tree(one, sharded)  # 3 gallery shards write the store one process writes, byte for byte
    samples = read_paragraph_samples(tmp_path / "two.jsonl")
    shared = samples[9].caption  # also a positive of sample 3: mined for neither
    for s in samples:
        assert len(s.hard_negatives) == 3 and not set(s.hard_negatives) & {s.caption, *s.positives}
        assert s.id not in ("img3", "img9") or shared not in s.hard_negatives
    assert not (tmp_path / ".g3.shards").exists()
    # the rows are the gallery as mining embeds it on the fly: length-sorted batches of 4, each
    # padded to its longest text (42 texts: 11 batches over 3 shards, whole batches each)
    task = paragraph_task(read_paragraph_samples(tmp_path / "train.jsonl"), source="train.jsonl")
    args = argparse.Namespace(model=checkpoint, tokenizer=None, max_tokens=None, batch_size=4, model_dtype=None)
    embedder = text_embedder(args, "cpu")
    assert embedder.length_sorted and len(task.gallery) > 3 * 4
    with torch.inference_mode():
        fly = embedder(task.gallery, "", progress=False)
    with EmbeddingStore(sharded) as store:
        assert list(store.ids) == [task.gallery[i] for i in embedder.order(task.gallery)]
        assert torch.equal(store.get(task.gallery), fly)


@pytest.mark.parametrize("fmt, options", [("nli", []), ("mvc", ["--pool", "detailed", "--margin", "0.05"]),
                                          ("paragraph", ["--batch-size", "5", "--margin", "0.05"])])
def test_a_text_model_store_mines_what_on_the_fly_mining_does(tmp_path, fmt, options):
    outs, one, sharded = three_ways(tmp_path, fmt, MODEL, *options)
    assert outs["fly"] == outs["one"] == outs["two"]
    assert same_tree(one, sharded)


def test_a_rerun_of_a_finished_gallery_shard_and_a_requeue_after_the_merge_do_nothing(tmp_path):
    paragraph_corpus(tmp_path / "train.jsonl")
    common = ["paragraph", tmp_path / "train.jsonl", "--model", MODEL, "--gallery-store", tmp_path / "g",
              "--embed-gallery", "--batch-size", "4", "--shard-count", 3]
    vlr_mine(*common, "--shard-index", 0)
    part = tmp_path / ".g.shards" / "part-00000-of-00003" / "index.json"
    before = part.stat().st_mtime_ns
    assert "finished already" in vlr_mine(*common, "--shard-index", 0)  # a rerun of a finished part
    assert part.stat().st_mtime_ns == before
    vlr_mine(*common, "--shard-index", 1)
    assert "merged from 3 shards" in vlr_mine(*common, "--shard-index", 2)
    assert "nothing to do" in vlr_mine(*common, "--shard-index", 1)  # a requeue after the merge
    stored = (tmp_path / "g" / "index.json").read_bytes()
    vlr_mine("paragraph", tmp_path / "train.jsonl", "--model", MODEL, "--gallery-store", tmp_path / "g",
             "--out", tmp_path / "out.jsonl")
    assert (tmp_path / "g" / "index.json").read_bytes() == stored  # mining reads the store only


FLAKY = '''
import os

from _bow_model import BagOfWords


class Flaky(BagOfWords):
    """BagOfWords that logs each call to FLAKY_LOG, stopped (as by a kill) at call FLAKY_STOP_AT."""

    def __init__(self):
        self.calls = 0

    def encode_text(self, texts):
        self.calls += 1
        if os.environ.get("FLAKY_STOP_AT") == str(self.calls):
            raise KeyboardInterrupt
        with open(os.environ["FLAKY_LOG"], "a") as log:
            log.write(f"{len(texts)}\\n")
        return super().encode_text(texts)
'''


def test_a_stopped_gallery_shard_keeps_its_batches_and_the_same_command_finishes_it(tmp_path, monkeypatch):
    from vlr_plugins.data.resumable_store import read_store_progress

    paragraph_corpus(tmp_path / "train.jsonl")
    (tmp_path / "_flaky_text_model.py").write_text(FLAKY)
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FLAKY_LOG", str(log))
    common = ["mine", "paragraph", "train.jsonl", "--model", "_flaky_text_model:Flaky", "--batch-size", "4"]
    code, _, stderr = run_vlr([*common, "--gallery-store", "one", "--embed-gallery"], cwd=tmp_path)
    assert code == 0, stderr
    shard = [*common, "--gallery-store", "g", "--embed-gallery", "--shard-index", "1", "--shard-count", "2"]
    monkeypatch.setenv("FLAKY_STOP_AT", "3")
    code, _, stderr = run_vlr(shard, cwd=tmp_path)
    assert code != 0
    part = tmp_path / ".g.shards" / "part-00001-of-00002"
    assert len(read_store_progress(part).ids) == 8  # its first two batches, durable
    monkeypatch.delenv("FLAKY_STOP_AT")
    log.unlink()
    code, _, stderr = run_vlr(shard, cwd=tmp_path)
    assert code == 0, stderr
    assert log.read_text().split() == ["4"] * 3 + ["2"]  # shard 1's 22 texts: only its missing batches
    code, _, stderr = run_vlr([*shard[:-4], "--shard-index", "0", "--shard-count", "2"], cwd=tmp_path)
    assert code == 0, stderr
    assert same_tree(tmp_path / "one", tmp_path / "g")


def test_torchrun_ranks_embed_the_gallery_together_then_mine_against_it(tmp_path):
    """A real ``torchrun --standalone --nproc-per-node 2`` twice: the ranks embed their shares of
    the gallery at once (whichever finishes last merges), then mine their queries against it."""
    pytest.importorskip("torch.distributed.run", reason="no torchrun (torch.distributed.run) in this torch")
    import os
    import subprocess
    import sys

    from _torchrun import cpu_env

    paragraph_corpus(tmp_path / "train.jsonl")
    vlr_mine("paragraph", tmp_path / "train.jsonl", "--model", MODEL, "--out", tmp_path / "fly.jsonl", "-k", "3")
    vlr_mine("paragraph", tmp_path / "train.jsonl", "--model", MODEL, "--gallery-store", tmp_path / "one",
             "--embed-gallery", "--batch-size", "4")
    env = cpu_env()
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], os.path.dirname(__file__) + "/../_support"])
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    common = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
              "vlr_plugins.cli", "mine", "paragraph", str(tmp_path / "train.jsonl"), "--model", MODEL,
              "--gallery-store", str(tmp_path / "g"), "--batch-size", "4"]
    for more, printed in ((["--embed-gallery"], "merged from 2 shards"),
                          (["--out", str(tmp_path / "ranked.jsonl"), "-k", "3"], "mined 42 hard negatives")):
        done = subprocess.run([*common, *more], capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "of 2" in done.stdout and printed in done.stdout
    assert same_tree(tmp_path / "one", tmp_path / "g") and not (tmp_path / ".g.shards").exists()
    assert (tmp_path / "ranked.jsonl").read_bytes() == (tmp_path / "fly.jsonl").read_bytes()
