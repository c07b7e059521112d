"""Benchmark: scaling out on one machine -- ``vlr precompute`` against its encoder's own rate,
two shards against one process, and the two-process training step against one process.

    python benchmarks/scaling.py                  # 6.5 min on 2 quiet cores (docs/benchmarks.md)
    python benchmarks/scaling.py --quick          # a smoke run: tiny towers, 1-2 min (mostly start-up)
    python benchmarks/scaling.py --parts shards,train --media images --rounds 5 --json scaling.json
    python benchmarks/scaling.py --parts pipeline --device cuda --rounds 1   # on a GPU (benchmarks/gpu_check.sh)

Parts (``--parts``; ``--media`` picks images, videos or both for the first two):

* ``pipeline`` -- ``vlr precompute`` (one torch thread; the command's default decoding: 4
  image-reading threads, or 4 video-decoding DataLoader workers) against the encoder's own
  forward rate on pre-decoded input: the same tower, batches and thread, with every image
  opened (every clip decoded and transformed) beforehand. Goal: >= 0.9x (decoding hidden).
* ``shards`` -- ``vlr precompute --workers 0`` (decoding in the encoding thread, so that a
  process of one thread is one core) as two shards at once (``--shard-index 0/1
  --shard-count 2``, one torch thread each) against one process of one thread (goal >= 1.8x:
  the sharding itself costs little), and one process of two threads with the default decoding
  (both cores in one process; reported). The merged store is compared byte for byte with the
  one-thread process's.
* ``train`` -- ``vlr train`` of a small ``paragraph/c5`` (a 4 x 256 BLIP text encoder on
  captions and ~80-token paragraphs, 256-d frozen image embeddings from a store, global batch
  32) under ``torchrun --standalone --nproc_per_node 2`` (gloo, CPU, one thread per rank)
  against one process of one thread with the same global batch, and one process of two
  threads. A step's time is MMEngine's own (``time`` in ``vis_data/scalars.json``, logged every
  step), median over the steps after the first two; the logged losses are compared (the same
  global batch gives the same loss).

Towers are random, built from configs (nothing downloaded): a BLIP image side saved as a
``blip:FOLDER`` (ViT 4 x 256, 224 px) and a frame-pooled timm ViT-Tiny (6 x 192, 224 px) from
a tower config. Images are 480 x 360 JPEGs, clips those of benchmarks/video_decode.py (320 x
240 H.264, 30 fps, a keyframe every 2 s), 8 frames each, ``middle``.

Each precompute measurement is fresh processes that import torch, transformers, timm and the
package first (not timed), wait until every process of the measurement is ready, then run
``vlr``'s own ``main`` on the command line: timed from the start signal to the last process's
end, so the encoder's loading, listing, decoding, encoding, writing and (shards) the merge are
in. Methods alternate over ``--rounds`` rounds (order reversed every other round); medians, and
the ratio within each round. The machine (benchmarks/_machine.py) and the load average are
recorded with every measurement: on a shared machine, read the ratios beside the load.

``--device cuda`` (the ``pipeline`` part only): the same measurement with the tower on the GPU,
where it does not share the CPU's cores with the decoders -- ``vlr precompute --device cuda``
against the forward rate on pre-decoded input on the GPU (the input batches copied to the device
and the embeddings back, as the command does; ``torch.cuda.synchronize`` before the clock starts
and before it stops; CUDA initialised, like the imports, before the start signal). Its own sizes
unless ``--quick``: BLIP-base's image side (ViT 12 x 768, 224 px) on 1,024 images, batch 128,
and a frame-pooled timm ViT-B/16 (12 x 768) on 512 clips, batch 32, with 12 decoding workers
(``--workers`` sets them, in either mode); 32 distinct inputs of each, copied to make up the
count. ``--device cpu --quick --workers 2`` runs the same code on a CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import cpu_description, describe  # noqa: E402

_SRC = str(Path(__file__).resolve().parents[1] / "src")
_CLI = ["-m", "vlr_plugins.cli"]
PARTS = ("pipeline", "shards", "train")
MEDIA = ("images", "videos")


@dataclass
class Size:
    images: int
    image_batch: int
    blip: dict            # BLIP vision config (hidden_size, num_hidden_layers, ...) and image_size
    videos: int
    video_batch: int
    clip_seconds: float
    frames: int
    tower: dict           # the timm tower's create_model arguments
    samples: int          # training samples (global batch x steps)
    train_batch: int
    text: dict            # BLIP text encoder config
    paragraph_tokens: int
    workers: int | None = None  # vlr precompute --workers in the pipeline part (None: the command's default)
    distinct: int = 0     # images / clips written; the rest copies of them (0: every one written)


SIZES = {
    "default": Size(images=192, image_batch=16,
                    blip=dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                              image_size=224),
                    videos=32, video_batch=4, clip_seconds=5, frames=8,
                    tower=dict(model_name="vit_tiny_patch16_224", img_size=224, depth=6),
                    samples=192, train_batch=32,
                    text=dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
                    paragraph_tokens=80),
    "quick": Size(images=32, image_batch=8,
                  blip=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                            image_size=64),
                  videos=8, video_batch=2, clip_seconds=2, frames=4,
                  tower=dict(model_name="vit_tiny_patch16_224", img_size=64, depth=2),
                  samples=64, train_batch=16,
                  text=dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128),
                  paragraph_tokens=40),
    # --device cuda: GPU-sized towers and batches, enough inputs that the encoding is not lost in
    # the command's start-up; the whole part about a minute (benchmarks/gpu_check.sh caps it)
    "gpu": Size(images=1024, image_batch=128,
                blip=dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                          image_size=224),
                videos=512, video_batch=32, clip_seconds=5, frames=8,
                tower=dict(model_name="vit_base_patch16_224", img_size=224, depth=12),
                samples=0, train_batch=0, text={}, paragraph_tokens=0, workers=12, distinct=32),
}
WARMUP_STEPS = 2
IMAGE_SIDE = (480, 360)


# ---------------------------------------------------------------- the inputs and towers


def _copies(folder: Path, names: list[str], distinct: int) -> None:
    """Make up ``names[distinct:]`` as byte copies of the first ``distinct`` files, in turn."""
    for i in range(distinct, len(names)):
        shutil.copyfile(folder / names[i % distinct], folder / names[i])


def write_images(folder: Path, n: int, distinct: int = 0) -> None:
    """``n`` 480 x 360 JPEGs (quality 90): a gradient, a square and noise, so that they cost
    what photographs cost to decode. ``distinct`` (> 0): only that many drawn, the rest copies."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True)
    w, h = IMAGE_SIDE
    yy, xx = np.mgrid[0:h, 0:w]
    names = [f"img{i:05d}.jpg" for i in range(n)]
    for i in range(min(n, distinct or n)):
        rng = np.random.default_rng(i)
        im = np.stack([(xx + 7 * i) % 256, (yy + 3 * i) % 256, (xx + yy + 11 * i) // 2 % 256], -1)
        x, y = rng.integers(0, w - 80), rng.integers(0, h - 80)
        im[y:y + 80, x:x + 80] = rng.integers(0, 256, 3)
        im = np.clip(im + rng.normal(0, 12, im.shape), 0, 255).astype(np.uint8)
        Image.fromarray(im).save(folder / names[i], quality=90)
    _copies(folder, names, distinct or n)


def write_videos(folder: Path, n: int, seconds: float, distinct: int = 0) -> None:
    """``n`` clips of benchmarks/video_decode.py, clip ``i`` from seed ``i``, written by a process
    per core; ``distinct`` (> 0): only that many written, the rest copies."""
    from concurrent.futures import ProcessPoolExecutor

    from video_decode import write_clip  # the clips of the decoding benchmark

    folder.mkdir(parents=True)
    names = [f"clip{i:04d}.mp4" for i in range(n)]
    written = min(n, distinct or n)
    with ProcessPoolExecutor(min(written, os.cpu_count() or 1)) as pool:
        list(pool.map(write_clip, [str(folder / name) for name in names[:written]], [seconds] * written,
                      range(written)))
    _copies(folder, names, written)


def write_blip(folder: Path, size: Size) -> None:
    """A random BLIP retrieval model (the image side of ``size.blip``, a 1-layer text side)
    and its image processor, as ``save_pretrained`` writes them: ``blip:FOLDER``."""
    import torch
    from transformers import BlipConfig, BlipForImageTextRetrieval, BlipImageProcessor

    vision = dict(size.blip, patch_size=16, initializer_range=0.02)  # BLIP's 1e-10 makes images alike
    config = BlipConfig(text_config=dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                                         num_attention_heads=2, max_position_embeddings=64, bos_token_id=1,
                                         sep_token_id=3),
                        vision_config=vision, image_text_hidden_size=256)
    torch.manual_seed(0)
    BlipForImageTextRetrieval(config).save_pretrained(folder)
    side = size.blip["image_size"]
    BlipImageProcessor(size={"height": side, "width": side}).save_pretrained(folder)


def write_tower(path: Path, size: Size) -> None:
    tower = json.dumps({"kind": "timm", **size.tower})
    path.write_text(f"type: FramePooledVideoEncoder\ntower: {tower}\n")


def write_training(folder: Path, size: Size) -> dict[str, str]:
    """A synthetic world (captions and paragraphs of ~``paragraph_tokens`` tokens, 256-d image
    embeddings) and a ``paragraph/c5`` recipe of ``size.text`` without dropout (its masks are
    drawn per rank), one epoch, logging every step."""
    from vlr_plugins.demo.synthetic_world import SyntheticWorld, SyntheticWorldConfig
    from vlr_plugins.recipe import find_recipe

    world = SyntheticWorld(SyntheticWorldConfig(seed=1, num_train=size.samples, num_eval=16, dim=256,
                                                description_tokens=size.paragraph_tokens))
    paths = {k: str(v) for k, v in world.write(folder).items()}
    tok = world.tokenizer()
    model = {"type": "BlipTextEncoder", "pretrained": None, "embed_dim": 256, "tokenizer": paths["tokenizer"],
             "config": dict(size.text, vocab_size=len(tok), max_position_embeddings=160,
                            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=tok.pad_token_id,
                            bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id)}
    recipe = folder / "c5_small.yaml"
    recipe.write_text(f"_base_: {json.dumps(str(find_recipe('paragraph/c5')))}\nmodel: {json.dumps(model)}\n"
                      f"train: {{batch_size: {size.train_batch}, epochs: 1, warmup_steps: 2, lr: 1.0e-4, "
                      "num_workers: 0, log_interval: 1}\n")
    return {"recipe": str(recipe), "train": paths["train"], "store": paths["image_embeddings"]}


# ---------------------------------------------------------------- children


def _env(threads: int, device: str = "cpu") -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1",
               TQDM_DISABLE="1", **({"CUDA_VISIBLE_DEVICES": ""} if device == "cpu" else {}))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, os.environ.get("PYTHONPATH")) if p)
    return env


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _sync(device: str) -> None:
    """Wait for the GPU's queued work (nothing on a CPU)."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _preload(device: str = "cpu") -> None:
    """Import what ``vlr precompute`` and the towers need (not timed), with this process's threads;
    on a GPU, create the CUDA context too (process start-up, as the imports are)."""
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    if torch.device(device).type == "cuda":
        torch.zeros(1, device=device)
        _sync(device)
    if importlib.util.find_spec("av"):  # the videos' decoder (main() refuses videos without it)
        import av  # noqa: F401
    import timm  # noqa: F401
    from transformers import BlipForImageTextRetrieval, BlipImageProcessor  # noqa: F401

    import vlr_plugins.cli  # noqa: F401
    import vlr_plugins.precompute.cli  # noqa: F401
    import vlr_plugins.precompute.images  # noqa: F401
    import vlr_plugins.precompute.sharded  # noqa: F401
    import vlr_plugins.precompute.videos  # noqa: F401
    import vlr_plugins.registry  # noqa: F401
    import vlr_plugins.specs  # noqa: F401
    from vlr_plugins.vision import FramePooledVideoEncoder  # noqa: F401


def child_command(ready: str, go: str, device: str, argv: list[str]) -> None:
    """Import what ``vlr precompute`` needs, say so, wait for the signal, run the command."""
    import torch

    from vlr_plugins.cli import main

    _preload(device)
    Path(ready).touch()
    while not os.path.exists(go):
        time.sleep(0.005)
    start, cpu = time.time(), _cpu_seconds()
    code = main(argv)
    _sync(device)
    print("\nRESULT " + json.dumps({"start": start, "end": time.time(), "cpu_s": _cpu_seconds() - cpu, "code": code,
                                    "threads": torch.get_num_threads()}))


def child_forward(media: str, spec: str, folder: str, batch: int, frames: int, device: str, workers: int) -> None:
    """The encoder's own rate: every input decoded (and for videos transformed) first (by
    ``workers`` threads, 0: in this one; not timed), then the batches through the tower on
    ``device``, as precompute calls it (a batch of clips stacked and copied there, the
    embeddings back)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    _preload(device)

    def decode_all(fn, items):
        if not workers:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(fn, items))

    if media == "images":
        from vlr_plugins.precompute.images import _open_rgb, list_images
        from vlr_plugins.specs import load_image_encoder

        loading = time.time()
        encoder = load_image_encoder(spec, setting="--encoder", device=torch.device(device))
        _sync(device)
        load_s = time.time() - loading
        inputs = decode_all(_open_rgb, [p for _, p in list_images(folder)])

        def encode(batch_inputs):
            return encoder(batch_inputs)  # the processor here, the embeddings back on the CPU
    else:
        from vlr_plugins.data.video import sample_frames, video_transform
        from vlr_plugins.precompute.video_encoders import tower_geometry
        from vlr_plugins.precompute.video_sources import list_videos
        from vlr_plugins.specs import load_video_encoder

        loading = time.time()
        encoder = load_video_encoder(spec, setting="--encoder", device=device)
        _sync(device)
        load_s = time.time() - loading
        transform = video_transform(False, *tower_geometry(encoder, spec))
        inputs = decode_all(lambda v: transform(sample_frames(v.path, frames, "middle", backend="pyav")),
                            list_videos(folder))

        def encode(batch_inputs):
            with torch.inference_mode():
                return encoder.encode_video(torch.stack(batch_inputs).to(device)).cpu()
    encode(inputs[:batch])  # warm-up, not timed
    _sync(device)
    start, cpu = time.time(), _cpu_seconds()
    for i in range(0, len(inputs), batch):
        encode(inputs[i:i + batch])
    _sync(device)
    print("\nRESULT " + json.dumps({"start": start, "end": time.time(), "cpu_s": _cpu_seconds() - cpu, "code": 0,
                                    "threads": torch.get_num_threads(), "load_s": load_s}))


# ---------------------------------------------------------------- measurements (parent)


def _result(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT "):])


def run_together(commands: list[tuple[list[str], int]], tmp: Path, timeout: float = 1800,
                 device: str = "cpu") -> dict:
    """Start every ``(argv, threads)`` process, let them import, start them together; the wall
    time from the start signal to the last one's end, and the CPU seconds they used meanwhile."""
    flag = Path(tempfile.mkdtemp(dir=tmp))
    procs = []
    for k, (argv, threads) in enumerate(commands):
        cmd = [sys.executable, __file__, "--child-command", str(flag / f"ready{k}"), str(flag / "go"), device, *argv]
        with open(flag / f"out{k}", "w") as out, open(flag / f"err{k}", "w") as err:  # files: no pipe fills up
            procs.append(subprocess.Popen(cmd, stdout=out, stderr=err, env=_env(threads, device), cwd=tmp))
    deadline = time.time() + timeout
    while not all((flag / f"ready{k}").exists() for k in range(len(procs))):
        if any(p.poll() is not None for p in procs) or time.time() > deadline:
            break
        time.sleep(0.01)
    load = os.getloadavg()[0]
    (flag / "go").touch()
    results = []
    for k, p in enumerate(procs):
        p.wait(timeout=max(1.0, deadline - time.time()))
        out, err = ((flag / f"{name}{k}").read_text() for name in ("out", "err"))
        if p.returncode != 0 or "RESULT " not in out:
            raise SystemExit(f"a measured process failed (exit {p.returncode}):\n{out[-2000:]}\n{err[-4000:]}")
        results.append(_result(out))
    if any(r["code"] != 0 for r in results):
        raise SystemExit(f"vlr exited {[r['code'] for r in results]}: {results}")
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {"wall_s": wall, "cpu_s": sum(r["cpu_s"] for r in results), "cores": sum(r["cpu_s"] for r in results) / wall,
            "threads": [r["threads"] for r in results], "load": (load + os.getloadavg()[0]) / 2}


def run_forward(media: str, spec: str, folder: Path, batch: int, frames: int, threads: int, tmp: Path,
                device: str = "cpu", workers: int | None = None) -> dict:
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--child-forward", media, spec, str(folder), str(batch),
                          str(frames), device, str(workers or 0)], capture_output=True, text=True,
                         env=_env(threads, device), cwd=tmp)
    if out.returncode != 0:
        raise SystemExit(f"the forward measurement failed:\n{out.stderr[-4000:]}")
    r = _result(out.stdout)
    wall = r["end"] - r["start"]
    return {"wall_s": wall, "cpu_s": r["cpu_s"], "cores": r["cpu_s"] / wall, "threads": [r["threads"]],
            "load": (load + os.getloadavg()[0]) / 2, "encoder_load_s": r["load_s"]}


def _store_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


class Precompute:
    """The inputs and tower of one medium, and the command lines that encode them."""

    def __init__(self, media: str, size: Size, tmp: Path, device: str = "cpu", workers: int | None = None) -> None:
        self.media, self.tmp, self.device, self.workers = media, tmp, device, workers
        if media == "images":
            self.folder, self.n, self.batch = tmp / "images", size.images, size.image_batch
            write_images(self.folder, self.n, size.distinct)
            write_blip(tmp / "blip", size)
            self.spec, self.frames = f"blip:{tmp / 'blip'}", 0
        else:
            self.folder, self.n, self.batch = tmp / "videos", size.videos, size.video_batch
            write_videos(self.folder, self.n, size.clip_seconds, size.distinct)
            write_tower(tmp / "tower.yaml", size)
            self.spec, self.frames = str(tmp / "tower.yaml"), size.frames
        self.runs = 0

    def argv(self, out: Path, *more: str) -> list[str]:
        frames = ["--frames", str(self.frames)] if self.media == "videos" else []
        return ["precompute", f"--{self.media}", str(self.folder), "--encoder", self.spec, *frames,
                "--batch-size", str(self.batch), "--device", self.device, "--out", str(out), *more]

    def out(self) -> Path:
        self.runs += 1
        return self.tmp.parent / "stores" / f"{self.media}-{self.runs}"

    def forward(self, threads: int = 1) -> dict:
        return run_forward(self.media, self.spec, self.folder, self.batch, self.frames, threads, self.tmp,
                           self.device, self.workers)

    def command(self, threads: int, *more: str) -> dict:
        out = self.out()
        result = run_together([(self.argv(out, *more), threads)], self.tmp, device=self.device)
        result["store"] = out
        return result

    def shards(self, count: int = 2) -> dict:
        out = self.out()
        result = run_together([(self.argv(out, "--workers", "0", "--shard-index", str(i), "--shard-count",
                                          str(count)), 1) for i in range(count)], self.tmp)
        result["store"] = out
        return result


def measure_rounds(methods: dict, rounds: int, label: str) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {name: [] for name in methods}
    for r in range(rounds):
        for name in (list(methods) if r % 2 == 0 else list(reversed(methods))):
            result = methods[name]()
            runs[name].append(result)
            print(f"  {label} round {r + 1}: {name:<32} {result['wall_s']:7.2f} s, {result['cores']:.2f} cores "
                  f"busy, load {result['load']:.1f}", file=sys.stderr, flush=True)
    return runs


def summarise(runs: dict[str, list[dict]], items: int, baseline: str) -> list[dict]:
    """Per method: median items/s, ratio of medians to ``baseline``, ratios within rounds."""
    rate = {m: [items / r["wall_s"] for r in rs] for m, rs in runs.items()}
    rows = []
    for m, rs in runs.items():
        rows.append({"method": m, "items_per_s": statistics.median(rate[m]),
                     "over_baseline": statistics.median(rate[m]) / statistics.median(rate[baseline]),
                     "paired": [a / b for a, b in zip(rate[m], rate[baseline])],
                     "wall_s": [r["wall_s"] for r in rs], "cores": statistics.median(r["cores"] for r in rs),
                     "threads": rs[0]["threads"], "load": statistics.median(r["load"] for r in rs),
                     **({"identical": all(r["identical"] for r in rs)} if "identical" in rs[0] else {}),
                     **({"encoder_load_s": statistics.median(r["encoder_load_s"] for r in rs)}
                        if "encoder_load_s" in rs[0] else {})})
    return rows


def part_pipeline(data: dict[str, Precompute], rounds: int) -> dict:
    tables = {}
    for media, p in data.items():
        workers = ["--workers", str(p.workers)] if p.workers is not None else []
        methods = {"encoder forward, pre-decoded": lambda p=p: p.forward(1),
                   "vlr precompute": lambda p=p, w=workers: p.command(1, *w)}
        runs = measure_rounds(methods, rounds, f"pipeline/{media}")
        for rs in runs.values():
            for r in rs:
                r.pop("store", None)
        rows = summarise(runs, p.n, "encoder forward, pre-decoded")
        load_s = rows[0]["encoder_load_s"]  # the command loads its tower inside the timed span
        rows[1]["over_baseline_less_load"] = (p.n / (statistics.median(rows[1]["wall_s"]) - load_s)
                                              / rows[0]["items_per_s"])
        tables[media] = rows
    return tables


def part_shards(data: dict[str, Precompute], rounds: int) -> dict:
    tables = {}
    for media, p in data.items():
        reference: dict[str, Path] = {}

        def one_thread(p=p):
            r = p.command(1, "--workers", "0")
            reference.setdefault("store", r["store"])
            return r

        methods = {"1 process, 1 thread": one_thread, "2 shards, 1 thread each": lambda p=p: p.shards(2),
                   "1 process, 2 threads": lambda p=p: p.command(2)}
        runs = measure_rounds(methods, rounds, f"shards/{media}")
        expected = _store_files(reference["store"])
        for r in runs["2 shards, 1 thread each"]:
            r["identical"] = _store_files(r["store"]) == expected
        for rs in runs.values():
            for r in rs:
                r.pop("store", None)
        tables[media] = summarise(runs, p.n, "1 process, 1 thread")
    return tables


def step_times(logged: list[float], window: int = 10) -> list[float]:
    """Each step's own time from MMEngine's logged ``time``, the mean over the last ``window``
    steps (``LogProcessor``'s default window, which ``vlr train`` keeps): the window's sum
    ``n_k * logged_k`` less the previous window's, plus the step that left it."""
    sums = [min(k + 1, window) * m for k, m in enumerate(logged)]
    steps: list[float] = []
    for k, s in enumerate(sums):
        steps.append(s - (sums[k - 1] if k else 0.0) + (steps[k - window] if k >= window else 0.0))
    return steps


def run_training(paths: dict[str, str], work: Path, processes: int, threads: int) -> dict:
    argv = [sys.executable, *_CLI, "train", paths["recipe"], "--train", paths["train"], "--image-embeddings",
            paths["store"], "--work-dir", str(work)]
    if processes > 1:
        argv[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        argv.append("--launcher")
        argv.append("pytorch")
    load, before, start = os.getloadavg()[0], _cpu_seconds(), time.time()
    out = subprocess.run(argv, capture_output=True, text=True, env=_env(threads), cwd=work.parent)
    wall = time.time() - start
    if out.returncode != 0:
        raise SystemExit(f"vlr train failed (exit {out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    (scalars,) = work.glob("*/vis_data/scalars.json")
    rows = [json.loads(line) for line in scalars.read_text().splitlines() if '"loss"' in line]
    steps = step_times([row["time"] for row in rows])[WARMUP_STEPS:]
    return {"wall_s": statistics.median(steps), "command_s": wall, "losses": [row["loss"] for row in rows],
            "steps": len(rows), "cores": (_cpu_seconds() - before) / wall, "threads": [threads] * processes,
            "load": (load + os.getloadavg()[0]) / 2}


def part_train(size: Size, tmp: Path, rounds: int) -> list[dict]:
    paths = write_training(tmp / "world", size)
    count = iter(range(10**6))

    def train(processes: int, threads: int):
        return lambda: run_training(paths, tmp / f"work{next(count)}", processes, threads)

    methods = {"1 process, 1 thread": train(1, 1), "torchrun, 2 processes x 1 thread": train(2, 1),
               "1 process, 2 threads": train(1, 2)}
    runs = measure_rounds(methods, rounds, "train")
    rows = summarise(runs, size.train_batch, "1 process, 1 thread")
    reference = runs["1 process, 1 thread"]
    for row, rs in zip(rows, runs.values()):
        row["command_s"] = [r["command_s"] for r in rs]
        row["steps"] = rs[0]["steps"]
        row["loss_diff"] = max(max(abs(a - b) for a, b in zip(r["losses"], ref["losses"]))
                               for r, ref in zip(rs, reference))
    return rows


# ---------------------------------------------------------------- report


def print_table(title: str, rows: list[dict], unit: str, seconds: str, goal: str | None) -> None:
    print(f"\n{title}\n")
    extra = "identical store" if any("identical" in r for r in rows) else \
        ("whole command (s)" if any("command_s" in r for r in rows) else None)
    head = (f"| method | {unit} | x baseline | per round | {seconds} | cores busy | load avg |"
            + (f" {extra} |" if extra else ""))
    print(head)
    print("|" + "---|" * head.count(" |"))
    for r in rows:
        line = (f"| {r['method']} | {r['items_per_s']:.2f} | {r['over_baseline']:.2f} | "
                f"{', '.join(f'{x:.2f}' for x in r['paired'])} | {statistics.median(r['wall_s']):.3f} | "
                f"{r['cores']:.2f} | {r['load']:.1f} |")
        if extra == "identical store":
            line += f" {'yes' if r.get('identical') else '-' if 'identical' not in r else 'NO'} |"
        elif extra:
            line += f" {statistics.median(r['command_s']):.1f} |"
        print(line)
    if goal:
        print(f"\n{goal}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny towers and inputs, one round: a smoke run")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--media", default=",".join(MEDIA), help="images, videos or both (pipeline and shards)")
    parser.add_argument("--rounds", type=int, default=None, help="alternated rounds (default 3; --quick 1)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the towers run (cuda: the pipeline part only, GPU sizes unless --quick)")
    parser.add_argument("--workers", type=int, default=None,
                        help="vlr precompute --workers in the pipeline part, and the threads that pre-decode "
                             "for the forward (default: the command's 4 and one thread; --device cuda 12)")
    parser.add_argument("--json", metavar="PATH", help="write every measurement here")
    parser.add_argument("--child-command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.add_argument("--child-forward", nargs=7, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_command:
        ready, go, device, *argv = args.child_command
        child_command(ready, go, device, argv)
        return
    if args.child_forward:
        media, spec, folder, batch, frames, device, workers = args.child_forward
        child_forward(media, spec, folder, int(batch), int(frames), device, int(workers))
        return
    parts = [p for p in args.parts.split(",") if p]
    media = [m for m in args.media.split(",") if m]
    for name, given, allowed in (("--parts", parts, PARTS), ("--media", media, MEDIA)):
        unknown = sorted(set(given) - set(allowed))
        if unknown or not given:
            parser.error(f"{name}: expected a comma-separated list of {', '.join(allowed)}, found {unknown or given}")
    if args.device == "cuda" and parts != ["pipeline"]:
        parser.error(f"--device cuda measures the pipeline part only (--parts pipeline), found {args.parts!r}")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
    if args.workers is not None and args.workers < 0:
        parser.error(f"--workers: expected a number >= 0, found {args.workers}")
    size_name = "quick" if args.quick else "gpu" if args.device == "cuda" else "default"
    size = SIZES[size_name]
    workers = args.workers if args.workers is not None else size.workers
    rounds = args.rounds or (1 if args.quick else 3)
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report: dict = {"machine": cpu_description(), "started": started, "load_start": load_start,
                    "size": size_name, "sizes": asdict(size), "rounds": rounds, "device": args.device,
                    "workers": workers}
    if "videos" in media and importlib.util.find_spec("av") is None:
        report["not_run"] = {"videos": "PyAV (av) is not installed: no clip can be written or decoded"}
        print(f"scaling: videos not measured: {report['not_run']['videos']}", file=sys.stderr)
        media.remove("videos")
        if not media:
            raise SystemExit("error: --media videos: PyAV (av) is not installed")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "stores").mkdir()
        data = {}
        if {"pipeline", "shards"} & set(parts):
            for m in media:
                (tmp / m).mkdir()
                data[m] = Precompute(m, size, tmp / m, args.device, workers)
        if "pipeline" in parts:
            report["pipeline"] = {}
            for m, p in data.items():  # saved after each medium: a capped run keeps what it measured
                report["pipeline"].update(part_pipeline({m: p}, rounds))
                write_json(args.json, report)
        if "shards" in parts:
            report["shards"] = part_shards(data, rounds)
        if "train" in parts:
            report["train"] = part_train(size, tmp, rounds)
    report["load_end"] = os.getloadavg()
    gpu = ""
    if args.device == "cuda":  # the name after the clips' writers were forked (it creates a CUDA context)
        import torch

        report["gpu"] = torch.cuda.get_device_name(0)
        gpu = f"GPU: {report['gpu']}, torch {torch.__version__}; "
    print(f"\n{gpu}{describe()}; {os.cpu_count()} cores; started {started}; load average (1, 5, 15 min) "
          f"{', '.join(f'{x:.2f}' for x in load_start)} at the start, "
          f"{', '.join(f'{x:.2f}' for x in report['load_end'])} at the end; size "
          f"{report['size']}, medians of {rounds} alternated round(s)")
    where = "" if args.device == "cpu" and workers is None else \
        f", on {args.device}, {'the default' if workers is None else workers} decoding workers"
    for m, rows in report.get("pipeline", {}).items():
        n, what = (size.images, "images") if m == "images" else (size.videos, f"videos of {size.frames} frames")
        batch = size.image_batch if m == "images" else size.video_batch
        print_table(f"pipeline, {m}: {n} {what}, batch {batch}, 1 torch thread{where}; loading the tower took "
                    f"{rows[0]['encoder_load_s']:.2f} s (in the command's time, not in the forward's)", rows,
                    f"{m}/s", "median s", "goal: vlr precompute >= 0.9x the encoder's forward rate; less the "
                    f"tower's loading: {rows[1]['over_baseline_less_load']:.2f}x")
    for m, rows in report.get("shards", {}).items():
        print_table(f"shards, {m} (1-thread rows: --workers 0; 2 threads: the default decoding)", rows, f"{m}/s",
                    "median s", "goal: 2 shards >= 1.8x 1 process of 1 thread")
    if "train" in report:
        print_table(f"train: paragraph/c5, global batch {size.train_batch}, {size.samples // size.train_batch} "
                    f"steps (step: median of the steps after {WARMUP_STEPS}); max |loss - 1 process's| "
                    f"{max(r['loss_diff'] for r in report['train']):.2g}", report["train"], "samples/s", "step (s)",
                    None)
    write_json(args.json, report)


def write_json(path: str | None, report: dict) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, default=str)


if __name__ == "__main__":
    main()
