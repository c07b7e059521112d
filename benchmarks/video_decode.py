"""Benchmark: sampled video frames per second, decoded per item vs already in memory.

    python benchmarks/video_decode.py            # 10 s and 60 s clips; ~15 min on 2 busy cores
    python benchmarks/video_decode.py --quick    # 10 s clips, middle, 0 and 2 workers; ~2 min

Writes synthetic H.264 clips (320x240, 30 fps, CRF 23, a keyframe every 2 s, B-frames:
what web video is like) with PyAV, then runs one data-loader epoch per configuration. An
item is 16 frames of one clip, picked by ``middle`` (evaluation) or ``rand`` (training,
seeded by item so every method reads the same frames). Methods:

* ``memory``     -- the same frames indexed out of clips decoded beforehand: the floor,
  what the loader costs without decoding.
* ``pyav``       -- ``sample_frames(..., backend="pyav")``: packet index, seek, decode.
* ``torchcodec`` -- ``sample_frames(..., backend="torchcodec")`` (skipped where it cannot load).
* ``pyav-all``   -- decode every frame with PyAV, then pick 16, as UMT's PyAV reader does.

For each DataLoader worker count (0, 1, 2) it prints frames/s (sampled frames delivered per
second, best of ``--repeat`` epochs after a warm-up epoch with persistent workers) and
the ratio of the memory floor's rate to each method's, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch

from vlr_plugins.data.video import frame_indices, read_frames, sample_frames, video_info

SIZE = (240, 320)
FPS = 30
N_SAMPLES = 16


def write_clip(path: str, seconds: float, seed: int) -> None:
    """A moving gradient with a bouncing square and a little noise, as H.264 in MP4."""
    import av

    h, w = SIZE
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.options = {"crf": "23", "g": str(2 * FPS), "bf": "2", "preset": "veryfast"}
        for k in range(int(seconds * FPS)):
            frame = np.empty((h, w, 3), np.uint8)
            frame[..., 0] = (xx + 3 * k + seed * 40) % 256
            frame[..., 1] = (yy + 2 * k) % 256
            frame[..., 2] = ((xx + yy) // 2 + k) % 256
            x, y = (5 * k) % (w - 40), (3 * k) % (h - 40)
            frame[y:y + 40, x:x + 40] = 255
            frame = np.clip(frame.astype(np.int16) + rng.integers(-6, 7, frame.shape), 0, 255).astype(np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


class Clips(torch.utils.data.Dataset):
    """Item i: 16 frames of clip i (mod the clip count), by one method."""

    def __init__(self, paths: list[str], counts: list[int], items: int, method: str, strategy: str,
                 decoded: list[torch.Tensor] | None = None) -> None:
        self.paths, self.counts, self.items = paths, counts, items
        self.method, self.strategy, self.decoded = method, strategy, decoded

    def __len__(self) -> int:
        return self.items

    def indices(self, i: int) -> list[int]:
        c = i % len(self.paths)
        return frame_indices(self.counts[c], N_SAMPLES, self.strategy, seed=i)

    def __getitem__(self, i: int) -> torch.Tensor:
        c, idx = i % len(self.paths), self.indices(i)
        if self.method == "memory":
            return self.decoded[c][idx]
        if self.method == "pyav-all":
            import av
            from av.video.reformatter import VideoReformatter

            # a scaler of this clip's own: PyAV 18.1.1's per-thread one, inherited by a worker
            # forked after this process converted frames, hangs it (vlr_plugins.data.video._pyav)
            scaler = VideoReformatter()
            with av.open(self.paths[c]) as container:
                frames = [scaler.reformat(f, format="rgb24").to_ndarray() for f in container.decode(video=0)]
            return torch.from_numpy(np.stack([frames[j] for j in idx]))
        return sample_frames(self.paths[c], N_SAMPLES, self.strategy, seed=i, backend=self.method)


def run(dataset: Clips, workers: int, repeat: int) -> float:
    """Best frames/s over `repeat` epochs, after one warm-up epoch."""
    best = 0.0
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=workers,
                                         persistent_workers=workers > 0,
                                         worker_init_fn=(lambda _: torch.set_num_threads(1)) if workers else None)
    for epoch in range(repeat + 1):
        start = time.perf_counter()
        frames = sum(batch.shape[0] * batch.shape[1] for batch in loader)
        if epoch:
            best = max(best, frames / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="4 clips of 10 s, workers 0 and 2, one strategy")
    parser.add_argument("--repeat", type=int, default=2, help="timed epochs per configuration (best kept)")
    args = parser.parse_args()

    from vlr_plugins.data.video._torchcodec import torchcodec_decoder_class

    methods = ["memory", "pyav", "torchcodec", "pyav-all"]
    try:
        torchcodec_decoder_class()
    except ImportError as e:
        print(f"torchcodec skipped: {e}", file=sys.stderr)
        methods.remove("torchcodec")

    lengths = [10.0] if args.quick else [10.0, 60.0]
    strategies = ["middle"] if args.quick else ["middle", "rand"]
    worker_counts = [0, 2] if args.quick else [0, 1, 2]
    n_clips = 4
    print(f"machine: {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads in the main process, 1 per worker")
    print(f"clips: {n_clips} per length, {SIZE[1]}x{SIZE[0]}, {FPS} fps, H.264 CRF 23, keyframe every 2 s, "
          f"2 B-frames; items: {N_SAMPLES} frames each, batch 4")
    print()
    print("| clip length | strategy | workers | method | frames/s | memory rate / this rate |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as root:
        for seconds in lengths:
            paths = [os.path.join(root, f"clip{int(seconds)}_{i}.mp4") for i in range(n_clips)]
            for i, path in enumerate(paths):
                write_clip(path, seconds, seed=i)
            counts = [video_info(p).num_frames for p in paths]
            decoded = [read_frames(p) for p in paths]
            items = 16 if seconds <= 10 else 8
            for strategy in strategies:
                for workers in worker_counts:
                    rates = {}
                    for method in methods:
                        dataset = Clips(paths, counts, items, method, strategy, decoded if method == "memory" else None)
                        rates[method] = run(dataset, workers, args.repeat)
                        print(f"| {seconds:g} s | {strategy} | {workers} | {method} | {rates[method]:,.0f} | "
                              f"{rates['memory'] / rates[method]:,.1f} |", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
