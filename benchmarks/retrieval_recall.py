"""Benchmark: retrieval_recall's streaming engine against the bare multiply, and against the peer.

    python benchmarks/retrieval_recall.py            # 5K x 25K, 10K x 50K (+ peer), COCO train2017 size
    python benchmarks/retrieval_recall.py --sizes 5k,10k   # without the train size (~10 min on 2 cores)
    python benchmarks/retrieval_recall.py --quick    # 1K x 5K and 10K x 50K (+ peer)
    python benchmarks/retrieval_recall.py --device cuda --json out.json   # on a GPU (~1 min)

Random unit vectors (seeded), 256-d, float32, 5-6 texts per item: text j belongs to item
j N // M (texts listed grouped by item, as in every benchmark file) or, for
``engine_interleaved``, to item j mod N (the layout of this benchmark's earlier runs, where
the engine needs its first pass). Every measurement runs in a fresh subprocess; memory is
that process's peak resident set after the embeddings exist minus its resident set right
then (the peak is reset with /proc/self/clear_refs, else read from getrusage). ``floor``,
``chunk`` and the engines run in rounds, alternately (at the small size each process keeps
the best of 5 calls), so that load from other jobs on a shared machine hits all alike;
ratios are between the medians over rounds. Methods:

* ``floor``   -- one ``torch.mm`` per tile of ``tile_shape`` (the two-pass engine's tiles).
* ``chunk``   -- one ``torch.mm`` per 4,096 texts x the whole item gallery: the fastest bare
  multiply of the same two matrices measured at any chunking. Every score computed once,
  nothing else: the least any exact method must do.
* ``floor_workers`` -- the bare multiply as the engine runs it on a CPU: the grouped
  engine's tiles shared among its workers, each single-threaded (``_tile_workers``), no
  counting. With 2 threads at COCO-train size this was the fastest of the three: MKL's
  2-thread products of ``chunk`` and ``floor`` stream the 121 MB item matrix per product.
  Its products run in the BLAS the engine takes on this machine (``vlr_plugins.eval._cpu_blas``:
  torch's, numpy's or oneDNN's, whichever it measured fastest; oneDNN's result used as it comes,
  as the engine's tiles use it). The floor of the target is the fastest of
  ``floor``, ``chunk``, ``chunk_numpy``, ``chunk_onednn`` and ``floor_workers`` measured in the run ("median /
  fastest multiply").
* ``chunk_numpy`` -- ``chunk`` in numpy's BLAS (OpenBLAS in numpy's wheels) on its own threads.
* ``chunk_onednn`` -- ``chunk`` in oneDNN's fp32 product (``torch.ops.mkldnn._linear_pointwise``).
* ``engine``  -- ``retrieval_recall(items, texts, owner)``, texts grouped by item: both
  directions, exact ranks, every pair scored once (``grouped_ranks``).
* ``engine_interleaved`` -- the same on the interleaved layout (``exact_ranks``: a first pass
  over the positive pairs, then the main pass).
* ``engine_dsl`` / ``engine_qbnorm`` -- the engine with ``renorm=DualSoftmax(100)`` / with
  ``renorm=QueryBankNorm(text_bank=...)``, a bank of as many other seeded unit vectors as the
  gallery has texts (made before the clock starts); compare with ``engine`` (``median / engine``).
  These random texts are not near their items: about half the positive pairs score < 0, which
  under the dual softmax sends those queries to the row-wise path (real embeddings: ~none).
* ``rows``    -- the previous implementation (``ranks_of_best_positive``, copied into this
  script as ``_ranks_by_rows``): each direction scored separately, chunk of queries x
  whole gallery, with (chunk, G) masks.
* ``full``    -- the whole score matrix and an argsort of every row and every column, as
  LAVIS does (only where it fits in memory).
* ``peer``    -- CLIP_benchmark's retrieval metric (``recall_at_k``, reproduced in
  ``run_peer``), at 10K x 50K: its recalls must equal the engine's.

With ``--device cuda`` the embeddings (the same seeded vectors) are moved to the GPU once
per size and every measurement runs in this process: one warm-up call, then ``--repeat``
timed calls, each ended by ``torch.cuda.synchronize()``; memory is the CUDA allocator's
peak during the timed calls minus what was allocated before them. ``floor``, ``chunk`` and
``engine`` run in each precision (fp32 without TF32, as the engine multiplies; fp16 and
bf16 summed in float32), and each ``engine`` row keeps its recalls, which must equal fp32's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from _machine import cpu_description, describe

D = 256
COCO_5K = (5_000, 25_000)
PEER_SIZE = (10_000, 50_000)
COCO_TRAIN = (118_287, 591_753)
SIZES = {"1k": (1_000, 5_000), "5k": COCO_5K, "10k": PEER_SIZE, "train": COCO_TRAIN}
CHUNK_TEXTS = 4096
KS = (1, 5, 10)


# ---------------------------------------------------------------- one measurement (child)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_bytes(reset: bool) -> int:
    if reset:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_embeddings(n: int, m: int, seed: int = 0, near: bool = False):
    """Unit rows written in place, 4096 at a time, so that generating them adds no peak.
    ``near``: each text leans towards its item (cosine ~0.29 with it, ~0 with the others,
    as a trained model's matched pairs score above its unmatched ones) instead of being
    independent of it, so that every positive pair scores above 0."""
    import torch

    g = torch.Generator().manual_seed(seed)
    items, texts = torch.empty(n, D), torch.empty(m, D)
    owner = torch.arange(m) * n // m
    for x in (items, texts):
        for a in range(0, len(x), 4096):
            block = x[a:a + 4096]
            block.normal_(generator=g)
            block.div_(block.norm(dim=1, keepdim=True))
            if near and x is texts:
                block.add_(items[owner[a:a + 4096]], alpha=0.3)
                block.div_(block.norm(dim=1, keepdim=True))
    return items, texts, owner


def interleaved(owner):
    """Text j to item j mod N instead: the same number of texts per item, not grouped."""
    import torch

    return torch.arange(len(owner), device=owner.device) % (int(owner[-1]) + 1)


def run_floor(items, texts, owner):
    import torch

    from vlr_plugins.eval._tiles import tile_shape

    rows, cols = tile_shape(len(items), len(texts), max_chunk_bytes=256 * 2**20, device=torch.device("cpu"))
    S = torch.empty(rows, cols)
    for c in range(0, len(texts), cols):
        Y = texts[c:c + cols]
        for a in range(0, len(items), rows):
            X = items[a:a + rows]
            if len(X) == rows and len(Y) == cols:
                torch.mm(X, Y.T, out=S)
            else:
                torch.mm(X, Y.T)


def run_chunk(items, texts, owner):
    import torch

    S = torch.empty(min(CHUNK_TEXTS, len(texts)), len(items), device=items.device, dtype=items.dtype)
    for a in range(0, len(texts), CHUNK_TEXTS):
        Y = texts[a:a + CHUNK_TEXTS]
        torch.mm(Y, items.T, out=S[:len(Y)])


def run_chunk_numpy(items, texts, owner):
    """``chunk`` in numpy's BLAS (OpenBLAS in numpy's wheels), its own threads: on some CPUs
    (AMD EPYC) faster than torch's MKL."""
    import numpy as np

    X = items.numpy()
    S = np.empty((min(CHUNK_TEXTS, len(texts)), len(items)), dtype=np.float32)
    for a in range(0, len(texts), CHUNK_TEXTS):
        Y = texts[a:a + CHUNK_TEXTS].numpy()
        np.matmul(Y, X.T, out=S[:len(Y)])


def run_chunk_onednn(items, texts, owner):
    """``chunk`` in oneDNN's fp32 product (torch's threads): on some CPUs (AMD EPYC with AVX-512)
    far faster than torch's MKL. Its result is a new tensor per chunk, used as it comes (as the
    engine's oneDNN tiles are)."""
    import torch

    for a in range(0, len(texts), CHUNK_TEXTS):
        torch.ops.mkldnn._linear_pointwise(texts[a:a + CHUNK_TEXTS], items, None, "none", [], "")


def run_floor_workers(items, texts, owner):
    """The bare multiply as the engine runs it on a CPU: the grouped engine's tiles (texts
    aligned to 16), shared among the same workers, each single-threaded; no counting."""
    import torch

    from vlr_plugins.eval._cpu_blas import tile_product
    from vlr_plugins.eval._tile_workers import one_thread_per_worker, visit_in_parallel
    from vlr_plugins.eval._tiles import ScoreMatrix
    from vlr_plugins.eval.grouped_ranks import _aligned_up, diagonal_blocks

    matrix = ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=256 * 2**20)
    bounds = diagonal_blocks(matrix)
    text_bounds = matrix.first_text[bounds].tolist()
    blocks = list(zip(bounds, bounds[1:]))
    text_blocks = list(zip(text_bounds, text_bounds[1:]))
    rows = max(b - a for a, b in blocks)
    cols = _aligned_up(max(b - a for a, b in text_blocks))
    buffers = [(torch.empty(rows, cols), torch.zeros(cols, D)) for _ in range(matrix.workers)]

    def column(buffer, c):
        scores, text_rows = buffer
        t0, t1 = text_blocks[c]
        text_rows[:t1 - t0] = texts[t0:t1]
        width = _aligned_up(t1 - t0)
        for a0, a1 in blocks:  # in the BLAS the engine takes (vlr_plugins.eval._cpu_blas)
            tile_product(items[a0:a1], text_rows[:width], scores[:a1 - a0, :width], new_result_ok=True)

    with one_thread_per_worker(len(buffers)):
        visit_in_parallel(range(len(text_blocks)), column, buffers)


def run_engine(items, texts, owner):
    from vlr_plugins.eval import retrieval_recall

    return retrieval_recall(items, texts, owner, ks=KS)


def run_engine_interleaved(items, texts, owner):
    return run_engine(items, texts, interleaved(owner))


#: the rank metrics of the best positive (read from the same ranks) and those graded over
#: every positive (every text ranked in its item's row as well)
BEST_RANK_METRICS = ("mdr", "mnr", "mrr@10")
GRADED_METRICS = ("map@10", "ndcg@10")


def run_engine_ranks(items, texts, owner):
    from vlr_plugins.eval import retrieval_recall

    return retrieval_recall(items, texts, owner, ks=KS, rank_metrics=BEST_RANK_METRICS)


def run_engine_graded(items, texts, owner):
    from vlr_plugins.eval import retrieval_recall

    return retrieval_recall(items, texts, owner, ks=KS, rank_metrics=BEST_RANK_METRICS + GRADED_METRICS)


def run_engine_graded_interleaved(items, texts, owner):
    return run_engine_graded(items, texts, interleaved(owner))


_BANKS: dict = {}


def _text_bank(n: int, m: int):
    """QB-Norm's text bank for an n x m problem: m other seeded unit vectors, made once per
    process before the clock starts (not timed, not counted as the method's memory)."""
    if (n, m) not in _BANKS:
        _BANKS[(n, m)] = make_embeddings(n, m, seed=1)[1]
    return _BANKS[(n, m)]


def run_engine_dsl(items, texts, owner):
    """The engine with the dual softmax (temperature 100): a statistics pass, then the ranks."""
    from vlr_plugins.eval import retrieval_recall
    from vlr_plugins.eval.renorm import DualSoftmax

    return retrieval_recall(items, texts, owner, ks=KS, renorm=DualSoftmax(100.0))


def run_engine_qbnorm(items, texts, owner):
    """The engine with QB-Norm, a text bank as large as the gallery's texts (other seeded unit
    vectors), text-to-image: the statistics pass, the bank x items pass, then the ranks."""
    from vlr_plugins.eval import retrieval_recall
    from vlr_plugins.eval.renorm import QueryBankNorm

    bank = _text_bank(len(items), len(texts))
    return retrieval_recall(items, texts, owner, ks=KS, renorm=QueryBankNorm(text_bank=bank))


def run_peer(items, texts, owner, batch_size=64):
    """CLIP_benchmark's retrieval metric, reproduced (not imported) from
    LAION-AI/CLIP_benchmark clip_benchmark/metrics/zeroshot_retrieval.py (``evaluate``,
    ``recall_at_k``, ``batchify``): the whole (texts x items) score matrix and its boolean
    matrix of positive pairs; then, per k and per batch of ``batch_size`` queries (its
    dataloader's batch size, 64 by default), the top-k indices, one-hot over the gallery
    (batch, k, G) int64, times the positives, summed; a query is a hit when that is > 0.
    Returns percent recalls under this engine's names."""
    import torch
    import torch.nn.functional as F

    scores = texts @ items.T
    positive = torch.zeros_like(scores, dtype=torch.bool)
    positive[torch.arange(len(texts), device=items.device), owner] = True

    def hit_rate(S, P, k):
        found = []
        for a in range(0, len(S), batch_size):
            s, p = S[a:a + batch_size], P[a:a + batch_size]
            onehot = F.one_hot(torch.topk(s, k, dim=1)[1], num_classes=S.shape[1])
            found.append(((onehot * p.view(len(p), 1, -1)).sum(dim=(1, 2)) / p.sum(dim=1)).cpu())
        return 100.0 * (torch.cat(found) > 0).float().mean().item()

    out = {}
    for k in KS:
        out[f"t2i_r{k}"] = hit_rate(scores, positive, k)
        out[f"i2t_r{k}"] = hit_rate(scores.T, positive.T, k)
    return out


def _ranks_by_rows(query, gallery, positive_mask_fn, chunk_bytes=256 * 2**20):
    """The package's ranker before the tiled engine (``ranks_of_best_positive``), kept here
    as the baseline: 0-based rank of each query's best positive, query (Q, D) and gallery
    (G, D) normalised, ``positive_mask_fn(start, stop)`` the (stop-start, G) positives."""
    import torch

    chunk_size = max(1, chunk_bytes // (4 * max(len(gallery), 1)))
    idx = torch.arange(len(gallery))
    ranks = torch.empty(len(query), dtype=torch.long)
    for start in range(0, len(query), chunk_size):
        stop = min(start + chunk_size, len(query))
        scores = query[start:stop] @ gallery.T
        best = scores.masked_fill(~positive_mask_fn(start, stop), float("-inf")).argmax(dim=1, keepdim=True)
        best_score = scores.gather(1, best)
        ahead = (scores > best_score) | ((scores == best_score) & (idx[None, :] < best))
        ranks[start:stop] = ahead.sum(dim=1)
    return ranks


def run_rows(items, texts, owner):
    import torch

    idx = torch.arange(len(items), device=items.device)
    _ranks_by_rows(items, texts, lambda a, b: owner[None, :] == idx[a:b, None])
    _ranks_by_rows(texts, items, lambda a, b: idx[None, :] == owner[a:b, None])


def run_full(items, texts, owner):
    import torch

    S = items @ texts.T
    order = S.argsort(dim=1, descending=True)
    i2t = (owner[order] == torch.arange(len(items), device=items.device)[:, None]).int().argmax(1)
    del order
    order = S.T.argsort(dim=1, descending=True)
    t2i = (order == owner[:, None]).int().argmax(1)
    return i2t, t2i


def child(method: str, n: int, m: int, inner: int) -> None:
    import torch

    if os.environ.get("VLR_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["VLR_BENCH_THREADS"]))

    import vlr_plugins.eval  # noqa: F401  (imported before the clock starts: no method's time)
    from vlr_plugins.eval._cpu_blas import choice

    choice()  # the tile BLAS measured (once per machine) before the clock starts

    load_s = None
    for suffix, kernel in COUNTING.items():  # the same method with its tiles counted in torch's ops / numba's loop
        if method.endswith(suffix):
            os.environ["VLR_COUNT_KERNEL"] = kernel
            method = method.removesuffix(suffix)
            if kernel == "numba":  # loaded before the clock starts (a process that has counted before)
                from vlr_plugins.eval import _count_kernels

                start = time.perf_counter()
                _count_kernels.prepare(0)
                load_s = time.perf_counter() - start
    near = method.endswith(NEAR)  # the same method on texts near their items
    method = method.removesuffix(NEAR)
    items, texts, owner = make_embeddings(n, m, near=near)
    if method == "engine_qbnorm":
        _text_bank(n, m)
    base = _rss_bytes()
    reset = _reset_peak()
    seconds = float("inf")
    for _ in range(inner):
        start = time.perf_counter()
        result = globals()[f"run_{method}"](items, texts, owner)
        seconds = min(seconds, time.perf_counter() - start)
    record = {"seconds": seconds, "extra_bytes": max(0, _peak_bytes(reset) - base), "threads": torch.get_num_threads()}
    if load_s is not None:
        record["count_kernel_load_s"] = load_s
    if isinstance(result, dict):
        record["recall"] = {f"{d}_r{k}": float(result[f"{d}_r{k}"]) for d in ("i2t", "t2i") for k in KS}
        record["metrics"] = {k: float(v) for k, v in result.items() if isinstance(v, (int, float))}
    print(json.dumps(record))


# ---------------------------------------------------------------- on a GPU (one process)

PRECISIONS = ("fp32", "fp16", "bf16")


def gpu_floor(items, texts, owner, precision):
    import torch

    from vlr_plugins.eval._tiles import exact_matmuls, tile_shape

    dtype = getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[precision])
    rows, cols = tile_shape(len(items), len(texts), max_chunk_bytes=256 * 2**20, device=items.device)
    X_all, Y_all = items.to(dtype), texts.to(dtype)  # the engine also converts once, not per tile
    S = torch.empty(rows, cols, dtype=dtype, device=items.device)
    with exact_matmuls():
        for c in range(0, len(texts), cols):
            Y = Y_all[c:c + cols]
            for a in range(0, len(items), rows):
                X = X_all[a:a + rows]
                if len(X) == rows and len(Y) == cols:
                    torch.mm(X, Y.T, out=S)
                else:
                    torch.mm(X, Y.T)


def gpu_chunk(items, texts, owner, precision):
    import torch

    from vlr_plugins.eval._tiles import exact_matmuls

    dtype = getattr(torch, {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}[precision])
    with exact_matmuls():
        run_chunk(items.to(dtype), texts.to(dtype), owner)


def gpu_peer(items, texts, owner, precision):
    return run_peer(items, texts, owner)


def gpu_engine(items, texts, owner, precision):
    from vlr_plugins.eval import retrieval_recall

    return retrieval_recall(items, texts, owner, ks=KS, precision=precision)


def gpu_rows(items, texts, owner, precision):
    run_rows(items, texts, owner)


def gpu_full(items, texts, owner, precision):
    run_full(items, texts, owner)


def gpu_table(sizes, repeat: int) -> list[dict]:
    """One record per (size, method, precision), measured on the current CUDA device."""
    import torch

    dev = torch.device("cuda")
    records = []
    for (n, m), extra in sizes:
        items, texts, owner = (x.to(dev) for x in make_embeddings(n, m))
        plan = [(method, p) for p in PRECISIONS for method in ("floor", "chunk", "engine")] + [(e, "fp32") for e in extra]
        for method, precision in plan:
            run = globals()[f"gpu_{method}"]
            result = run(items, texts, owner, precision)  # warm-up: kernels, cuBLAS handles, allocator
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                result = run(items, texts, owner, precision)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
            record = {"items": n, "texts": m, "method": method, "precision": precision, "runs": repeat,
                      "best_s": min(times), "median_s": sorted(times)[len(times) // 2],
                      "peak_extra_mib": (torch.cuda.max_memory_allocated() - base) / 2**20}
            if method in ("engine", "peer"):
                record["recall"] = {f"{d}_r{k}": float(result[f"{d}_r{k}"]) for d in ("i2t", "t2i") for k in KS}
            records.append(record)
            print(f"  {method:7s} {precision} {n:>7,} x {m:>7,}: best {record['best_s']:.4f} s, "
                  f"{record['peak_extra_mib']:.1f} MiB extra", file=sys.stderr)
            del result
        del items, texts, owner
        torch.cuda.empty_cache()
    for r in records:
        floor, chunk = (next(f for f in records if f["method"] == name and f["precision"] == r["precision"]
                             and (f["items"], f["texts"]) == (r["items"], r["texts"])) for name in ("floor", "chunk"))
        r["time_over_floor"] = r["best_s"] / floor["best_s"]
        r["over_floor"], r["over_chunk"] = r["median_s"] / floor["median_s"], r["median_s"] / chunk["median_s"]
    return records


def print_gpu_table(records: list[dict]) -> None:
    import torch

    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, D = {D}\n")
    print("| items x texts | method | precision | runs | median wall time (s) | best (s) | median / chunk "
          "| median / floor | peak extra GPU memory (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['items']:,} x {r['texts']:,} | {r['method']} | {r['precision']} | {r['runs']} | "
              f"{r['median_s']:.4f} | {r['best_s']:.4f} | {r['over_chunk']:.2f} | {r['over_floor']:.2f} | "
              f"{r['peak_extra_mib']:,.1f} |")
    print_peer(records)


# ---------------------------------------------------------------- the table (parent)


def measure(method: str, n: int, m: int, inner: int = 1) -> dict:
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--child", method, str(n), str(m), str(inner)],
                         check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = (load + os.getloadavg()[0]) / 2
    print(f"  {method:7s} {n:>7,} x {m:>7,}: {result['seconds']:8.2f} s, "
          f"{result['extra_bytes'] / 2**20:8.1f} MiB extra, load {result['load']:.1f}", file=sys.stderr)
    return result


ALTERNATED = ("floor", "chunk", "chunk_numpy", "chunk_onednn", "floor_workers", "engine", "engine_interleaved")
#: the engine with rank metrics (``--methods chunk,engine,engine_ranks,engine_graded``)
RANK_METHODS = ("engine_ranks", "engine_graded", "engine_graded_interleaved")
#: the engine with a re-normalisation (``--methods chunk,engine,engine_dsl,engine_qbnorm``)
RENORM_METHODS = ("engine_dsl", "engine_qbnorm")
#: a method name with this suffix runs on texts near their items (``make_embeddings(near=True)``),
#: its ratio taken to ``engine_near``: ``--methods chunk,engine_near,engine_dsl_near,engine_qbnorm_near``
NEAR = "_near"
#: a method name with one of these suffixes (after ``_near``) counts each tile in torch's
#: comparison and matrix-vector product (``VLR_COUNT_KERNEL=torch``) or in numba's compiled loop
#: (``numba``; numba loaded and its loops compiled before the clock starts, as in a process that
#: has counted a large gallery before: the loading's time is printed beside), not as ``auto``
#: chooses for the size (``vlr_plugins.eval._count_kernels``): ``--methods
#: floor_workers,engine_torch_count,engine_numba_count``; its ratio to the recall-only engine is
#: taken to the recall-only engine with the same suffix where that ran too
COUNTING = {"_torch_count": "torch", "_numba_count": "numba"}
#: the bare multiplies: the floor is the fastest of those measured
BARE_MULTIPLIES = ("floor", "chunk", "chunk_numpy", "chunk_onednn", "floor_workers")


def cpu_plan(sizes: list[tuple[int, int]], repeat: int | None, quick: bool,
             methods: tuple[str, ...] = ALTERNATED) -> list[tuple]:
    """(size, rounds, alternated methods, methods run once) per size: rows and full at the
    smallest size, the peer at 10K x 50K (each only when ``methods`` holds the engine)."""
    plan = []
    for i, (n, m) in enumerate(sizes):
        once = ("rows", "full") if i == 0 and (n, m) != COCO_TRAIN else ()  # full: 280 GB there
        if (n, m) == PEER_SIZE:
            once += ("peer",)
        once = once if "engine" in methods else ()
        rounds = repeat or (5 if i == 0 else 2 if (n, m) == COCO_TRAIN else 3)
        plan.append(((n, m), rounds, methods, once))
    return plan


def cpu_table(plan) -> list[dict]:
    """Medians over rounds of alternated measurements (each round: the alternated methods
    -- floor, chunk, engine, engine_interleaved by default -- and in the first round the
    methods run once)."""
    import statistics

    records = []
    for (n, m), rounds, alternated, once in plan:
        runs = {}
        for round_ in range(rounds):
            for method in alternated + (once if round_ == 0 else ()):
                plain = _unsuffixed(method).removesuffix(NEAR)
                inner = 5 if n * m <= COCO_5K[0] * COCO_5K[1] and plain in ALTERNATED + RANK_METHODS + RENORM_METHODS else 1
                runs.setdefault(method, []).append(measure(method, n, m, inner))
        median = {method: statistics.median(r["seconds"] for r in results) for method, results in runs.items()}
        multiplies = [median[k] for k in BARE_MULTIPLIES if k in median]
        fastest = min(multiplies) if multiplies else None
        for method, results in runs.items():
            record = {"items": n, "texts": m, "method": method, "precision": "fp32", "runs": len(results),
                      "median_s": median[method], "best_s": min(r["seconds"] for r in results),
                      "over_chunk": median[method] / median["chunk"] if "chunk" in median else None,
                      "over_floor": median[method] / median["floor"] if "floor" in median else None,
                      "over_fastest": median[method] / fastest if fastest else None,
                      "over_engine": _over_engine(median, method),
                      "peak_extra_mib": max(r["extra_bytes"] for r in results) / 2**20,
                      "load": statistics.median(r["load"] for r in results),
                      "threads": results[0]["threads"]}
            if "count_kernel_load_s" in results[0]:
                record["count_kernel_load_s"] = statistics.median(r["count_kernel_load_s"] for r in results)
            if "recall" in results[0]:
                record["recall"] = results[0]["recall"]
                record["metrics"] = results[0]["metrics"]
            records.append(record)
    return records


def _unsuffixed(method: str) -> str:
    """``method`` without its :data:`COUNTING` suffix."""
    return next((method.removesuffix(s) for s in COUNTING if method.endswith(s)), method)


def _over_engine(median: dict, method: str) -> float | None:
    """``method``'s median over the recall-only engine's on the same data and text layout
    (``engine_near`` for a ``_near`` method, ``engine_interleaved`` for an ``_interleaved`` one)."""
    method_ = _unsuffixed(method)
    counting = method[len(method_):] if method_ != "engine" else ""
    layout = method_.endswith("_interleaved") and method_ != "engine_interleaved"
    base = "engine_near" if method_.endswith(NEAR) else "engine_interleaved" if layout else "engine"
    base = f"{base}{counting}" if f"{base}{counting}" in median else base
    return median[method] / median[base] if base in median else None


def print_cpu_table(records: list[dict]) -> None:
    from vlr_plugins.eval._count_kernels import _kernels, break_even
    from vlr_plugins.eval._cpu_blas import choice
    from vlr_plugins.eval._tile_calibration import count_saving
    from vlr_plugins.eval._tiles import cpu_tile_elems_per_thread, l2_cache_bytes, l2_share

    l2 = l2_cache_bytes()
    largest = max(r["items"] * r["texts"] for r in records)
    saving = count_saving()
    counting = (f"numba's loop once a process has counted {break_even(saving) * records[0]['threads']:,.0f} scores "
                f"(auto; {'this machine measured' if saving else 'not measured here:'} the loop's saving "
                f"{f'{saving[0] * 1e9:.2f} ns a score' if saving else 'the default'}), torch's ops before"
                if _kernels() is not None else "torch's ops (numba not installed)")
    print(f"\n{describe()}, torch threads {records[0]['threads']}, engine tile BLAS {choice()}, counts in "
          f"{counting}, engine tile "
          f"{cpu_tile_elems_per_thread(largest):,} scores a thread at the largest size (calibrated; the L2 "
          f"rule's: {l2_share():,}, L2 {l2 // 2**10 if l2 else '?'} KiB), "
          f"D = {D}, float32; medians over alternated rounds\n")
    print("| items x texts | method | runs | median wall time (s) | best (s) | median / chunk | median / floor "
          "| median / fastest multiply | median / recall-only engine, same layout | peak extra memory (MiB) "
          "| load avg (median) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['items']:,} x {r['texts']:,} | {r['method']} | {r['runs']} | {r['median_s']:.2f} | "
              f"{r['best_s']:.2f} | {'-' if r['over_chunk'] is None else format(r['over_chunk'], '.2f')} | "
              f"{'-' if r['over_floor'] is None else format(r['over_floor'], '.2f')} | "
              f"{'-' if r['over_fastest'] is None else format(r['over_fastest'], '.2f')} | "
              f"{'-' if r['over_engine'] is None else format(r['over_engine'], '.2f')} | {r['peak_extra_mib']:,.1f} | "
              f"{r['load']:.1f} |")
    for r in records:
        if "count_kernel_load_s" in r:
            print(f"\n{r['method']} at {r['items']:,} x {r['texts']:,}: numba loaded (and its loops compiled or read "
                  f"from its cache) in {r['count_kernel_load_s']:.2f} s before the clock started (median)")
    print_peer(records)
    print_rank_metrics(records)


def print_rank_metrics(records: list[dict]) -> None:
    """The graded metrics of both text layouts (grouped pass, row-wise pass) must be equal."""
    for graded in (r for r in records if r["method"] == "engine_graded"):
        other = next((r for r in records if r["method"] == "engine_graded_interleaved"
                      and (r["items"], r["texts"]) == (graded["items"], graded["texts"])), None)
        values = {k: round(v, 4) for k, v in graded["metrics"].items() if "@" in k or k.endswith(("mdr", "mnr"))}
        print(f"\nrank metrics at {graded['items']:,} x {graded['texts']:,}: {values}")
        if other is not None:  # the layouts differ in which texts an item owns: compare each with itself
            print(f"  interleaved layout (row-wise pair ranks): {graded['median_s']:.2f} s grouped against "
                  f"{other['median_s']:.2f} s")


def print_peer(records: list[dict]) -> None:
    """The peer against the engine at the peer's size: same recalls, time and memory ratios."""
    for peer in (r for r in records if r["method"] == "peer"):
        engine = next(r for r in records if r["method"] == "engine" and (r["items"], r["texts"]) ==
                      (peer["items"], peer["texts"]) and r["precision"] == peer["precision"])
        # the peer's recalls are float32 means: equal within 1e-3 points (one query of 50K is 2e-3)
        same = all(abs(peer["recall"][k] - engine["recall"][k]) < 1e-3 for k in peer["recall"])
        print(f"\npeer (CLIP_benchmark recall_at_k) at {peer['items']:,} x {peer['texts']:,}: recalls "
              f"{'EQUAL to' if same else 'DIFFER from'} the engine's "
              f"({', '.join(f'{k} {v:.2f}' for k, v in peer['recall'].items())}); "
              f"time {peer['median_s'] / engine['median_s']:.1f}x the engine's, "
              f"peak memory {peer['peak_extra_mib'] / max(engine['peak_extra_mib'], 1e-9):.1f}x")
        peer["same_recall_as_engine"] = same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1K x 5K and 10K x 50K (a few minutes)")
    parser.add_argument("--sizes", default="5k,10k,train",
                        help=f"comma-separated, of {', '.join(SIZES)} (default 5k,10k,train)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="rounds per size (default on CPU 5 at the first size, 3, 2 at train size; GPU 3)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: floor, chunk and engine in fp32/fp16/bf16 on the GPU, in this process")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of each CPU measurement (default torch's: one per core); "
                             "1 is steadier on a machine shared with other jobs")
    parser.add_argument("--methods", default=",".join(ALTERNATED),
                        help="CPU: the alternated methods, comma-separated (ratios need chunk and floor; default "
                             f"{','.join(ALTERNATED)}; e.g. chunk,engine at train size, ~4 min each)")
    parser.add_argument("--json", metavar="PATH", help="also write the measurements here as JSON")
    parser.add_argument("--child", nargs=4, metavar=("METHOD", "N", "M", "INNER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], *map(int, args.child[1:]))
        return
    names = ["1k", "10k"] if args.quick else args.sizes.split(",")
    unknown = [name for name in names if name not in SIZES]
    if unknown:
        sys.exit(f"retrieval_recall.py: --sizes {args.sizes}: unknown {unknown}, expected some of {list(SIZES)}")
    sizes = [SIZES[name] for name in names]
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit(f"retrieval_recall.py: --device cuda, but torch {torch.__version__} sees no CUDA device")
        records = gpu_table([(size, ("rows", "full") if i == 0 else ("peer",) if size == PEER_SIZE else ())
                             for i, size in enumerate(sizes)], args.repeat or 3)
        print_gpu_table(records)
        if args.json:
            write_json(args.json, {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                   "cuda": torch.version.cuda, "dim": D, "records": records})
        return
    if args.threads:
        os.environ["VLR_BENCH_THREADS"] = str(args.threads)
    methods = tuple(args.methods.split(","))
    known = ALTERNATED + RANK_METHODS + RENORM_METHODS
    if not {_unsuffixed(m).removesuffix(NEAR) for m in methods} <= set(known):
        sys.exit(f"retrieval_recall.py: --methods {args.methods}: expected some of {list(known)}")
    # the engine's CPU tile share, calibrated (once a machine) before any clock starts
    from vlr_plugins.eval import _tile_calibration, retrieval_recall
    from vlr_plugins.eval._tiles import l2_share

    # for both counting loops (auto takes numba's from NUMBA_FROM_PER_THREAD scores a thread)
    from vlr_plugins.eval import _count_kernels

    given = os.environ.get("VLR_COUNT_KERNEL")
    for kernel in ("torch", "numba") if _count_kernels._kernels() is not None else ("torch",):
        os.environ["VLR_COUNT_KERNEL"] = kernel
        _count_kernels.prepare(0)
        _tile_calibration.ensure(max(n * m for n, m in sizes), l2_share(), retrieval_recall)
    from vlr_plugins.eval.renorm_pass import ensure_share

    ensure_share(max(n * m for n, m in sizes), "cpu")  # the re-normalisations' statistics passes' share
    if given is None:
        del os.environ["VLR_COUNT_KERNEL"]
    else:
        os.environ["VLR_COUNT_KERNEL"] = given
    records = cpu_table(cpu_plan(sizes, args.repeat, args.quick, methods))
    print_cpu_table(records)
    if args.json:
        write_json(args.json, {"device": "cpu", "cpu_cores": os.cpu_count(), "machine": cpu_description(), "dim": D,
                               "numba": _count_kernels._kernels() is not None,
                               "numba_from_per_thread": _count_kernels.NUMBA_FROM_PER_THREAD, "records": records})


def write_json(path: str, data: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
