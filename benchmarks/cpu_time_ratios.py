"""Benchmark: single-threaded CPU-time ratios of the retrieval engine's paths, in one process.

    python benchmarks/cpu_time_ratios.py renorm            # 10K x 50K: plain, DSL, QB-Norm (+ the passes)
    python benchmarks/cpu_time_ratios.py mine              # 4K x 50K and 4,096 x 118,287: mine vs faiss
    python benchmarks/cpu_time_ratios.py graded --blas torch   # 10K x 50K interleaved: recall-only vs + mAP/nDCG
    python benchmarks/cpu_time_ratios.py renorm --size 4000x20000 --rounds 5 --blas torch,numpy

On a machine shared with other jobs, wall time measures the load as much as the code; one
thread's CPU time (``getrusage``) is steadier: everything here runs on one thread (torch's
intra-op threads, numpy's and faiss' BLAS / OpenMP threads set to 1), in one process, the
methods alternated round by round, and each ratio is between the fastest rounds, against the
baseline measured in the same run (the plain engine; faiss' exact ``IndexFlatIP`` search).
Each ``--blas`` (the engine's CPU tile BLAS, ``VLR_CPU_BLAS``) is measured in turn.

* ``renorm``: ``retrieval_recall`` plain, with ``DualSoftmax(100)`` and with
  ``QueryBankNorm(text_bank=...)`` (a bank as large as the texts), on texts near their items
  (as in ``retrieval_recall.py``'s ``_near`` methods), and the passes alone: the grouped pass
  without keys, DSL's statistics pass (``test_pass``) and its rank pass (``grouped_ranks`` with
  the keys), QB-Norm's bank pass (``bank_pass``: the bank x the items) and its rank pass
  (``grouped_ranks`` with the keys ``renorm_keys`` gives it: the raw and the normalised channels,
  or the normalised one alone where its queries were resolved first).
* ``graded``: ``retrieval_recall`` recall-only and with ``map@10, ndcg@10`` (and ``mdr, mnr,
  mrr@10``) on the interleaved layout (text j to item j mod N, ``exact_ranks``' pass; the
  grouped layout's engine beside it), and once the row-wise pair ranks (``row_pair_ranks``,
  the previous way for this layout): its time, and whether every pair's rank equals the tiled
  pass's.
* ``mine``: ``mine_hard_negatives(k=10)`` against faiss' ``add`` + ``search(k + 1)`` (what
  sentence-transformers' ``use_faiss=True`` does), random unit vectors, one positive per query.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import cpu_description, describe  # noqa: E402


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _rounds(methods: dict, rounds: int, blas: list[str]) -> dict[str, list[float]]:
    """CPU seconds of every (BLAS, method) per round, the methods alternated (the engine's tile
    share calibrated for each BLAS first, once a machine, before any clock starts)."""
    import torch

    from vlr_plugins.eval import _tile_calibration, retrieval_recall
    from vlr_plugins.eval._tiles import l2_share
    from vlr_plugins.eval.renorm_pass import ensure_share

    for choice in blas:
        os.environ["VLR_CPU_BLAS"] = choice
        _tile_calibration.ensure(_tile_calibration.CALIBRATE_FROM, l2_share(), retrieval_recall)
        ensure_share(_tile_calibration.CALIBRATE_FROM, torch.device("cpu"))  # the statistics passes' share
    times: dict[str, list[float]] = {}
    for _ in range(rounds):
        for choice in blas:
            os.environ["VLR_CPU_BLAS"] = choice
            for name, run in methods.items():
                start = _cpu_seconds()
                run()
                times.setdefault(f"{choice}:{name}", []).append(_cpu_seconds() - start)
    return times


def renorm(n: int, m: int, rounds: int, blas: list[str]) -> list[dict]:
    import retrieval_recall as rr
    import torch

    from vlr_plugins.eval import retrieval_recall
    from vlr_plugins.eval._tiles import ScoreMatrix
    from vlr_plugins.eval.grouped_ranks import diagonal_blocks, grouped_ranks
    from vlr_plugins.eval.renorm import DualSoftmax, QueryBankNorm, renorm_keys
    from vlr_plugins.eval.renorm_pass import bank_pass, test_pass

    items, texts, owner = rr.make_embeddings(n, m, near=True)
    bank = rr._text_bank(n, m)
    matrix = ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=256 * 2**20)
    keys = renorm_keys(DualSoftmax(100.0), matrix)
    two, three = diagonal_blocks(matrix), diagonal_blocks(matrix, buffers=3)
    beta2 = QueryBankNorm.beta / math.log(2.0)
    bank_keys = renorm_keys(QueryBankNorm(text_bank=bank), matrix, grouped=True)
    methods = {
        "plain": lambda: retrieval_recall(items, texts, owner),
        "dsl": lambda: retrieval_recall(items, texts, owner, renorm=DualSoftmax(100.0)),
        "qbnorm": lambda: retrieval_recall(items, texts, owner, renorm=QueryBankNorm(text_bank=bank)),
        "grouped pass": lambda: grouped_ranks(matrix, two),
        "dsl statistics pass": lambda: test_pass(matrix, tau2=100.0 / math.log(2.0)),
        "dsl rank pass": lambda: grouped_ranks(matrix, three, keys=keys),
        "qbnorm bank pass": lambda: bank_pass(matrix, bank, matrix.items, beta2, QueryBankNorm.k),
        "qbnorm rank pass": lambda: grouped_ranks(matrix, three, keys=bank_keys),
    }
    times = _rounds(methods, rounds, blas)
    return _records(times, methods, blas, "plain", f"{n}x{m}", factored_keys=keys.shift is not None)


def _records(times: dict[str, list[float]], methods: dict, blas: list[str], base: str, size: str,
             **extra) -> list[dict]:
    """One record per (BLAS, method): best and median CPU seconds and the best over ``base``'s."""
    records = []
    for choice in blas:
        fastest = min(times[f"{choice}:{base}"])
        for name in methods:
            t = times[f"{choice}:{name}"]
            records.append({"size": size, "blas": choice, "method": name, "best_s": min(t),
                            "median_s": sorted(t)[len(t) // 2], "over_plain": min(t) / fastest, **extra})
    return records


def graded(n: int, m: int, rounds: int, blas: list[str]) -> list[dict]:
    import retrieval_recall as rr
    import torch

    from vlr_plugins.eval import retrieval_recall
    from vlr_plugins.eval._tiles import ScoreMatrix
    from vlr_plugins.eval.graded_metrics import graded_rank_metrics
    from vlr_plugins.eval.pair_ranks import row_pair_ranks

    items, texts, grouped_owner = rr.make_embeddings(n, m)
    owner = rr.interleaved(grouped_owner)
    metrics = rr.BEST_RANK_METRICS + rr.GRADED_METRICS
    methods = {
        "recall only": lambda: retrieval_recall(items, texts, owner, ks=rr.KS),
        "+ mAP, nDCG": lambda: retrieval_recall(items, texts, owner, ks=rr.KS, rank_metrics=metrics),
        "grouped recall only": lambda: retrieval_recall(items, texts, grouped_owner, ks=rr.KS),
        "grouped + mAP, nDCG": lambda: retrieval_recall(items, texts, grouped_owner, ks=rr.KS, rank_metrics=metrics),
    }
    times = _rounds(methods, rounds, blas)
    tiled = retrieval_recall(items, texts, owner, ks=rr.KS, rank_metrics=metrics, return_ranks=True)
    matrix = ScoreMatrix(items, texts, owner, device=torch.device("cpu"), max_chunk_bytes=256 * 2**20)
    start = _cpu_seconds()
    rows = row_pair_ranks(matrix, matrix.arange(n), torch.empty(m, dtype=torch.long))
    row_seconds = _cpu_seconds() - start
    differ = (rows != tiled["i2t_pair_ranks"]).nonzero().flatten().tolist()
    same = not differ
    # a pair placed differently must have other texts within float32 rounding of its score
    # (D 2^-24, the engine's documented exception): products of other shapes round them apart
    near = 0
    for j in differ:
        i = int(owner[j])
        row = (items[i].double() / items[i].double().norm()) @ (texts.double() / texts.double().norm(dim=1, keepdim=True)).T
        close = int(((row - row[j]).abs() <= items.shape[1] * 2**-24).sum()) - 1
        near += abs(int(rows[j]) - int(tiled["i2t_pair_ranks"][j])) <= close
    row_metrics = graded_rank_metrics(rows, owner, n, rr.GRADED_METRICS)
    same_metrics = all(row_metrics[k] == tiled[f"i2t_{k}"] for k in rr.GRADED_METRICS)
    records = _records(times, methods, blas, "recall only", f"{n}x{m}")
    for choice in blas:
        base = min(times[f"{choice}:recall only"])
        records.append({"size": f"{n}x{m}", "blas": choice, "method": "row_pair_ranks alone (once)",
                        "best_s": row_seconds, "median_s": row_seconds, "over_plain": row_seconds / base,
                        "pair_ranks_equal_to_tiled": same, "pairs_differing": len(differ),
                        "differing_within_float32_rounding": near, "graded_metrics_equal": same_metrics})
    print(f"row-wise pair ranks {'EQUAL to' if same else 'DIFFER from'} the tiled pass's at {n:,} x {m:,} "
          f"({len(differ)} of {m:,} pairs differ, {near} of them by no more places than the texts within "
          f"D 2^-24 of the pair's float64 score; i2t {', '.join(rr.GRADED_METRICS)} "
          f"{'EQUAL' if same_metrics else 'DIFFERENT'}); "
          f"metrics {({k: round(v, 6) for k, v in tiled.items() if isinstance(v, float) and '@' in k})}")
    return records


def mine(sizes: list[tuple[int, int]], rounds: int, blas: list[str]) -> list[dict]:
    import faiss
    import torch

    from vlr_plugins.eval import mine_hard_negatives

    faiss.omp_set_num_threads(1)
    records = []
    for q_n, g_n in sizes:
        g = torch.Generator().manual_seed(0)
        queries = torch.nn.functional.normalize(torch.randn(q_n, 256, generator=g), dim=1)
        gallery = torch.nn.functional.normalize(torch.randn(g_n, 256, generator=g), dim=1)
        positives = [[i * g_n // q_n] for i in range(q_n)]

        def by_faiss():
            index = faiss.IndexFlatIP(256)
            index.add(gallery.numpy())
            return index.search(queries.numpy(), 11)

        times = _rounds({"engine": lambda: mine_hard_negatives(queries, gallery, positives, k=10)}, rounds, blas)
        times.update(_rounds({"faiss": by_faiss}, rounds, blas[:1]))
        base = min(times[f"{blas[0]}:faiss"])
        for key, t in times.items():
            choice, name = key.split(":")
            records.append({"size": f"{q_n}x{g_n}", "blas": choice if name == "engine" else "faiss's",
                            "method": name, "best_s": min(t), "median_s": sorted(t)[len(t) // 2],
                            "over_faiss": min(t) / base})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("renorm", "mine", "graded"))
    parser.add_argument("--size", action="append", help="QxG (default: renorm 10000x50000; mine 4000x50000 "
                                                       "and 4096x118287)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blas", default="numpy,onednn,torch", help="the engine's tile BLAS choices measured")
    parser.add_argument("--json", help="also write the records here")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    import torch

    torch.set_num_threads(1)
    default = ["10000x50000"] if args.what in ("renorm", "graded") else ["4000x50000", "4096x118287"]
    sizes = [tuple(int(v) for v in s.split("x")) for s in (args.size or default)]
    blas = args.blas.split(",")
    from vlr_plugins.eval._cpu_blas import eligible

    for name in [b for b in blas if not eligible(b)]:  # the engine never takes it here (eval/_cpu_blas.py)
        print(f"{name}'s product is not eligible on this CPU (absent, or equal rows get different scores): not measured")
        blas.remove(name)
    with threadpool_limits(1):
        if args.what in ("renorm", "graded"):
            run = renorm if args.what == "renorm" else graded
            records = [r for n, m in sizes for r in run(n, m, args.rounds, blas)]
        else:
            records = mine(sizes, args.rounds, blas)
    print(f"\n{describe()}; one thread, CPU time, fastest of {args.rounds} alternated rounds; "
          f"load average {os.getloadavg()[0]:.1f}\n")
    ratio = "over_faiss" if args.what == "mine" else "over_plain"
    print(f"| size | tile BLAS | method | best CPU s | median CPU s | best / {ratio.split('_')[1]} |")
    print("|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['size']} | {r['blas']} | {r['method']} | {r['best_s']:.2f} | {r['median_s']:.2f} | "
              f"{r[ratio]:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": cpu_description(), "records": records}, indent=1))


if __name__ == "__main__":
    main()
