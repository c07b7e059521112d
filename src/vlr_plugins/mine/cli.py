"""``vlr mine``: exact hard negatives for a training corpus, in the format its trainer reads
(docs/eval.md, "Hard-negative mining")."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from vlr_plugins._argtypes import at_least, check_device, non_negative_int, positive_int
from vlr_plugins.errors import UsageError
from vlr_plugins.mine.shards import check_shard_options, finished_run, is_sharded, run_record_of, work_dir_of

__all__ = ["add_cli", "cmd_mine"]

#: corpus format -> (suffixes it reads, suffix it writes)
FORMATS = {"paragraph": ((".jsonl", ".json", ".parquet", ".csv", ".tsv"), ".jsonl"), "nli": ((".csv",), ".csv"),
           "mvc": ((".jsonl", ".json", ".parquet"), ".jsonl")}


def _check_paths(args: argparse.Namespace) -> str | None:
    """The input exists, the output is a new file of the format's suffix, and not the input;
    a sharded run's ``--out`` already written by this very run: the message saying so."""
    writes = FORMATS[args.format][1]
    _check_input(args)
    if Path(args.out).suffix.lower() != writes:
        raise UsageError("--out", f"{args.format} corpora are written as {writes}; found {args.out}")
    if os.path.exists(args.out) and os.path.samefile(args.out, args.input):
        raise UsageError("--out", f"{args.out} is the input corpus: mining never overwrites its input; "
                                  "give another path")
    if os.path.isdir(args.out):
        raise UsageError("--out", f"{args.out} is a folder; give a {writes} file")
    if os.path.exists(args.out) and not args.overwrite and not (is_sharded(args) and work_dir_of(args.out).is_dir()):
        done = finished_run(args) if is_sharded(args) else None
        if done is None:
            raise UsageError("--out", f"{args.out} exists; pass --overwrite to replace it")
        return done
    return None


def _check_mode(args: argparse.Namespace) -> None:
    """Mining writes --out; --embed-gallery writes --gallery-store only."""
    if not args.embed_gallery:
        if args.out is None:
            raise UsageError("--out", "needed: the corpus to write (--embed-gallery writes --gallery-store instead)")
        return
    if args.gallery_store is None:
        raise UsageError("--embed-gallery", "needs --gallery-store STORE: the store it writes")
    if args.out is not None:
        raise UsageError("--out", "--embed-gallery writes only --gallery-store; drop --out, and mine in a second "
                                  "run with --gallery-store STORE --out OUT")


def _check_input(args: argparse.Namespace) -> None:
    reads = FORMATS[args.format][0]
    if not os.path.isfile(args.input):
        raise UsageError("INPUT", f"{args.input}: no such file")
    if Path(args.input).suffix.lower() not in reads:
        raise UsageError("INPUT", f"{args.format} corpora are read from {', '.join(reads)}; found {args.input}")


def _check_window(args: argparse.Namespace) -> None:
    if args.range_max is not None and args.range_max <= args.range_min:
        raise UsageError("--range-max", f"must exceed --range-min ({args.range_min}), found {args.range_max}")


def _task(args: argparse.Namespace):
    """The corpus read and its mining task, checked against the options."""
    from vlr_plugins.mine.corpora import PARAGRAPH_QUERIES, nli_task, paragraph_task

    if args.format == "nli":
        for option, value in (("--query", args.query), ("--pool", args.pool), ("--image-embeddings",
                                                                               args.image_embeddings),
                              ("--video-embeddings", args.video_embeddings)):
            if value is not None:
                raise UsageError(option, "is for paragraph corpora (and mvc); an NLI corpus mines sent0 "
                                         "against every sent1")
        if args.keep_existing:
            raise UsageError("--keep-existing", "is for paragraph corpora (and mvc): an NLI record has one "
                                                "hard_neg")
        from vlr_plugins.data.nli import read_nli_triplets

        return nli_task(read_nli_triplets(args.input, on_empty="space"))
    if args.format == "mvc":
        from vlr_plugins.mine.mvc_corpus import mvc_task_of_args

        return mvc_task_of_args(args)
    from vlr_plugins.data.sample import read_paragraph_samples

    if args.video_embeddings is not None:
        raise UsageError("--video-embeddings", "is for mvc corpora (--query video); paragraph corpora search with "
                                               "--query image --image-embeddings STORE")
    query = args.query or "caption"
    if query not in PARAGRAPH_QUERIES:
        raise UsageError("--query", f"a paragraph sample searches with {', '.join(PARAGRAPH_QUERIES)}; found "
                                    f"{query!r}")
    if (query == "image") != (args.image_embeddings is not None):
        raise UsageError("--image-embeddings", "is needed with --query image, and only there" if query == "image"
                         else f"is for --query image; --query {query} embeds texts")
    pool = [name.strip() for name in (args.pool or "caption,positives").split(",")]
    try:
        return paragraph_task(read_paragraph_samples(args.input), source=args.input, query=query, pool=pool,
                              keep_existing=args.keep_existing)
    except ValueError as e:
        if type(e) is ValueError:
            raise UsageError("--pool", str(e)) from None
        raise


def _check_positives(task, args: argparse.Namespace) -> None:
    """With --margin every query needs a positive to measure from."""
    if args.margin is None:
        return
    empty = [i for i, p in enumerate(task.positives) if not p]
    if empty:
        raise UsageError("--margin", f"{len(empty)} record(s) of {args.input} have no positive in the pool to "
                                     f"measure the margin from, e.g. record {empty[0] + 1}; widen --pool or drop "
                                     "--margin")


def _store_option(args: argparse.Namespace) -> tuple[str, str | None]:
    """The option naming the query store, and its value."""
    if args.format == "mvc":
        return "--video-embeddings", args.video_embeddings
    return "--image-embeddings", args.image_embeddings


def _query_embeddings(task, args: argparse.Namespace, embedder, rows: slice):
    if task.query_ids is None:
        return embedder(task.query_texts[rows], "encode queries")
    from vlr_plugins.data.embedding_store import EmbeddingStore

    with EmbeddingStore(_store_option(args)[1]) as store:
        store.check(task.query_ids)
        return store.get(task.query_ids[rows]).float()


def _mine(task, args: argparse.Namespace, device: str, rows: slice, store=None) -> list[list[int]]:
    """The mined gallery indices (best first) of the queries ``rows`` against the whole gallery
    (its rows read from ``store``, the opened ``--gallery-store``, where given)."""
    import torch

    from vlr_plugins.eval.hard_negatives import mine_hard_negatives
    from vlr_plugins.mine.gallery_store import check_query_width
    from vlr_plugins.mine.text_embedder import text_embedder

    if rows != slice(None) and not range(len(task))[rows]:
        return []  # an empty shard (more shards than records)
    embedder = text_embedder(args, device) if store is None or task.query_ids is None else None
    with torch.inference_mode():
        gallery = store.get(task.gallery) if store is not None else embedder(task.gallery, "encode gallery")
        queries = _query_embeddings(task, args, embedder, rows)
    if store is not None:
        check_query_width(store, queries)
    elif queries.shape[1] != gallery.shape[1]:
        option, store = _store_option(args)
        raise UsageError(option, f"{store} holds {queries.shape[1]}-d embeddings and {args.model} embeds texts in "
                                 f"{gallery.shape[1]} dimensions: they are not one space")
    mined = mine_hard_negatives(queries, gallery, task.positives[rows], k=args.num_negatives,
                                range_min=args.range_min, range_max=args.range_max, margin=args.margin, device=device)
    return [[j for j in row if j >= 0] for row in mined.indices.tolist()]


def _write(task, args: argparse.Namespace, indices: list[list[int]]) -> None:
    keys = task.gallery if task.gallery_keys is None else task.gallery_keys
    texts = [[keys[j] for j in row] for row in indices]
    summary = task.write(texts, args.out)
    short = sum(1 for row in texts if len(row) < args.num_negatives)
    print(f"mined {sum(len(row) for row in texts)} hard negatives for {len(task)} queries against "
          f"{len(task.gallery)} texts ({short} with fewer than {args.num_negatives}): {args.out} "
          f"({', '.join(f'{k} {v}' for k, v in summary.items())})")


def _run_shard(task, args: argparse.Namespace, device: str, store=None) -> int:
    """One shard of a job array (or --merge-only): its part, then the merge once all are there."""
    from vlr_plugins.mine.shards import open_shards

    run = open_shards(args, len(task))
    if not args.merge_only:
        start, stop = run.range(args.shard_index)
        if run.part(args.shard_index).is_file():
            print(f"shard {args.shard_index} of {run.count} (records {start}..{stop - 1}) is already mined: "
                  f"{run.part(args.shard_index)}")
        else:
            run.write_part(args.shard_index, _mine(task, args, device, slice(start, stop), store))
            print(f"shard {args.shard_index} of {run.count}: mined records {start}..{stop - 1} against "
                  f"{len(task.gallery)} texts: {run.part(args.shard_index)}")
    missing = run.missing()
    if missing and not args.merge_only and run.merged_already(args.out):
        print(f"shard {args.shard_index} of {run.count}: the parts were merged into {args.out} by another shard")
        return 0
    if missing:
        if args.merge_only:
            raise UsageError("--merge-only", f"{len(missing)} of {run.count} shards have no part in {run.work} yet, "
                                             f"e.g. shard {missing[0]}; run --shard-index {missing[0]} first")
        print(f"not complete: {len(missing)} of {run.count} shards still to run (e.g. --shard-index {missing[0]}); "
              f"the last one to finish writes {args.out}")
        return 0
    try:
        claimed, claim = run.claim_merge(timeout=args.claim_timeout, force=args.merge_only)
    except FileNotFoundError:  # the work folder removed meanwhile: another shard merged (torchrun's ranks at once)
        if args.merge_only or not run.merged_already(args.out):
            raise
        print(f"shard {args.shard_index} of {run.count}: the parts were merged into {args.out} by another shard")
        return 0
    if not claimed:
        if args.merge_only:
            raise UsageError("--merge-only", f"the merge into {args.out} is claimed by {claim.describe()}; wait for it "
                                             f"to finish, or end it and rerun (a claim is taken over once its pid is "
                                             f"gone, or after --claim-timeout {args.claim_timeout:g} s)")
        if claim.alive():
            print(f"another process is merging the parts into {args.out}: {claim.describe()}")
        else:
            print(f"another process is merging the parts into {args.out}: {claim.describe()}; if it was killed, "
                  f"vlr mine ... --merge-only finishes it (a later run takes the claim over once it is provably "
                  f"gone: its pid ended on this host, or after --claim-timeout {args.claim_timeout:g} s)")
        return 0
    if claim is not None:
        print(f"took over the merge claim of {claim.describe()}")
    _write(task, args, run.read_parts(len(task.gallery)))
    run.finish(args.out)
    return 0


def _on_ray(args: argparse.Namespace) -> int:
    """``--engine ray``: the shards run as Ray tasks, each exactly a job-array task (the last
    merges); each checks everything a shard checks (a refusal is raised here)."""
    from vlr_plugins._ray import run_shards

    _check_mode(args)
    if not os.path.isfile(args.input):
        raise UsageError("INPUT", f"{args.input}: no such file")
    _check_window(args)
    if args.device.startswith("cuda:"):
        raise UsageError("--device", f"{args.device}: with --engine ray give cuda (Ray gives each task its GPU)")
    return run_shards(args, gpus_per_worker=1.0 if args.device == "cuda" else 0.0)


def cmd_mine(args: argparse.Namespace) -> int:
    from vlr_plugins.eval import _tile_calibration

    _tile_calibration.check_settings()  # VLR_CPU_BLAS, VLR_CPU_TILE_ELEMS, VLR_COUNT_KERNEL
    from vlr_plugins._ray import check_ray_options

    check_ray_options(args)
    if args.engine == "ray":
        return _on_ray(args)
    _check_mode(args)
    check_shard_options(args)
    if not args.merge_only:
        from vlr_plugins._shards import local_rank, resolve_shard

        shard = resolve_shard(args.shard_index, args.shard_count)  # a SLURM array task, or a torchrun rank
        if shard is not None:
            args.shard_index, args.shard_count = shard
            if args.device == "cuda" and local_rank() is not None:
                args.device = f"cuda:{local_rank()}"  # torchrun: each rank on its node's device
    if args.embed_gallery:
        return _embed_gallery(args)
    done = _check_paths(args)
    if done is not None:
        print(done)
        return 0
    _check_window(args)
    device = check_device(args.device)
    task = _task(args)
    _check_positives(task, args)
    store = None
    if args.gallery_store is not None and not args.merge_only:
        from vlr_plugins.mine.gallery_store import open_gallery_store

        store = open_gallery_store(args.gallery_store, task, args)  # refused before anything is embedded
    if is_sharded(args):
        return _run_shard(task, args, device, store)
    _write(task, args, _mine(task, args, device, slice(None), store))
    run_record_of(args.out).unlink(missing_ok=True)  # a sharded run's record of the output replaced
    return 0


def _embed_gallery(args: argparse.Namespace) -> int:
    """``--embed-gallery``: this process' share of the gallery into ``--gallery-store``."""
    from vlr_plugins.mine.gallery_store import embed_gallery, merge_gallery

    if args.merge_only:
        return merge_gallery(args)
    _check_input(args)
    device = check_device(args.device)
    return embed_gallery(_task(args), args, device)


def add_cli(sub: Any) -> None:
    """Add ``vlr mine`` to the ``vlr`` command's subparsers."""
    from vlr_plugins._merge_claim import DEFAULT_CLAIM_TIMEOUT
    from vlr_plugins._ray import add_ray_options
    from vlr_plugins._shards import add_shard_options
    from vlr_plugins.mllm.model_dtype import add_model_dtype_option

    s = sub.add_parser(
        "mine", help="exact hard negatives for a training corpus (paragraph samples, MVC videos, NLI triplets)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="For every query of a corpus, the most similar gallery texts that are not its positives,\n"
                    "exactly (tiled, bounded memory), written back in the corpus' own format:\n"
                    "  paragraph  samples (.jsonl/.parquet/.csv): each sample's caption (or paragraph, or image)\n"
                    "             against every distinct caption/positive; the result is the samples with\n"
                    "             hard_negatives filled (vlr train paragraph/c7 reads them)\n"
                    "  mvc        multi-view-captions corpus (.jsonl/.parquet): each video's summary caption\n"
                    "             (or another view, or its stored embedding) against one caption of every\n"
                    "             video; a video sharing any caption with it is a positive; the result is the\n"
                    "             records as given with hard_negatives = the mined videos' ids\n"
                    "  nli        SimCSE's sent0,sent1[,hard_neg] CSV: sent0 against every distinct sent1; one\n"
                    "             output record per mined sentence (CaRe stage II reads it)\n"
                    "--range-min / --range-max: skip the first R candidates / look no further than rank R\n"
                    "(sentence-transformers' mine_hard_negatives); --margin M: a negative scores at least M\n"
                    "below every positive of its query (a guard against false negatives).\n"
                    "--shard-index I --shard-count N (a job array), or under torchrun each rank by itself:\n"
                    "mine a contiguous range of the queries against the whole gallery into a part beside\n"
                    "--out; a rerun redoes only missing parts; the last shard to finish (or --merge-only)\n"
                    "writes --out; a task run again after that (a requeue) finds --out written by the same\n"
                    "run and does nothing. --engine ray runs the same shards as Ray tasks.\n"
                    "The gallery embedded once (docs/eval.md): the same command with --gallery-store STORE\n"
                    "--embed-gallery (no --out; sharded as above, each shard embedding whole batches of the\n"
                    "gallery, the last merging) writes it; then with --gallery-store STORE --out OUT every\n"
                    "shard reads it and embeds only its queries, the output byte for byte the same.")
    s.add_argument("format", choices=sorted(FORMATS), help="the corpus format")
    s.add_argument("input", metavar="INPUT", help="the corpus file")
    s.add_argument("--model", required=True,
                   help="the embedding model: a checkpoint (.pth), blip:<name>, open_clip:MODEL:CHECKPOINT_OR_TAG, "
                        "mllm:FOLDER[:PROMPT] or module:callable (as vlr eval)")
    s.add_argument("--out", help="the corpus to write (.jsonl for paragraph and mvc, .csv for nli); needed "
                                 "unless --embed-gallery")
    s.add_argument("--num-negatives", "-k", type=positive_int, default=5, help="negatives per query (default 5)")
    s.add_argument("--range-min", type=non_negative_int, default=0, help="skip this many best candidates first")
    s.add_argument("--range-max", type=positive_int, help="take candidates only from the ranks below this")
    s.add_argument("--margin", type=at_least(0.0, float), help="a negative scores at least this much below every positive")
    s.add_argument("--query", metavar="QUERY",
                   help="paragraph: what each sample searches with: caption (default), paragraph or image; mvc: "
                        "summary (default: S1, else S2, else O), detailed (D1*, D2*, P1, P2, the first present), "
                        "FIELD,... (the first present) or video")
    s.add_argument("--pool", metavar="FIELD,...",
                   help="paragraph: the fields whose texts form the gallery (default caption,positives); mvc: the "
                        "view of each gallery video: summary, detailed or FIELD,... (default the query's; summary "
                        "for --query video)")
    s.add_argument("--image-embeddings", metavar="STORE", help="paragraph --query image: the image-embedding store")
    s.add_argument("--video-embeddings", metavar="STORE", help="mvc --query video: the video-embedding store")
    s.add_argument("--gallery-store", metavar="STORE",
                   help="the gallery's embeddings, written once by --embed-gallery (sharded or not): mining reads "
                        "them instead of embedding the gallery (each shard embeds only its queries)")
    s.add_argument("--embed-gallery", action="store_true",
                   help="embed the gallery into --gallery-store and mine nothing (no --out); sharded, each shard "
                        "embeds its share of the gallery's batches and the last one merges")
    s.add_argument("--keep-existing", action="store_true",
                   help="paragraph, mvc: keep a sample's hard_negatives and add the mined ones after them")
    s.add_argument("--max-tokens", type=positive_int, help="checkpoints and blip: the token budget "
                                                           "(default the encoder's positions)")
    s.add_argument("--tokenizer", help="default: the encoder's (checkpoints and blip: only)")
    s.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    s.add_argument("--batch-size", type=positive_int, default=256)
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps")
    add_shard_options(s, "mines a contiguous range of the queries against the whole gallery into a part beside "
                         "--out; under torchrun each rank takes its shard by itself",
                      count_help="the processes of the job array (with --engine ray: the shards, default one per "
                                 "worker)",
                      merge_help="write --out from the parts of a sharded run (the last shard to finish does it "
                                 "itself)")
    s.add_argument("--claim-timeout", type=at_least(0.0, float), default=DEFAULT_CLAIM_TIMEOUT, metavar="SECONDS",
                   help="a merge claim older than this is taken over even when its holder cannot be shown gone "
                        f"(another host); one whose pid ended on this host is taken over at once (default "
                        f"{DEFAULT_CLAIM_TIMEOUT:g})")
    add_ray_options(s, "mining its range of the queries into its part")
    add_model_dtype_option(s, what="an mllm: --model")
    s.set_defaults(fn=cmd_mine)
