#!/usr/bin/env python3
"""Write recipes/lavis/ (LAVIS run configs) from recipes/paragraph/ (the source of truth).

    python scripts/make_lavis_recipes.py          # rewrite recipes/lavis/
    python scripts/make_lavis_recipes.py --check  # exit 1 if recipes/lavis/ is stale

LAVIS configs have no inheritance, so each run config is written out whole; the tests
check that every one still says what its paragraph recipe says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from vlr_plugins.recipe import list_recipes, load_recipe  # noqa: E402


def _views(views) -> list[dict]:
    out = []
    for v in views:
        d = {"field": v.field, "max_tokens": v.max_tokens}
        if v.take != "all":
            d |= {"take": v.take, "count": v.count}
        out.append(d)
    return out


def lavis_run_config(name: str) -> str:
    r = load_recipe(name)
    t = r.train
    cfg = {
        "vlr": {"recipe": name, "name": r.name, "description": r.description},
        "model": {
            "arch": "blip_retrieval_textonly",
            "model_type": "base_coco",  # LAVIS' BLIP ViT-B retrieval weights fine-tuned on COCO
            "load_finetuned": True,
            "loss": dict(r.loss),
            **({"length_blocks": t.length_blocks} if t.length_blocks != 1 else {}),
        },
        "datasets": {
            "vlr_paragraph": {
                "build_info": {
                    "annotations": {"train": {"storage": "???"}},
                    "image_embeddings": {"storage": "???"},
                },
                "text_views": {"positives": _views(r.text_views.positives),
                               "negatives": _views(r.text_views.negatives)},
                "fraction": r.data.fraction,
                "seed": r.data.seed,
            },
        },
        "run": {
            "task": "vlr_retrieval",
            "lr_sched": "linear_warmup_cosine_lr",
            "init_lr": t.lr,
            "min_lr": t.min_lr,
            "warmup_lr": t.lr * t.warmup_start_factor,
            "warmup_steps": t.warmup_steps,
            "weight_decay": t.weight_decay,
            "beta2": t.betas[1],
            "max_epoch": t.epochs,
            "batch_size_train": t.batch_size,
            "batch_size_eval": 256,
            "num_workers": t.num_workers,
            "k_test": 256,
            "rerank": False,
            "seed": t.seed,
            "output_dir": f"output/vlr/{name}",
            "amp": t.amp,
            "resume_ckpt_path": None,
            "evaluate": False,
            "train_splits": ["train"],
            "valid_splits": [],
            "test_splits": [],
            "device": "cuda",
            "world_size": 1,
            "dist_url": "env://",
            "distributed": True,
            "use_dist_eval_sampler": False,
        },
    }
    src = Path(r.source).resolve().relative_to(ROOT) if r.source else name
    head = (
        f"# LAVIS run config for the paragraph-supervision recipe {name} ({r.name}).\n"
        f"# Generated from {src} by scripts/make_lavis_recipes.py: edit the recipe, not this file.\n"
        f"#   vlr lavis-train --cfg-path lavis/{name.split('/', 1)[1]} --train SAMPLES.jsonl "
        f"--image-embeddings STORE\n"
        "# run.batch_size_train is per GPU in LAVIS: the paper's 256 is the global batch (the\n"
        "# loss gathers over GPUs), so on N GPUs pass --options run.batch_size_train=256/N.\n"
        "# To evaluate after training, add e.g. vlr_coco_karpathy (annotations.test.storage,\n"
        "# item_embeddings.storage) under datasets and test_splits: [test] under run.\n"
    )
    return head + yaml.safe_dump(cfg, sort_keys=False, width=100)


def targets() -> dict[Path, str]:
    out = {}
    for name in list_recipes():
        if name.startswith("paragraph/"):
            rel = name.split("/", 1)[1]
            out[ROOT / "recipes" / "lavis" / f"{rel}.yaml"] = lavis_run_config(name)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only report whether recipes/lavis is up to date")
    args = p.parse_args()
    want = targets()
    stale = [path for path, text in want.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)}")
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(want[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
