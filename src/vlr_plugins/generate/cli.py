"""``vlr generate``: run a synthetic-supervision pipeline (``paragraph``, ``mvc``) over an input
file into a corpus folder, and ``vlr generate stats``: the audit of a corpus."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from vlr_plugins._argtypes import at_least

__all__ = ["add_cli"]

_RUN_ONLY = ("input", "out", "set", "stages", "shard_index", "shard_count", "limit", "cache", "no_cache",
             "no_merge", "engine", "ray_address", "ray_workers", "merge_only")


def _given(value: Any) -> bool:
    """An option given on the command line (``--shard-index 0`` is: ``0 in (None, False)`` is True)."""
    return value is not None and value is not False and value != []


def _stats(args: argparse.Namespace) -> int:
    from vlr_plugins.errors import UsageError
    from vlr_plugins.generate.audit import corpus_audit, format_audit, plot_audit

    if args.corpus is None:
        raise UsageError("CORPUS", "expected the corpus folder (or .jsonl file) to audit: vlr generate stats OUT/")
    given = [f"--{k.replace('_', '-')}" for k in _RUN_ONLY if _given(getattr(args, k))
             and not (k == "engine" and args.engine == "local")]
    if given:
        raise UsageError(given[0], "is an option of a generation run, not of `vlr generate stats`")
    if args.plot is not None and os.path.splitext(args.plot)[1].lower() not in (".png", ".pdf", ".svg"):
        raise UsageError("--plot", f"expected an image file name ending in .png, .pdf or .svg, found {args.plot!r}")
    audit = corpus_audit(args.corpus)
    print(format_audit(audit))
    if args.json is not None:
        from vlr_plugins._io import atomic_write_json

        atomic_write_json(args.json, audit)
        print(f"audit: {args.json}")
    if args.plot is not None:
        print(f"plot: {plot_audit(audit, args.plot)}")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.target == "stats":
        return _stats(args)
    from vlr_plugins._io import check_output_dir
    from vlr_plugins.errors import UsageError
    from vlr_plugins.generate.pipeline import load_pipeline

    if args.corpus is not None:
        raise UsageError(args.corpus, "unexpected argument; a run takes its input from --input")
    if args.plot is not None or args.json is not None:
        raise UsageError("--plot" if args.plot is not None else "--json", "is an option of `vlr generate stats`")
    if args.merge_only:
        return _merge_only(args)
    from vlr_plugins._ray import refuse_ray_options_without_ray

    refuse_ray_options_without_ray(args)
    if args.input is None or args.out is None:
        raise UsageError("--input" if args.input is None else "--out", "required for a generation run")
    if not os.path.isfile(args.input):
        raise UsageError("--input", f"no such file: {args.input}")
    if args.cache is not None and args.no_cache:
        raise UsageError("--no-cache", "contradicts --cache")
    shard_index, shard_count = _shard(args)
    check_output_dir(args.out, "--out")
    pipeline = load_pipeline(args.target, _overrides(args.set or []) or None)
    stages = None
    if args.stages:
        stages = [s for item in args.stages for s in item.split(",") if s]
        known = [s.name for s in pipeline.stages]
        unknown = [s for s in stages if s not in known]
        if unknown:
            raise UsageError("--stages", f"no stage {unknown[0]!r} in pipeline {pipeline.name}; its stages: "
                                         f"{', '.join(known)}")
        stages = [s for s in known if s in stages]  # in the pipeline's order
    cache: Any = None if args.no_cache else (args.cache or "default")

    def report(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.engine == "ray":
        from vlr_plugins.generate.ray_runner import generate_corpus_ray

        result = generate_corpus_ray(pipeline, args.input, args.out, stages=stages, cache=cache,
                                     merge=not args.no_merge,
                                     limit=args.limit, address=args.ray_address, workers=args.ray_workers,
                                     report=report)
    else:
        from vlr_plugins.generate.runner import generate_corpus

        result = generate_corpus(pipeline, args.input, args.out, stages=stages, shard_index=shard_index,
                                 shard_count=shard_count, cache=cache, merge=not args.no_merge,
                                 limit=args.limit, report=report)
    print(f"{result['out']}: {result['parts_run']} parts run, {result['records_per_s']:.2f} records/s")
    for role, summary in result["backends"].items():
        print(f"  {role} ({summary.get('model')}): {summary['requests']} requests, {summary['calls']} calls, "
              f"{summary['cache_hits']} cache hits, {summary['retries']} retries, {summary['failures']} failures")
    if result["complete"]:
        _print_complete(result)
    else:
        print("not complete: other shards or stages still to run (rerun with the same --out to go on)")
    failed = result.get("failed_records", 0)
    if failed:  # kept in the corpus with their failures; the exit status says the corpus is not whole
        first = result["first_failure"]
        # `vlr generate stats` reads the manifest, which only a complete corpus has
        where = (f"the corpus with their failures (`vlr generate stats {result['out']}` counts them)"
                 if result["complete"] else f"the stage parts under {os.path.join(result['out'], 'stages')} with "
                 "their failures (`vlr generate stats` counts them once the corpus is complete)")
        print(f"error: {failed} of {result['records_run']} records generated by this run have failed requests "
              f"(the first: record {first['id']!r}, stage {first['stage']}, prompt {first['prompt']}: "
              f"{first['error']}); they are in {where}", file=sys.stderr)
        return 1
    return 0


def _print_complete(result: dict[str, Any]) -> None:
    manifest = result["manifest"]
    failures = manifest["failures"]
    print(f"complete: {manifest['records']} records; failures: "
          + (", ".join(f"{k} {n}" for k, n in failures.items()) if failures else "none"))
    print(f"corpus: {os.path.join(result['out'], manifest['corpus'].get('file') or manifest['corpus']['folder'])}")
    print(f"manifest: {os.path.join(result['out'], 'manifest.json')}")


def _merge_only(args: argparse.Namespace) -> int:
    """``--merge-only``: the corpus and manifest from the parts in --out; no model is asked."""
    from vlr_plugins.errors import UsageError
    from vlr_plugins.generate.pipeline import load_pipeline
    from vlr_plugins.generate.runner import merge_parts

    if args.out is None:
        raise UsageError("--out", "required: the corpus folder whose parts --merge-only merges")
    given = [f"--{k.replace('_', '-')}" for k in ("shard_index", "shard_count", "stages", "limit", "cache", "no_cache",
                                                  "no_merge", "ray_address", "ray_workers")
             if _given(getattr(args, k))]
    if args.engine != "local":
        given.insert(0, "--engine")
    if given:
        raise UsageError(given[0], "is an option of a generation run; --merge-only generates nothing: it merges "
                                   "the parts already in --out (it takes the pipeline, --set, --out and --input)")
    if args.input is not None and not os.path.isfile(args.input):
        raise UsageError("--input", f"no such file: {args.input}")
    pipeline = load_pipeline(args.target, _overrides(args.set or []) or None)
    result = merge_parts(pipeline, args.out, input_path=args.input)
    print(f"{result['out']}: merged {result['parts']} parts of every stage (no model asked)")
    _print_complete(result)
    return 0


def _shard(args: argparse.Namespace) -> tuple[int, int]:
    """This process' ``(shard index, shard count)``: the shard options (one given alone: the
    other is 0 / 1), or under ``torchrun`` (no shard options) ``RANK`` / ``WORLD_SIZE``."""
    from vlr_plugins._shards import resolve_shard, torchrun_shard
    from vlr_plugins.errors import UsageError

    if args.engine == "ray":
        if args.shard_count not in (None, 1) or args.shard_index not in (None, 0):
            option = "--shard-count" if args.shard_count not in (None, 1) else "--shard-index"
            raise UsageError(option, "a job-array shard and --engine ray do not mix: Ray spreads the parts over "
                                     "the cluster itself")
        ranked = torchrun_shard()
        if ranked is not None and ranked[1] > 1:
            raise UsageError("--engine", f"ray under torchrun (rank {ranked[0]} of {ranked[1]}): every rank would "
                                         "start the whole Ray run; run `vlr generate --engine ray` once, without "
                                         "torchrun")
        return 0, 1
    index, count = args.shard_index, args.shard_count
    if index is not None or count is not None:
        index, count = 0 if index is None else index, 1 if count is None else count
    shard = resolve_shard(index, count)  # a SLURM array task, or a torchrun rank
    return shard if shard is not None else (0, 1)


def _overrides(items: list[str]) -> dict[str, Any]:
    """``--set`` items (``roles.judge.base_url=http://...``) as a nested mapping, values read
    as YAML; the grammar of ``vlr train --set``."""
    from vlr_plugins.recipe.overrides import parse_set_items

    return parse_set_items(items, example="roles.judge.concurrency=32")


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``vlr generate`` to the ``vlr`` command's subparsers (nothing heavy is imported here)."""
    s = subparsers.add_parser(
        "generate", help="generate a synthetic-supervision corpus (paragraph, mvc); `vlr generate stats OUT`",
        description="Run a pipeline file (a shipped name: paragraph, mvc; or a .yaml) over --input into the "
                    "corpus folder --out: sharded parts written once each, a manifest, the merged corpus. A "
                    "rerun with the same --out finishes what a stopped run left. `vlr generate stats OUT` "
                    "prints (and with --plot, plots) the corpus audit. Keys are read from the environment "
                    "variables the pipeline's roles name (docs/generate.md). Exit status: 0 every record "
                    "generated whole; 1 some records have failed requests (kept in the corpus with them); 2 "
                    "bad input, a refused key/model/URL, or a stage whose every request of a part failed "
                    "(that part is not written).")
    s.add_argument("target", metavar="PIPELINE|stats", help="a shipped pipeline, a pipeline file, or stats")
    s.add_argument("corpus", nargs="?", metavar="CORPUS", help="(stats) the corpus folder or .jsonl file")
    s.add_argument("--input", help="the input records: JSON Lines (paragraph also Parquet, CSV/TSV)")
    s.add_argument("--out", help="the corpus folder (created; a rerun goes on where it stopped)")
    s.add_argument("--set", nargs="*", action="extend", metavar="KEY=VALUE",
                   help="pipeline overrides, e.g. roles.captioner.base_url=http://host:8000/v1")
    s.add_argument("--stages", nargs="+", metavar="STAGE", help="run only these stages (each may run elsewhere)")
    s.add_argument("--shard-index", type=at_least(0),
                   help="this worker's index in a job array (e.g. $SLURM_ARRAY_TASK_ID; default 0); under "
                        "torchrun each rank takes its shard by itself")
    s.add_argument("--shard-count", type=at_least(1), help="workers in the job array (default 1)")
    s.add_argument("--limit", type=at_least(1), help="only the first N input records")
    s.add_argument("--cache", help="the answer cache (SQLite; default OUT/llm-cache.sqlite)")
    s.add_argument("--no-cache", action="store_true", help="keep no answer cache")
    s.add_argument("--no-merge", action="store_true", help="leave the corpus as parts (no corpus.jsonl)")
    s.add_argument("--merge-only", action="store_true",
                   help="generate nothing: write corpus.jsonl and manifest.json from the parts already in --out "
                        "(every part of every stage must be there, written by this pipeline and --set)")
    s.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="ray: spread the parts over a Ray cluster (pip install 'vlr-plugins[ray]')")
    s.add_argument("--ray-address", help="the Ray cluster to join (default: RAY_ADDRESS, else a local one)")
    s.add_argument("--ray-workers", type=at_least(1), help="Ray workers (default: the cluster's GPUs, else CPUs)")
    s.add_argument("--plot", help="(stats) also plot the audit to this .png/.pdf/.svg")
    s.add_argument("--json", help="(stats) also write the audit as JSON")
    s.set_defaults(fn=_run)
    return s
