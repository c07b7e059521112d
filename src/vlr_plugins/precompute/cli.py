"""``vlr precompute``: embed images or videos once with a frozen tower into a store."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from vlr_plugins._argtypes import check_device, non_negative_int, positive_int
from vlr_plugins.errors import UsageError, failed_items_status
from vlr_plugins.specs import (
    check_model_dtype_option,
    load_image_encoder,
    load_video_encoder,
    model_dtype_record,
    parse_model_spec,
)

__all__ = ["add_cli", "cmd_precompute"]


def cmd_precompute(args: argparse.Namespace) -> int:
    import torch

    from vlr_plugins._io import check_output_dir

    from vlr_plugins._shards import local_rank, resolve_shard

    from vlr_plugins._ray import check_ray_options

    # everything a run can be refused for is checked before a file is written or an item encoded
    check_ray_options(args)
    if args.merge_only:
        return _merge_only(args)
    if args.images is None and args.videos is None and args.benchmarks is None:
        raise UsageError("--images", "one of --images, --videos or --benchmarks is needed (or --merge-only)")
    if args.encoder is None:
        raise UsageError("--encoder", "needed: the tower that encodes the items")
    if args.engine == "ray":
        return _on_ray(args)
    shard = resolve_shard(args.shard_index, args.shard_count)  # a SLURM array task, or a torchrun rank
    if shard is not None and args.device == "cuda" and local_rank() is not None:
        args.device = f"cuda:{local_rank()}"  # torchrun: each rank on its node's device
    video_options = {"--frames": args.frames, "--sampler": args.sampler, "--seed": args.seed,
                     "--backend": args.backend, "--resume": (args.resume and shard is None) or None}
    if args.images is not None:
        given = [option for option, value in video_options.items() if value is not None]
        if given:
            raise UsageError(given[0], "is for --videos and --benchmarks; an image store is written all at once "
                                       "from --images")
    if args.resume and args.overwrite:
        raise UsageError("--resume", "and --overwrite exclude each other: --resume keeps the rows already written, "
                                     "--overwrite discards them")
    check_model_dtype_option(args.model_dtype, args.encoder, "--encoder")
    device = check_device(args.device)
    check_output_dir(args.out, "--out", replaced_whole=True)
    dtype = {"float32": torch.float32, "float16": torch.float16}[args.dtype]
    if args.images is not None:
        from vlr_plugins.data.embedding_store import check_store_target
        from vlr_plugins.precompute.images import list_images, precompute_image_embeddings

        if shard is None:
            check_store_target(args.out, overwrite=args.overwrite, flag="--overwrite")
        images = list_images(args.images)
        scheme = parse_model_spec(args.encoder, "image").scheme
        options = {"device": device} if scheme in ("blip", "mllm") else {}
        if scheme == "mllm":
            options["dtype"] = args.model_dtype
        encoder = load_image_encoder(args.encoder, setting="--encoder", **options)
        recorded = model_dtype_record(args.model_dtype, getattr(encoder, "embedder", None), args.encoder, device)
        if shard is not None:
            from vlr_plugins.precompute.sharded import IMAGE_LAYOUT, ShardJob, run_image_shard

            batch_size = args.batch_size or 64
            job = ShardJob(args.out, [i for i, _ in images], *shard, batch_size, IMAGE_LAYOUT, "images")
            return run_image_shard(job, encoder, images, batch_size=batch_size, dtype=dtype,
                                   meta={"encoder": args.encoder, **recorded}, resume=args.resume,
                                   overwrite=args.overwrite,
                                   **({"num_workers": args.workers} if args.workers is not None else {}))
        store = precompute_image_embeddings(encoder, images, args.out, batch_size=args.batch_size or 64, dtype=dtype,
                                            meta={"encoder": args.encoder, **recorded}, overwrite=args.overwrite,
                                            **({"num_workers": args.workers} if args.workers is not None else {}))
        print(f"wrote {len(store)} embeddings of dim {store.dim} to {args.out}")
        return 0

    from vlr_plugins.precompute.videos import (
        failures_path_of,
        precompute_video_embeddings,
        video_store_meta,
    )
    from vlr_plugins.data.resumable_store import check_resumable_target, work_dir_of
    from vlr_plugins.precompute.video_sources import benchmark_videos, list_videos

    flags = {"resume_flag": "--resume", "overwrite_flag": "--overwrite"}
    if shard is None:
        check_resumable_target(args.out, resume=args.resume, overwrite=args.overwrite, **flags)
    failures = failures_path_of(args.out)
    if failures.is_dir():
        raise UsageError("--out", f"the videos that cannot be decoded are listed in {failures}, which is a folder")
    frames, sampler = args.frames or 16, args.sampler or "middle"
    seed, backend = 0 if args.seed is None else args.seed, args.backend or "pyav"
    if backend == "torchcodec":
        try:
            from torchcodec.decoders import VideoDecoder  # noqa: F401
        except Exception as e:  # ImportError, or OSError / RuntimeError when FFmpeg's libraries are missing
            reason = (str(e).strip().splitlines() or [""])[0]
            raise UsageError("--backend", f"torchcodec cannot load here ({type(e).__name__}: {reason}); it needs "
                                          "FFmpeg's shared libraries (docs/video.md); use --backend pyav") from None
    videos = list_videos(args.videos) if args.videos is not None else benchmark_videos(args.benchmarks)
    encoder = load_video_encoder(args.encoder, setting="--encoder", device=device, dtype=args.model_dtype)
    wanted = getattr(encoder, "num_frames", None)
    if isinstance(wanted, int) and wanted != frames:
        raise UsageError("--frames", f"{frames}, but the tower of --encoder {args.encoder!r} takes {wanted}-frame "
                                     f"clips; pass --frames {wanted}")
    recorded = model_dtype_record(args.model_dtype, encoder, args.encoder, device)  # a resumed run must match it too
    meta = {**video_store_meta(encoder, args.encoder, frames=frames, sampler=sampler, seed=seed, backend=backend),
            **recorded}
    dim = getattr(encoder, "embed_dim", None)
    if shard is not None:
        from vlr_plugins.precompute.sharded import VIDEO_LAYOUT, ShardJob, run_video_shard

        batch_size = args.batch_size or 16
        job = ShardJob(args.out, [v.id for v in videos], *shard, batch_size, VIDEO_LAYOUT, "videos")
        return run_video_shard(job, encoder, videos, dim=dim if isinstance(dim, int) else None, dtype=dtype,
                               meta=meta, extra={"encoder": args.encoder, **recorded}, resume=args.resume,
                               overwrite=args.overwrite, frames=frames, sampler=sampler, seed=seed,
                               backend=backend, batch_size=batch_size,
                               num_workers=4 if args.workers is None else args.workers)
    check_resumable_target(args.out, resume=args.resume, overwrite=args.overwrite, dtype=dtype, meta=meta,
                           dim=dim if isinstance(dim, int) else None, **flags)
    try:
        store, failed = precompute_video_embeddings(
            encoder, videos, args.out, frames=frames, sampler=sampler, seed=seed, backend=backend,
            batch_size=args.batch_size or 16, num_workers=4 if args.workers is None else args.workers, dtype=dtype,
            resume=args.resume, overwrite=args.overwrite, meta={"encoder": args.encoder, **recorded})
    except KeyboardInterrupt:
        if work_dir_of(args.out).is_dir():
            print(f"the embeddings written so far are kept in {work_dir_of(args.out)}; run the same command with "
                  "--resume to finish the store", file=sys.stderr)
        raise
    print(f"wrote {len(store)} embeddings of dim {store.dim} to {args.out}")
    if failed:
        print(f"error: {failed} of {len(videos)} videos could not be decoded; they are listed with the decoder's "
              f"reason in {failures} (the store holds every other video; fix or remove them and rerun with --resume)",
              file=sys.stderr)
    return failed_items_status(failed, len(videos))


def _on_ray(args: argparse.Namespace) -> int:
    """``--engine ray``: the shards run as Ray tasks, each exactly a job-array task (the last merges)."""
    from vlr_plugins._ray import run_shards

    if args.device.startswith("cuda:"):
        raise UsageError("--device", f"{args.device}: with --engine ray give cuda (Ray gives each task its GPU)")
    return run_shards(args, gpus_per_worker=1.0 if args.device == "cuda" else 0.0)


def _merge_only(args: argparse.Namespace) -> int:
    from vlr_plugins.precompute.sharded import merge_only

    if args.shard_index is not None:
        raise UsageError("--shard-index", "--merge-only merges the parts of every shard; drop --shard-index")
    given = [o for o, v in (("--images", args.images), ("--videos", args.videos), ("--benchmarks", args.benchmarks),
                            ("--encoder", args.encoder)) if v is not None]
    if given:
        raise UsageError(given[0], "--merge-only merges the parts the shards wrote, with the settings they "
                                   "recorded; it takes --out (and --shard-count) only")
    return merge_only(args.out, args.shard_count)


def add_cli(sub: Any) -> None:
    """Add ``vlr precompute`` to the ``vlr`` command's subparsers."""
    from vlr_plugins._ray import add_ray_options
    from vlr_plugins._shards import add_shard_options
    from vlr_plugins.data.video import VIDEO_BACKENDS
    from vlr_plugins.mllm.model_dtype import add_model_dtype_option
    from vlr_plugins.data.video.sampling import CLIP_SAMPLERS as VIDEO_SAMPLERS

    s = sub.add_parser(
        "precompute", help="embed images or videos once with a frozen vision tower into a store",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Embed images or videos once with a frozen vision tower into an embedding store.\n\n"
                    "Image ids: an image's id is its path relative to the --images folder, without the\n"
                    "extension, '/'-separated (images/2021/cat.jpg -> 2021/cat); in a .txt list, the path as\n"
                    "written without the extension; in a .jsonl list, each line's \"id\". Training samples and\n"
                    "benchmark items must use these ids. Video ids follow the same rules (a .jsonl list may\n"
                    "add \"start\" / \"end\" seconds for a clip of a longer video); --benchmarks takes the\n"
                    "ids the benchmarks' readers give.\n\n"
                    "--encoder module:callable: MODULE is imported (the current folder first, as python -m\n"
                    "does) and CALLABLE taken from it: a function, or an object with __call__, mapping a list\n"
                    "of RGB PIL images to an (n, D) tensor, one finite row per image; or a class whose\n"
                    "instances do (created without arguments). An int attribute `dim` and a str attribute\n"
                    "`name` are used when present. blip:<hub name or folder> is BLIP's image side;\n"
                    "mllm:FOLDER[:PROMPT] a CaRe / E5-V MLLM's (EOL prompt, docs/care.md).\n\n"
                    "For videos, --encoder is open_clip:MODEL[:PRETRAINED] (frame-pooled open_clip tower;\n"
                    "PRETRAINED a checkpoint file or an open_clip tag; open_clip:local-dir:DIR[:CHECKPOINT] and\n"
                    "open_clip:hf-hub:ORG/REPO[:CHECKPOINT] a model's config with a trained run's weights),\n"
                    "a tower config (.yaml/.json: type: FramePooledVideoEncoder or SpaceTimeViT, its\n"
                    "arguments, optional checkpoint:),\n"
                    "vlr:CHECKPOINT (the video tower a vlr train mvc/... run trained, docs/mvc.md),\n"
                    "mllm:FOLDER[:PROMPT] (a CaRe / E5-V MLLM folder or vlr export under an EOL prompt such\n"
                    "as care or e5v, in --model-dtype; CaReBench: --frames 32 --sampler uniform;\n"
                    "docs/care.md), or module:callable giving a video tower: encode_video(frames\n"
                    "(B, T, 3, H, W)) -> (B, D), image_mean, image_std, image_size. Video stores are written\n"
                    "resumably: a killed run keeps what it wrote, and --resume finishes it (or adds new\n"
                    "videos to a store). Videos that cannot be decoded are listed in OUT.failures.jsonl;\n"
                    "the run goes on and exits 2.\n\n"
                    "Sharded (docs/precompute.md): --shard-index I --shard-count N (a SLURM array), or under\n"
                    "torchrun each rank by itself, encodes a contiguous share of the items (whole batches) into\n"
                    "its part in .OUT.shards/, resumably (--resume); the last shard to finish merges the parts\n"
                    "into OUT, byte for byte the store one process writes; --merge-only --out OUT merges them.\n"
                    "--engine ray runs the same shards as Ray tasks (--shard-count N, default one per worker).")
    source = s.add_mutually_exclusive_group()
    source.add_argument("--images", help="a folder, or a .txt / .jsonl list of images")
    source.add_argument("--videos", help="a folder, or a .txt / .jsonl list of videos")
    source.add_argument("--benchmarks", metavar="YAML",
                        help="every video of the benchmarks in a `vlr eval` benchmarks file, with their item ids")
    s.add_argument("--encoder",
                   help="images: blip:<hub name or folder> (BlipForImageTextRetrieval), mllm:FOLDER[:PROMPT] or "
                        "module:callable; videos: "
                        "open_clip:MODEL[:PRETRAINED], a tower config file, vlr:CHECKPOINT, mllm:FOLDER[:PROMPT] "
                        "or module:callable (see above)")
    s.add_argument("--out", required=True, help="the store folder to write")
    s.add_argument("--frames", type=positive_int, help="frames per video (default 16)")
    s.add_argument("--sampler", choices=VIDEO_SAMPLERS,
                   help="which frames (default middle: the middle frame of N equal segments, UMT's evaluation)")
    s.add_argument("--seed", type=int, help="seed of --sampler rand (default 0; each video draws from its own)")
    s.add_argument("--backend", choices=VIDEO_BACKENDS, help="video decoder (default pyav)")
    s.add_argument("--workers", type=non_negative_int,
                   help="processes decoding videos, threads reading images (default 4; 0: none)")
    s.add_argument("--batch-size", type=positive_int, help="items per encoder call (default 64 images, 16 videos)")
    s.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or mps (blip:, mllm: and video encoders)")
    s.add_argument("--dtype", choices=["float32", "float16"], default="float32",
                   help="the dtype the store keeps its rows in (the model's own: --model-dtype)")
    add_model_dtype_option(s, what="an mllm: --encoder")
    s.add_argument("--resume", action="store_true",
                   help="keep the videos a killed run (or an earlier store) already holds and add the rest")
    s.add_argument("--overwrite", action="store_true", help="replace an existing store at --out (start over)")
    add_shard_options(s, "encodes a contiguous share of the items into its own part; "
                         "under torchrun each rank takes its shard by itself")
    add_ray_options(s, "encoding its share of the items into its part")
    s.set_defaults(fn=cmd_precompute)
