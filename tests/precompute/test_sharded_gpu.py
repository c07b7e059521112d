"""`vlr precompute --device cuda` on a tiny BLIP tower (images) and a tiny Qwen2-VL (``mllm:``,
videos): one process and two job-array shards on the GPU write byte-identical stores, and
their embeddings are the CPU's within 1e-4.

Marked ``gpu``: skips without CUDA; ``benchmarks/gpu_check.sh`` requires it. On one device the
shards compute the same batches as the single process (the batch boundaries are the shards'),
so the bytes agree; against the CPU only the floats' last bits may differ.
"""

from __future__ import annotations

import numpy as np
import pytest

from _refusal import run_vlr

pytestmark = pytest.mark.gpu

N_IMAGES, BATCH = 7, 2


def _files(store):
    return {p.name: p.read_bytes() for p in sorted(store.iterdir())}


def test_one_process_and_two_shards_on_the_gpu_write_the_same_store(tmp_path):
    from PIL import Image

    from _tiny_blip import save_tiny_blip
    from vlr_plugins.data import EmbeddingStore

    rng = np.random.default_rng(0)
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(N_IMAGES):
        Image.fromarray(rng.integers(0, 256, size=(20 + 3 * i, 40 - i, 3), dtype=np.uint8)).save(photos / f"im{i}.png")
    blip = save_tiny_blip(tmp_path / "blip")

    def precompute(out, *more):
        code, stdout, stderr = run_vlr(["precompute", "--images", photos, "--encoder", f"blip:{blip}", "--out", out,
                                        "--batch-size", BATCH, "--workers", "0", *more])
        assert code == 0, stdout + stderr
        return stdout

    one, shards, cpu = tmp_path / "one", tmp_path / "shards", tmp_path / "cpu"
    precompute(one, "--device", "cuda")
    precompute(shards, "--device", "cuda", "--shard-index", "1", "--shard-count", "2")
    assert "merged from 2 shards" in precompute(shards, "--device", "cuda", "--shard-index", "0", "--shard-count", "2")
    precompute(cpu, "--device", "cpu")
    assert _files(shards) == _files(one)
    gpu_store, cpu_store = EmbeddingStore(one), EmbeddingStore(cpu)
    assert list(gpu_store.ids) == list(cpu_store.ids) and len(gpu_store) == N_IMAGES
    ids = list(cpu_store.ids)
    np.testing.assert_allclose(gpu_store.get(ids).float().numpy(), cpu_store.get(ids).float().numpy(), atol=1e-4)


def test_an_mllm_video_store_on_the_gpu_from_one_process_and_two_shards(tmp_path):
    """``--encoder mllm:FOLDER:care`` (the tiny random Qwen2-VL's last-token embeddings of
    CaReBench-style videos): the same bytes from one process and two shards on the GPU, and
    the CPU's embeddings within 1e-4."""
    from _tiny_mllm import save_tiny_qwen2vl
    from _video_world import write_carebench
    from vlr_plugins.data import EmbeddingStore

    folder = save_tiny_qwen2vl(tmp_path / "tiny-qwen2vl", seed=1)
    care, _ = write_carebench(tmp_path)
    bench = tmp_path / "care.yaml"
    bench.write_text("benchmarks:\n"
                     f"  - {{name: carebench, reader: carebench, path: {care}, item_embeddings: unused,\n"
                     f"     text_kinds: [general], args: {{media_root: {tmp_path / 'CaReBench' / 'videos'}}}}}\n")

    def precompute(out, *more):
        code, stdout, stderr = run_vlr(["precompute", "--benchmarks", bench, "--encoder", f"mllm:{folder}:care",
                                        "--frames", "4", "--out", out, "--workers", "0", "--batch-size", "2", *more])
        assert code == 0, stdout + stderr

    one, shards, cpu = tmp_path / "one", tmp_path / "shards", tmp_path / "cpu"
    precompute(one, "--device", "cuda")
    for index in ("0", "1"):
        precompute(shards, "--device", "cuda", "--shard-index", index, "--shard-count", "2")
    precompute(cpu, "--device", "cpu")
    assert _files(shards) == _files(one)
    ids = list(EmbeddingStore(cpu).ids)
    np.testing.assert_allclose(EmbeddingStore(one).get(ids).float().numpy(),
                               EmbeddingStore(cpu).get(ids).float().numpy(), atol=1e-4)
