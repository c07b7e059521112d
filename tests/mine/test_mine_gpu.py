"""`vlr mine --device cuda`: the mined corpus of one process equals that of two job-array shards on
the GPU, byte for byte, and the CPU's.

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it. The text model is
the tests' bag of words (its vectors are made on the CPU); the similarities, the ranking and
the hard-negative filters run on the GPU. CUDA's float sums may differ from the CPU's in the
last bits; the scores of this corpus are far enough apart that the same indices come out.
"""

from __future__ import annotations

import json

import pytest

from _refusal import run_vlr

pytestmark = pytest.mark.gpu

COLOURS = ["red", "blue", "green", "black", "white", "brown"]
ANIMALS = ["dog", "cat", "horse", "bird", "cow"]


def _corpus(path, n=14):
    rows = [{"id": f"img{i}", "caption": f"a {COLOURS[i % 6]} {ANIMALS[i % 5]} on the grass",
             "positives": [f"the {ANIMALS[i % 5]} is {COLOURS[i % 6]}"]} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _mine(corpus, out, *options):
    code, stdout, stderr = run_vlr(["mine", "paragraph", corpus, "--model", "_bow_model:BagOfWords", "--out", out,
                                    "-k", "3", *options])
    assert code == 0, stdout + stderr
    return stdout


def test_one_process_two_shards_on_the_gpu_and_the_cpu_mine_the_same_corpus(tmp_path):
    corpus = _corpus(tmp_path / "train.jsonl")
    one, shards, cpu = tmp_path / "one.jsonl", tmp_path / "shards.jsonl", tmp_path / "cpu.jsonl"
    _mine(corpus, one, "--device", "cuda")
    for index in ("1", "0"):  # a job array, in any order: the last to finish merges
        _mine(corpus, shards, "--device", "cuda", "--shard-index", index, "--shard-count", "2")
    _mine(corpus, cpu, "--device", "cpu")
    assert shards.read_bytes() == one.read_bytes()
    assert one.read_bytes() == cpu.read_bytes()
    assert len(one.read_text().splitlines()) == 14
