"""Benchmark: one optimisation step of the paragraph recipe (C5), text-only against frozen ViT.

    python benchmarks/train_step.py                  # CPU, reduced shapes; ~5 min on 2 loaded cores
    python benchmarks/train_step.py --device cuda --json out.json   # BLIP-base shapes on a GPU

The paper's premise: with the image side frozen, its embeddings can be computed once and
read from a store, so a step trains the text encoder only. Each step here is C5's: a batch
of B images, each with a caption (<= 77 tokens) and a paragraph (<= 128 tokens), BLIP's
text encoder + ``text_proj`` trained with multi-positive InfoNCE (K = 2) by AdamW. Methods:

* ``text_one_block`` -- image embeddings read from an ``EmbeddingStore`` (written here
  first) by a DataLoader, texts tokenised ahead and padded by the package's collate
  (``vlr_text_views_collate``: every text of the batch in one block, to its longest), and
  the step of ``vlr train``'s model (``TextOnlyRetrievalModel``) with ``length_blocks: 1``:
  the batch's texts encoded in that one block, as ``vlr train`` did before length grouping.
* ``text`` -- the same with the ``length_blocks`` of C5's recipe (``train.length_blocks``,
  2): what ``vlr train paragraph/c5`` does now. The model encodes the batch's texts in
  blocks of similar length, each cut to its own longest
  (``vlr_plugins.text.encode_in_length_blocks``), with captions of 12-25 tokens and
  paragraphs of 100-128 in one batch.
* ``frozen_vit`` -- what LAVIS and ``open_clip --lock-image`` do: images (already decoded,
  3 x 224 x 224, from memory: no JPEG decoding is counted, which flatters this method)
  through BLIP's frozen ViT and ``vision_proj`` under ``no_grad`` every step, then the
  ``text_one_block`` text step (LAVIS and open_clip pad a batch's texts into one block).

Shapes: ``--shapes base`` is BLIP-base (text: BERT-base, 12 layers of width 768; ViT-B/16
at 224 px, 197 tokens); ``--shapes reduced`` (the CPU default) keeps the token counts,
the image size and the patch size but makes both towers 4 layers of width 256, so that
the ratio of their costs stays close to BLIP-base's while a CPU step takes seconds.
Random weights (nothing downloaded) and random token ids: the cost of a step does not
depend on the values.

Each method runs in a fresh process (CPU) for its peak memory: the process's peak
resident set during the timed steps minus its resident set before them; on a GPU the
allocator's peak. Methods alternate over rounds, ratios are between medians. Reported:
samples (images) per second, seconds per step spent waiting for the DataLoader, peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SHAPES = {
    "base": {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072},
    "reduced": {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024},
}
VOCAB = 30524  # BLIP's BERT vocabulary
EMBED_DIM = 256
IMAGE_SIZE, PATCH = 224, 16
CAPTION_TOKENS, PARAGRAPH_TOKENS = (12, 25), (100, 128)  # within C5's budgets of 77 and 128
METHODS = ("text_one_block", "text", "frozen_vit")


# ---------------------------------------------------------------- one measurement (child)


def _peak_rss_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


class Samples:
    """Item i: its image embedding (read from the store) or its image, and the token ids
    of its caption and paragraph ([CLS] ... [SEP], lengths drawn once, seeded)."""

    def __init__(self, n: int, store_path: str | None, images: bool, seed: int = 0) -> None:
        import torch

        g = torch.Generator().manual_seed(seed)
        self.ids = [f"img{i}" for i in range(n)]
        self.texts = []
        for _ in range(n):
            lengths = [int(torch.randint(lo, hi + 1, (), generator=g)) for lo, hi in (CAPTION_TOKENS, PARAGRAPH_TOKENS)]
            self.texts.append([[101] + torch.randint(1000, VOCAB, (k - 2,), generator=g).tolist() + [102]
                               for k in lengths])
        self.store_path, self.store = store_path, None
        self.images = torch.randint(0, 256, (8, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.uint8,
                                    generator=g) if images else None

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        import torch

        item = {"id": self.ids[i], "pos": self.texts[i], "neg": []}
        if self.images is not None:  # a decoded image, normalised as BLIP's processor does
            image = self.images[i % len(self.images)].float().div_(255)
            item["image"] = (image - 0.45) / 0.27
            item["image_emb"] = torch.zeros(0)
        else:
            if self.store is None:
                from vlr_plugins.data.embedding_store import EmbeddingStore

                self.store = EmbeddingStore(self.store_path)
            item["image_emb"] = self.store.get([self.ids[i]])[0]
        return item


def collate(batch: list[dict]) -> dict:
    import torch

    from vlr_plugins.integrations.mmengine.dataset import vlr_text_views_collate

    out = vlr_text_views_collate(batch)
    if "image" in batch[0]:
        out["images"] = torch.stack([b["image"] for b in batch])
    return out


def recipe_length_blocks() -> int:
    """C5's ``train.length_blocks``: how ``vlr train paragraph/c5`` encodes a batch's texts."""
    from vlr_plugins.recipe import load_recipe

    return load_recipe("paragraph/c5").train.length_blocks


def build(shape: str, device, length_blocks: int):
    """``vlr train``'s model (BLIP's text encoder + multi-positive InfoNCE, encoding the
    batch's texts in ``length_blocks`` blocks), the frozen ViT + ``vision_proj``, AdamW."""
    import torch
    from transformers import BlipVisionConfig, BlipVisionModel

    from vlr_plugins.integrations.mmengine.model import TextOnlyRetrievalModel
    from vlr_plugins.losses import MultiPositiveInfoNCELoss
    from vlr_plugins.text.blip_text_encoder import BlipTextEncoder

    torch.manual_seed(0)
    text = BlipTextEncoder(config=dict(vocab_size=VOCAB, max_position_embeddings=512, **SHAPES[shape]),
                           embed_dim=EMBED_DIM)
    model = TextOnlyRetrievalModel(text_encoder=text, loss=MultiPositiveInfoNCELoss(),
                                   length_blocks=length_blocks).to(device).train()
    vit = BlipVisionModel(BlipVisionConfig(image_size=IMAGE_SIZE, patch_size=PATCH, **SHAPES[shape])).to(device).eval()
    vision_proj = torch.nn.Linear(SHAPES[shape]["hidden_size"], EMBED_DIM).to(device).eval()
    for p in list(vit.parameters()) + list(vision_proj.parameters()):
        p.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    return model, vit, vision_proj, optimizer


def child(method: str, shape: str, batch: int, steps: int, warmup: int, workers: int, device_name: str,
          store_path: str) -> None:
    import torch
    from torch.utils.data import DataLoader

    if os.environ.get("VLR_BENCH_THREADS"):
        torch.set_num_threads(int(os.environ["VLR_BENCH_THREADS"]))
    device = torch.device(device_name)
    model, vit, vision_proj, optimizer = build(shape, device, recipe_length_blocks() if method == "text" else 1)
    data = Samples(batch * (steps + warmup), store_path, images=method == "frozen_vit")
    loader = DataLoader(data, batch_size=batch, shuffle=False, num_workers=workers, collate_fn=collate,
                        persistent_workers=workers > 0, pin_memory=device.type == "cuda", drop_last=True)
    cuda = device.type == "cuda"
    waits, times = [], []
    it = iter(loader)
    for step in range(steps + warmup):
        if step == warmup:
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            else:
                reset, base = _peak_rss_reset(), _status_bytes("VmRSS:")
        start = time.perf_counter()
        b = next(it)
        got = time.perf_counter()
        if method == "frozen_vit":
            with torch.no_grad():
                pooled = vit(pixel_values=b["images"].to(device, non_blocking=True)).last_hidden_state[:, 0]
                image_emb = vision_proj(pooled)
        else:
            image_emb = b["image_emb"].to(device, non_blocking=True)
        loss = model(image_emb, b["input_ids"].to(device), b["attention_mask"].to(device),
                     b["text_owner"].to(device), mode="loss")["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        end = time.perf_counter()
        if step >= warmup:
            waits.append(got - start)
            times.append(end - start)
    if cuda:
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = (_status_bytes("VmHWM:") if reset else 0) - base
    print(json.dumps({"samples_per_s": batch * len(times) / sum(times), "step_s": statistics.median(times),
                      "length_blocks": model.length_blocks,
                      "wait_s": statistics.median(waits), "wait_share": sum(waits) / sum(times),
                      "peak_extra_mib": max(0, peak) / 2**20, "threads": torch.get_num_threads(),
                      "loss": float(loss)}))


# ---------------------------------------------------------------- the table (parent)


def write_store(path: str, n: int) -> None:
    import torch

    from vlr_plugins.data.embedding_store import EmbeddingStoreWriter

    g = torch.Generator().manual_seed(1)
    with EmbeddingStoreWriter(path, dim=EMBED_DIM) as w:
        w.add([f"img{i}" for i in range(n)], torch.nn.functional.normalize(torch.randn(n, EMBED_DIM, generator=g), dim=1))


def measure(method: str, args, store_path: str) -> dict:
    load = os.getloadavg()[0]
    cmd = [sys.executable, __file__, "--child", method, args.shapes, str(args.batch), str(args.steps),
           str(args.warmup), str(args.workers), args.device, store_path]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["load"] = (load + os.getloadavg()[0]) / 2
    print(f"  {method:15s}: {result['samples_per_s']:7.2f} samples/s, step {result['step_s']:.3f} s "
          f"(waiting for data {result['wait_s'] * 1e3:.1f} ms), {result['peak_extra_mib']:,.0f} MiB, "
          f"load {result['load']:.1f}", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--shapes", choices=tuple(SHAPES), default=None,
                        help="default: reduced on CPU, base on a GPU")
    parser.add_argument("--batch", type=int, default=None, help="images per step (default 8 on CPU, 128 on a GPU)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 4 on CPU, 20 on a GPU)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="DataLoader workers")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds of the methods")
    parser.add_argument("--threads", type=int, default=None, help="torch threads of each measurement (CPU)")
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", nargs=8, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        method, shape, batch, steps, warmup, workers, device, store = args.child
        child(method, shape, int(batch), int(steps), int(warmup), int(workers), device, store)
        return
    gpu = args.device == "cuda"
    args.shapes = args.shapes or ("base" if gpu else "reduced")
    args.batch = args.batch or (128 if gpu else 8)
    args.steps = args.steps or (20 if gpu else 4)
    if args.threads:
        os.environ["VLR_BENCH_THREADS"] = str(args.threads)
    runs: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        write_store(store, args.batch * (args.steps + args.warmup))
        for _ in range(args.rounds):
            for method in METHODS:
                runs.setdefault(method, []).append(measure(method, args, store))
    records = []
    median = {m: statistics.median(r["samples_per_s"] for r in rs) for m, rs in runs.items()}
    for method, results in runs.items():
        records.append({"method": method, "length_blocks": results[0]["length_blocks"], "runs": len(results),
                        "samples_per_s": median[method],
                        "over_frozen_vit": median[method] / median["frozen_vit"],
                        "step_s": statistics.median(r["step_s"] for r in results),
                        "wait_s": statistics.median(r["wait_s"] for r in results),
                        "wait_share": statistics.median(r["wait_share"] for r in results),
                        "peak_extra_mib": max(r["peak_extra_mib"] for r in results),
                        "load": statistics.median(r["load"] for r in results)})
    where = f"{os.cpu_count()} CPU cores, torch threads {runs['text'][0]['threads']}" if not gpu else _gpu_name()
    print(f"\n{where}; shapes {args.shapes}, {args.batch} images x (caption + paragraph) per step, "
          f"{args.steps} timed steps after {args.warmup}, {args.workers} DataLoader worker(s); medians of "
          f"{args.rounds} alternated rounds\n")
    print("| method | length_blocks | samples/s | x frozen_vit | step (s) | waiting for data (ms / step) "
          "| share of step | peak extra memory (MiB) | load avg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['method']} | {r['length_blocks']} | {r['samples_per_s']:.2f} | {r['over_frozen_vit']:.2f} | {r['step_s']:.3f} | "
              f"{r['wait_s'] * 1e3:.1f} | {r['wait_share']:.1%} | {r['peak_extra_mib']:,.0f} | {r['load']:.1f} |")
    paired = paired_ratios(runs)
    print("\nPaired (per round, the methods measured back to back): " + "; ".join(
        f"{name} median {statistics.median(rs):.2f} (rounds: {', '.join(f'{r:.2f}' for r in rs)})"
        for name, rs in paired.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": where, "shapes": args.shapes, "batch": args.batch, "records": records,
                       "paired_ratios": paired}, f, indent=1)


def paired_ratios(runs: dict[str, list[dict]]) -> dict[str, list[float]]:
    """Throughput ratios within each round, where the methods ran minutes apart at most:
    steadier than ratios of medians on a machine whose load drifts."""
    pairs = (("text", "text_one_block"), ("text", "frozen_vit"), ("text_one_block", "frozen_vit"))
    return {f"{a} / {b}": [x["samples_per_s"] / y["samples_per_s"] for x, y in zip(runs[a], runs[b])]
            for a, b in pairs}


def _gpu_name() -> str:
    import torch

    return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"


if __name__ == "__main__":
    main()
