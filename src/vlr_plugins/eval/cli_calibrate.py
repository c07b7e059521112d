"""``vlr calibrate``: the retrieval engine's per-machine CPU choices, shown, measured or measured anew.

The engine measures them itself the first time a large enough evaluation needs each (docs/eval.md):
the tile BLAS (torch's, numpy's or oneDNN's product, whichever is fastest among those that give
equal embeddings equal scores), the scores a thread's tile holds for its counting (torch's ops,
numba's loops) and for a re-normalisation's statistics passes, and what the loops save a score.
They are kept per machine in one cache file (``$VLR_CACHE_DIR/cpu-blas.json``, else
``~/.cache/vlr-plugins``). ``vlr calibrate`` measures what is not kept yet (about 10 s, before a
timed or a cluster's evaluation, say), ``--again`` forgets this machine's entry and measures it
anew (a calibration taken while the machine was busy keeps the L2 rule's share, which is safe
but can be slower), ``--show`` measures nothing; ``--json`` prints the entry as the file holds it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

from vlr_plugins.errors import ConfigError, UsageError

__all__ = ["add_cli", "calibrate_machine", "cmd_calibrate"]


def add_cli(sub: Any) -> None:
    """Add ``vlr calibrate`` to the ``vlr`` command's subparsers."""
    s = sub.add_parser(
        "calibrate", help="the retrieval engine's CPU choices on this machine: tile BLAS, tile shares, counting loops",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure what the retrieval engine (vlr eval, vlr mine) has not measured on this machine yet, and\n"
                    "show what it keeps: the tile product's BLAS, the scores a thread's tile holds (for torch's\n"
                    "counting, numba's loops and a re-normalisation's statistics passes) and what numba's loops\n"
                    "save. Kept in $VLR_CACHE_DIR/cpu-blas.json (default ~/.cache/vlr-plugins); about 10 s.\n"
                    "VLR_CPU_BLAS and VLR_COUNT_KERNEL limit what is measured to their choice.")
    s.add_argument("--again", action="store_true",
                   help="forget this machine's measurements first and measure them anew (e.g. after a "
                        "calibration taken while the machine was busy)")
    s.add_argument("--show", action="store_true", help="only show what is kept; measure nothing")
    s.add_argument("--json", action="store_true", help="print this machine's entry as JSON (as the cache file holds it)")
    s.set_defaults(fn=cmd_calibrate)


def calibrate_machine() -> None:
    """Measure whatever this machine's entry lacks, as the engine would the first time each is
    needed: the tile BLAS (:func:`~vlr_plugins.eval._cpu_blas.choice`), the engine's share for
    each counting ``VLR_COUNT_KERNEL`` allows (``auto``: torch's ops and, where numba is
    installed, its loops, loaded here) and the statistics passes' share (``VLR_CPU_TILE_ELEMS``
    ``auto``: another value leaves no share to measure)."""
    import torch

    from vlr_plugins.eval import _count_kernels, _cpu_blas, _tile_calibration
    from vlr_plugins.eval._tiles import l2_share
    from vlr_plugins.eval.renorm_pass import ensure_share
    from vlr_plugins.eval.retrieval import retrieval_recall

    _cpu_blas.choice()
    wanted = _count_kernels.setting()
    kernels = [wanted] if wanted != "auto" else ["torch", *(["numba"] if _count_kernels._kernels() is not None else [])]
    given = os.environ.get("VLR_COUNT_KERNEL")
    try:
        for kernel in kernels:
            os.environ["VLR_COUNT_KERNEL"] = kernel
            _count_kernels.prepare(0)
            _tile_calibration.ensure(_tile_calibration.CALIBRATE_FROM, l2_share(), retrieval_recall)
    finally:
        if given is None:
            os.environ.pop("VLR_COUNT_KERNEL", None)
        else:
            os.environ["VLR_COUNT_KERNEL"] = given
    ensure_share(_tile_calibration.CALIBRATE_FROM, torch.device("cpu"))


def cmd_calibrate(args: argparse.Namespace) -> int:
    from vlr_plugins.eval import _cpu_blas, _tile_calibration

    if args.again and args.show:
        raise UsageError("--again", "measures anew and --show measures nothing: give one of them")
    _tile_calibration.check_settings()  # VLR_CPU_BLAS, VLR_CPU_TILE_ELEMS, VLR_COUNT_KERNEL
    if not args.show and _tile_calibration.setting() != "auto":
        raise ConfigError(f"VLR_CPU_TILE_ELEMS={os.environ['VLR_CPU_TILE_ELEMS'].strip()!r} fixes the engine's tile "
                          "share, so there is none to measure: unset it (or set it to auto) to calibrate, or give "
                          "--show")
    if args.again:
        _tile_calibration.forget_machine()
    if not args.show:
        calibrate_machine()
    path, key = _cpu_blas._cache_file(), _cpu_blas._machine_key()
    entry = _cpu_blas._read_cache(path).get(key)
    if args.json:
        print(json.dumps({"cache": str(path), "machine": key, "entry": entry}, indent=1))
        return 0
    print(f"machine: {key}\ncache: {path}")
    if not isinstance(entry, dict):
        print("nothing measured on this machine yet: `vlr calibrate` measures it (about 10 s), as the engine "
              "does the first time a large evaluation needs it")
        return 0
    print(_describe(entry))
    return 0


def _describe(entry: dict) -> str:
    """The lines ``vlr calibrate`` prints of a machine's cache entry."""
    from vlr_plugins.eval import _count_kernels, _cpu_blas, _tile_calibration
    from vlr_plugins.eval._tiles import l2_cache_bytes, l2_share

    lines = []
    seconds, eligible = entry.get("seconds") or {}, entry.get("eligible") or {}
    shape = "x".join(str(k) for k in entry.get("shape") or ())
    timed = ", ".join(f"{name} {value * 1e3:.2f} ms" + ("" if name == "torch" or eligible.get(name) else " (not eligible)")
                      for name, value in seconds.items() if isinstance(value, (int, float)))
    forced = _cpu_blas.setting()  # the measured choice is what auto takes; VLR_CPU_BLAS may fix another
    in_force, how = (entry.get("choice"), "") if forced == "auto" else (forced, f"; VLR_CPU_BLAS={forced}, "
                                                                               f"auto would take {entry.get('choice')}")
    lines.append(f"tile BLAS: {in_force} (a {shape} product on one thread: {timed}{how})")
    l2 = l2_cache_bytes()
    lines.append(f"tile shares, scores a thread (the L2 rule's: {l2_share():,}, L2 {l2 // 2**10 if l2 else '?'} KiB):")
    for name, record in (entry.get("tile_elems") or {}).items():
        if not isinstance(record, dict):
            continue
        per_score = record.get("seconds_per_score") or {}
        timing = ", ".join(f"2^{int(math.log2(int(k)))} {v * 1e9:.2f}" for k, v in per_score.items())
        elems = record.get("elems")
        lines.append(f"  {name:<20} {f'{elems:,}' if isinstance(elems, int) else '?':>11}   ns a score: {timing}")
    saving = _tile_calibration.count_saving()
    if saving is not None:
        load = (f", loading them {saving[1]:.2f} s" if saving[1] is not None else
                f", loading them taken as {_count_kernels.LOAD_SECONDS:.2f} s (no loading from numba's cache timed)")
        lines.append(f"numba's counting loops: save {saving[0] * 1e9:.2f} ns a score{load}; `auto` loads them once a "
                     f"process has counted {_count_kernels.break_even(saving):,.0f} scores a thread")
    return "\n".join(lines)
