"""recipes/lavis (LAVIS run configs) say what the paragraph recipes say. Runs without LAVIS."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vlr_plugins.recipe import list_recipes, load_recipe

ROOT = Path(__file__).resolve().parents[3]


def test_recipes_lavis_are_up_to_date_with_the_generator():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_lavis_recipes.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_lavis_run_config_matches_its_paragraph_recipe():
    lavis = {n: p for n, p in list_recipes().items() if n.startswith("lavis/")}
    names = {f"lavis/c{i}" for i in range(1, 11)} | {f"lavis/ablations/{a}{n}" for a in ("pos", "neg")
                                                    for n in (1, 3, 5)}
    names |= {f"lavis/ablations/data{f}" for f in (25, 50, 75, 100)}
    assert names <= set(lavis)
    for name, path in lavis.items():
        cfg = yaml.safe_load(path.read_text())
        r = load_recipe(cfg["vlr"]["recipe"])
        assert cfg["vlr"]["recipe"] == "paragraph/" + name.split("/", 1)[1]
        assert cfg["model"]["arch"] == "blip_retrieval_textonly" and cfg["model"]["loss"] == r.loss
        assert cfg["model"].get("length_blocks", 1) == r.train.length_blocks
        ds = cfg["datasets"]["vlr_paragraph"]
        for kind in ("positives", "negatives"):
            views = [(v["field"], v["max_tokens"], v.get("take", "all"), v.get("count"))
                     for v in ds["text_views"][kind]]
            assert views == [(v.field, v.max_tokens, v.take, v.count) for v in getattr(r.text_views, kind)]
        assert (ds["fraction"], ds["seed"]) == (r.data.fraction, r.data.seed)
        run = cfg["run"]
        assert run["task"] == "vlr_retrieval"
        assert (run["init_lr"], run["weight_decay"], run["max_epoch"], run["batch_size_train"],
                run["warmup_steps"]) == (r.train.lr, r.train.weight_decay, r.train.epochs, r.train.batch_size,
                                         r.train.warmup_steps)


@pytest.mark.skipif(importlib.util.find_spec("lavis") is not None, reason="LAVIS is installed here")
def test_lavis_commands_say_where_lavis_lives_when_it_is_missing():
    from vlr_plugins.cli import main

    for cmd in (["lavis-train", "--cfg-path", "lavis/c5"], ["lavis-eval", "--cfg-path", "lavis/c5",
                                                              "--checkpoint", "x.pth"]):
        proc = subprocess.run([sys.executable, "-m", "vlr_plugins.cli", *cmd], capture_output=True, text=True)
        assert proc.returncode == 2
        assert "salesforce-lavis" in proc.stderr and "docs/lavis.md" in proc.stderr
    assert main(["list", "recipes"]) == 0
