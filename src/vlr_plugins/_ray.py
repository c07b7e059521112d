"""Ray for the commands that scale out: starting or joining a cluster, and running a sharded
command's shards on it (docs/scaling.md, "Ray").

- :func:`import_ray` / :func:`init_ray` / :func:`default_workers`: the start-up every
  ``--engine ray`` shares (``vlr generate``'s runner too): Ray Data imported (or a
  ConfigError naming the extra), ``--ray-address`` or ``RAY_ADDRESS`` joined (else a local
  Ray started), and the workers a cluster holds (its GPUs per actor's share, else its CPUs);
- :func:`add_ray_options` / :func:`check_ray_options`: ``--engine``, ``--ray-address``,
  ``--ray-workers`` of a sharded command, and what they exclude;
- :func:`run_shards`: a Ray Data Dataset of the shard indices ``0 .. N-1``, ``map_batches``
  over at most ``--ray-workers`` tasks at once, each running the command's own function on
  ``--shard-index I --shard-count N``: exactly a job-array task, so each writes its part and the last to
  finish merges them (the merge claim decides, as for any shards). The driver prints what
  each shard printed, raises the first refusal a shard met, and returns the worst exit status.

Framework-free at import (ray is imported by the functions): any application may import it.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import os
import pickle
import sys
from collections.abc import Callable, Mapping
from typing import Any

from vlr_plugins.errors import ConfigError, UsageError, UserError

__all__ = ["add_ray_options", "check_ray_options", "default_workers", "import_ray", "init_ray",
           "refuse_ray_options_without_ray", "run_shards"]


def import_ray() -> Any:
    """``ray`` with Ray Data, or a ConfigError naming the extra to install."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as e:
        raise ConfigError("--engine ray needs Ray Data: pip install 'vlr-plugins[ray]' (ray[data])") from e
    return ray


def init_ray(ray: Any, address: str | None) -> None:
    """Join ``address`` (``--ray-address``; default ``RAY_ADDRESS``), else start a local Ray,
    unless this process is connected already (a test's, or a notebook's ``ray.init``)."""
    if not ray.is_initialized():
        ray.init(address=address or os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False,
                 configure_logging=False)


def default_workers(ray: Any, num_gpus: float) -> int:
    """The workers the cluster holds: its GPUs // ``num_gpus`` when a worker takes GPUs, else its CPUs."""
    resources = ray.cluster_resources()
    return max(1, int(resources.get("GPU", 0) // num_gpus) if num_gpus else int(resources.get("CPU", 1)))


def add_ray_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--engine {local,ray}``, ``--ray-address``, ``--ray-workers`` of a sharded command."""
    from vlr_plugins._argtypes import positive_int

    parser.add_argument("--engine", choices=["local", "ray"], default="local",
                        help=f"ray: run the shards as Ray tasks, each {what}, then merge them as a job array's are "
                             "(pip install 'vlr-plugins[ray]'; --shard-count N shards, default one per worker)")
    parser.add_argument("--ray-address", help="with --engine ray: the cluster to join (default: RAY_ADDRESS, else a "
                                              "local Ray)")
    parser.add_argument("--ray-workers", type=positive_int,
                        help="with --engine ray: the tasks run at once (default: the cluster's GPUs with --device "
                             "cuda, else its CPUs)")


def refuse_ray_options_without_ray(args: argparse.Namespace) -> None:
    """``--ray-address`` / ``--ray-workers`` without ``--engine ray`` would be ignored: refused."""
    if args.engine != "ray":
        for option, value in (("--ray-address", args.ray_address), ("--ray-workers", args.ray_workers)):
            if value is not None:
                raise UsageError(option, f"is an option of --engine ray (this run's engine is {args.engine}); "
                                         "add --engine ray, or drop it")


def check_ray_options(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> None:
    """What ``--engine ray`` excludes, refused before Ray starts: ``--shard-index`` (Ray runs
    every shard), ``--merge-only``, a torchrun rank; and the Ray options without it."""
    from vlr_plugins._shards import torchrun_shard

    if args.engine != "ray":
        refuse_ray_options_without_ray(args)
        return
    if args.shard_index is not None:
        raise UsageError("--shard-index", "a job-array shard and --engine ray do not mix: Ray runs every shard "
                                          "itself (--shard-count N sets how many)")
    if getattr(args, "merge_only", False):
        raise UsageError("--merge-only", "merges the parts without running anything; drop --engine ray")
    ranked = torchrun_shard(env)
    if ranked is not None and ranked[1] > 1:
        raise UsageError("--engine", f"ray under torchrun (rank {ranked[0]} of {ranked[1]}): every rank would run "
                                     "every shard; run the command once, without torchrun")


def _run_shard_batch(batch: Mapping[str, Any], *, args: argparse.Namespace, count: int,
                     cwd: str) -> dict[str, list[Any]]:
    """A Ray Data task: the command's function on each shard of ``batch``, one by one (tasks,
    not actors: a worker process keeps its imports for the next shard)."""
    out: dict[str, list[Any]] = {"shard": [], "code": [], "stdout": [], "stderr": [], "error": []}
    for index in batch["shard"]:
        shard = copy.copy(args)
        shard.shard_index, shard.shard_count, shard.engine = int(index), count, "local"
        shard.ray_address = shard.ray_workers = None
        here = os.getcwd()
        os.chdir(cwd)  # relative paths and module:callable specs, as the driver reads them
        printed, warned, error = io.StringIO(), io.StringIO(), b""
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(warned):
                try:
                    code = shard.fn(shard)
                except UserError as e:  # a refusal: the driver raises it (UserErrors pickle whole)
                    code, error = 2, pickle.dumps(e)
        finally:
            os.chdir(here)
        for key, value in (("shard", int(index)), ("code", int(code or 0)), ("stdout", printed.getvalue()),
                           ("stderr", warned.getvalue()), ("error", error)):
            out[key].append(value)
    return out


def run_shards(args: argparse.Namespace, *, gpus_per_worker: float = 0.0,
               report: Callable[[str], None] | None = None) -> int:
    """Run the command ``args.fn`` as ``--shard-count`` shards (default: one per worker) on the
    Ray cluster of ``--ray-address``, ``--ray-workers`` tasks at once, each with
    ``gpus_per_worker`` GPUs; returns the worst exit status (a refusal is raised)."""
    ray = import_ray()
    init_ray(ray, args.ray_address)
    workers = args.ray_workers or default_workers(ray, gpus_per_worker)
    count = args.shard_count or workers
    workers = min(workers, count)
    report = report or (lambda line: print(line, file=sys.stderr, flush=True))
    dataset = ray.data.from_items([{"shard": i} for i in range(count)], override_num_blocks=count)
    results = dataset.map_batches(_run_shard_batch, batch_size=1, concurrency=workers,
                                  num_gpus=gpus_per_worker or None,
                                  fn_kwargs={"args": args, "count": count, "cwd": os.getcwd()})
    worst, refusal, done = 0, None, 0
    for row in results.iter_rows():
        done += 1
        sys.stdout.write(row["stdout"])
        sys.stderr.write(row["stderr"])
        report(f"shard {row['shard']} of {count} done on Ray ({done}/{count}, {workers} workers)"
               + (f": exit status {row['code']}" if row["code"] else ""))
        if row["error"] and refusal is None:
            refusal = pickle.loads(row["error"])
        worst = max(worst, int(row["code"]))
    if refusal is not None:
        raise refusal
    return worst
