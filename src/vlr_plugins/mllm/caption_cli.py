"""``vlr caption``: a detailed caption of every video of a benchmark (or a folder) by a chat MLLM."""

from __future__ import annotations

import argparse
import os
from typing import Any

from vlr_plugins._argtypes import at_least
from vlr_plugins.mllm.model_dtype import add_model_dtype_option

__all__ = ["add_cli"]


def _videos(args: argparse.Namespace) -> list[tuple[str, str]]:
    from vlr_plugins.errors import UsageError
    from vlr_plugins.mllm.caption_run import videos_in_folder

    if not os.path.isdir(args.videos):
        raise UsageError("--videos", f"no such folder: {args.videos}")
    if args.benchmark is None:
        if args.annotations is not None:
            raise UsageError("--annotations", "is read for a --benchmark; without one every video in --videos "
                                              "is captioned")
        return videos_in_folder(args.videos)
    if args.benchmark != "carebench":
        raise UsageError("--benchmark", f"captioning knows carebench (or none: a folder); found {args.benchmark!r}")
    if args.annotations is None:
        raise UsageError("--annotations", "--benchmark carebench needs its json/metadata.json")
    if not os.path.isfile(args.annotations):
        raise UsageError("--annotations", f"no such file: {args.annotations}")
    from vlr_plugins.data.readers import read_carebench

    care = read_carebench(args.annotations, media_root=args.videos, check_media=True)
    return list(zip(care.item_ids, care.media_paths()))


def _on_ray(args: argparse.Namespace) -> int:
    """``--engine ray``: the shards run as Ray tasks, each exactly a job-array task (the last merges)."""
    from vlr_plugins._ray import run_shards
    from vlr_plugins.errors import UsageError

    if args.device.startswith("cuda:"):
        raise UsageError("--device", f"{args.device}: with --engine ray give cuda (Ray gives each task its GPU)")
    return run_shards(args, gpus_per_worker=1.0 if args.device == "cuda" else 0.0)


def _run(args: argparse.Namespace) -> int:
    from vlr_plugins._shards import local_rank, resolve_shard
    from vlr_plugins.errors import OutputExistsError, UsageError
    from vlr_plugins.mllm.caption_run import caption_videos
    from vlr_plugins.mllm.caption_settings import load_caption_settings
    from vlr_plugins.mllm.captions_file import CaptionsFile

    from vlr_plugins._ray import check_ray_options

    check_ray_options(args)
    if args.merge_only:
        return _merge_only(args)
    for flag, value in (("--model", args.model), ("--videos", args.videos)):
        if value is None:
            raise UsageError(flag, "is needed (only --merge-only goes without)")
    if args.engine == "ray":
        return _on_ray(args)
    shard = resolve_shard(args.shard_index, args.shard_count)  # a SLURM array task, or a torchrun rank
    if shard is not None and args.device == "cuda" and local_rank() is not None:
        args.device = f"cuda:{local_rank()}"  # torchrun: each rank on its node's device
    if args.backend == "vllm":
        from vlr_plugins.mllm.vllm_backend import require_vllm

        require_vllm("--backend vllm")
    folder = _model_folder(args.model)
    videos = _videos(args)
    if args.limit is not None:
        videos = videos[:args.limit]
    settings = load_caption_settings(args.settings)
    if args.prompt is not None:
        if not args.prompt.strip():
            raise UsageError("--prompt", "expected a non-empty instruction")
        from dataclasses import replace

        settings = replace(settings, prompt=args.prompt)
    if os.path.isdir(args.out):
        raise OutputExistsError(f"--out: {args.out} is a folder; the captions go into a .jsonl file")
    from vlr_plugins._io import check_output_dir

    # the captions, their settings and a sharded run's parts all go beside --out
    check_output_dir(os.path.dirname(os.path.abspath(args.out)), "--out")
    if args.resume and args.overwrite:
        raise UsageError("--resume", "and --overwrite exclude each other")
    from vlr_plugins.mllm.caption_shards import CaptionShardJob, parts_dir_of

    job = None
    if shard is not None:
        job = CaptionShardJob(args.out, videos, *shard, args.batch_size)
        job.check_out(resume=args.resume, overwrite=args.overwrite)
    else:
        if os.path.exists(args.out) and not (args.resume or args.overwrite):
            raise OutputExistsError(f"--out: {args.out} exists; pass --resume to caption the videos it lacks, or "
                                    f"--overwrite to start it over")
        if parts_dir_of(args.out).exists():
            raise UsageError("--out", f"{parts_dir_of(args.out)} holds the parts of a sharded run of {args.out}; "
                                      "finish its shards (or vlr caption --merge-only --out), or remove that folder")
    _check_model(args.model, folder)
    captioner = _captioner(args, settings, folder)
    record = {"model": args.model, "model_dtype": _model_dtype_of(captioner, args.model_dtype),
              "backend": args.backend, **settings.describe()}
    if job is not None:
        return job.run(captioner, record, resume=args.resume, overwrite=args.overwrite, batch_size=args.batch_size,
                       progress=not args.no_progress)
    with CaptionsFile(args.out, record, resume=args.resume, overwrite=args.overwrite, resume_flag="--resume",
                      overwrite_flag="--overwrite") as out:
        if out.cut_partial_line:
            print(f"{args.out}: cut off a partial last line (a killed run's); that video is captioned again")
        run = caption_videos(captioner, videos, out, batch_size=args.batch_size, progress=not args.no_progress)
    print(f"captioned {run.captioned}, already there {run.skipped}, failed {len(run.failed)}: {args.out}")
    if run.failed:
        from vlr_plugins.mllm.captions_file import failures_path_of

        print(f"videos that could not be decoded: {failures_path_of(args.out)} (a rerun with --resume tries them "
              f"again)")
    from vlr_plugins.errors import failed_items_status

    return failed_items_status(len(run.failed), run.captioned + run.skipped + len(run.failed))


def _merge_only(args: argparse.Namespace) -> int:
    from vlr_plugins.errors import UsageError
    from vlr_plugins.mllm.caption_shards import merge_only

    if args.shard_index is not None:
        raise UsageError("--shard-index", "--merge-only merges the parts of every shard; drop --shard-index")
    given = [flag for flag, value in (("--model", args.model), ("--videos", args.videos),
                                      ("--benchmark", args.benchmark), ("--annotations", args.annotations))
             if value is not None]
    if given:
        raise UsageError(given[0], "--merge-only merges the parts the shards wrote, with the settings they "
                                   "recorded; it takes --out (and --shard-count) only")
    return merge_only(args.out, args.shard_count)


def _model_dtype_of(captioner: Any, asked: str) -> str:
    """The dtype the captioner's model computes in (what the settings record keeps, so that a
    resumed run at another dtype is refused): the model's own, or the one vLLM's engine chose."""
    from vlr_plugins.mllm.model_dtype import dtype_name

    if captioner.backend == "transformers":
        return dtype_name(captioner.model)
    config = getattr(getattr(captioner.llm, "llm_engine", None), "model_config", None)
    chosen = getattr(config, "dtype", None)
    return str(chosen).removeprefix("torch.") if chosen is not None else asked


_MODEL_FORM = "a chat MLLM's folder or Hub id, or mllm:FOLDER"


def _model_folder(model: str) -> str:
    """``--model``: a model folder or ``mllm:FOLDER``; an EOL prompt has no part in captioning."""
    from vlr_plugins.errors import UsageError
    from vlr_plugins.specs import mllm_model_folder

    folder, prompt = mllm_model_folder(model)
    if prompt is not None:
        raise UsageError("--model", f"{model!r} names the EOL prompt {prompt!r}, which embeds; captions are asked "
                                    "for with --settings and --prompt: give mllm:FOLDER or the folder")
    return folder


def _check_model(model: str, folder: str) -> None:
    """Nothing loaded: ``folder`` must be there and hold a multimodal LLM's config (not a text encoder)."""
    from vlr_plugins.mllm.loading import check_mllm_folder

    check_mllm_folder(folder, "--model", spec=model, form=_MODEL_FORM,
                      needs="vlr caption needs a chat MLLM that transformers loads as image-text-to-text "
                            "(Qwen2-VL, a CaRe stage-I folder, a vlr export of CaRe)")


def _captioner(args: argparse.Namespace, settings: Any, folder: str) -> Any:
    from vlr_plugins.errors import ConfigError
    from vlr_plugins.mllm.loading import load_eol_embedder

    if args.backend == "vllm":
        from vlr_plugins.mllm.vllm_backend import VLLMVideoCaptioner

        return VLLMVideoCaptioner(folder, settings, dtype=None if args.model_dtype == "auto" else args.model_dtype)
    from vlr_plugins.mllm.captioner import VideoCaptioner

    emb = load_eol_embedder(folder, setting="--model", dtype=args.model_dtype, device=args.device)
    if emb.kind != "mllm":
        raise ConfigError(f"--model: {args.model} is a text-only language model; captioning videos needs an MLLM")
    return VideoCaptioner(emb.model, emb.processor, settings)


def add_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``vlr caption`` to the ``vlr`` command's subparsers (nothing heavy is imported here)."""
    from vlr_plugins._ray import add_ray_options
    from vlr_plugins._shards import add_shard_options

    s = subparsers.add_parser(
        "caption", help="a detailed caption of every video by a chat MLLM (CaReBench captioning, for `vlr capst`)",
        description="Caption every video of a benchmark (or every video file in a folder) with a chat "
                    "MLLM: the prompt, frames and generation arguments come from --settings (data: a "
                    "shipped name or a YAML file). Each caption is appended to --out as soon as it is "
                    "made; a rerun with --resume captions only the videos the file lacks (a killed run "
                    "loses at most the videos in flight: with --batch-size above 1, 4 batches decoded at once and "
                    "grouped by length). Sharded: --shard-index I --shard-count N (a "
                    "SLURM array), or under torchrun each rank by itself, captions its share into a part "
                    "in .OUT.shards/ (resumably); the last shard to finish merges the parts into OUT, "
                    "byte for byte what one process writes; --merge-only --out OUT merges them; --engine ray runs the "
                    "same shards as Ray tasks (--shard-count N, default one per worker). "
                    "docs/capst.md.")
    s.add_argument("--model",
                   help="(needed) a chat MLLM: folder or Hub id (Qwen2-VL, a CaRe stage-I folder, a `vlr` MLLM export)")
    s.add_argument("--benchmark", help="carebench (with --annotations); default: every video in --videos")
    s.add_argument("--annotations", help="CaReBench's json/metadata.json")
    s.add_argument("--videos", help="(needed) the folder holding the videos")
    s.add_argument("--settings", default="carebench",
                   help="captioning settings: carebench (Table 2: 32 frames, greedy), care_stage1, or a YAML file")
    s.add_argument("--prompt", help="the instruction (default: the settings', 'Describe the video in detail.')")
    s.add_argument("--out", required=True, help="the captions file (JSON Lines of {id, caption})")
    s.add_argument("--resume", action="store_true", help="caption only the videos --out lacks")
    s.add_argument("--overwrite", action="store_true", help="start --out over")
    s.add_argument("--backend", choices=("transformers", "vllm"), default="transformers",
                   help="vllm: bulk generation on GPUs (needs vllm and a GPU)")
    s.add_argument("--batch-size", type=at_least(1), default=1)
    s.add_argument("--limit", type=at_least(1), help="caption only the first N videos")
    add_model_dtype_option(s, "--dtype")
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_shard_options(s, "captions a contiguous share of the videos into its own "
                         "part; under torchrun each rank takes its shard by itself")
    add_ray_options(s, "captioning its share of the videos into its part")
    s.set_defaults(fn=_run)
    return s
