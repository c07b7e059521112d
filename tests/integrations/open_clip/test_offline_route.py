"""docs/open_clip.md's "Trying it on a CPU, offline" runs as written: its files are saved and
its ``openclip-offline`` shell block runs verbatim in a fresh folder, in a subprocess, with
HF_HUB_OFFLINE=1 (nothing may be downloaded); then what each step wrote is there and is what
the next step read: the checkpoint, scored by ``vlr eval`` as ``open_clip:local-dir:FOLDER:CHECKPOINT``
(the numbers open_clip_train's validation gave), and exported with those weights."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _doc_route import route_blocks, run_verbatim

pytest.importorskip("open_clip_train")
pytest.importorskip("PIL")

DOC = Path(__file__).resolve().parents[3] / "docs" / "open_clip.md"


def blocks() -> tuple[dict[str, str], str]:
    return route_blocks(DOC, "openclip-offline")


def test_the_openclip_route_runs_verbatim_offline(tmp_path):
    files, route = blocks()
    assert {"make_pairs.py", "use_clip.py", "clip_images.py", "benchmarks.yaml"} <= set(files)
    for step in ("python -m vlr_plugins.integrations.open_clip.tiny", "vlr openclip-train --model local-dir:",
                 "--val-data", "python use_clip.py", "vlr precompute --images",
                 "vlr eval --model open_clip:local-dir:tiny-clip:logs/tiny/checkpoints/epoch_1.pt",
                 "vlr export open_clip:local-dir:tiny-clip:logs/tiny/checkpoints/epoch_1.pt exports/tiny-clip"):
        assert step in route, step
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    out = run_verbatim(route, work, tmp_path, OMP_NUM_THREADS="1")
    shown = f"\nstdout:\n{out.stdout[-6000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, shown
    assert (work / "tiny-clip" / "open_clip_config.json").is_file()
    assert (work / "logs" / "tiny" / "checkpoints" / "epoch_1.pt").is_file()
    # the run trained the vlr loss on both views (the launcher's summary line)
    assert "vlr: loss MultiPositiveInfoNCELoss" in out.stdout + out.stderr, shown
    assert "texts: caption[all]@77, positives[all]@77" in out.stdout + out.stderr, shown
    val = json.loads((work / "logs" / "tiny" / "checkpoints" / "results.jsonl").read_text().splitlines()[-1])
    printed = re.search(r"text-to-image R@1 on the 8 training pairs: ([\d.]+)", out.stdout)
    assert printed, shown
    # use_clip.py, from the checkpoint, scores what open_clip_train's validation scored
    assert float(printed.group(1)) == pytest.approx(100 * val["text_to_image_R@1"], abs=0.05), shown
    # vlr eval of open_clip:local-dir:tiny-clip:<checkpoint> scores what the validation scored, both ways
    recall = json.loads((work / "eval" / "tiny" / "results.json").read_text())["recall"]["tiny"]
    for ours, theirs in (("t2i", "text_to_image"), ("i2t", "image_to_text")):
        for k in (1, 5):
            assert recall[f"{ours}_r{k}"] == pytest.approx(100 * val[f"{theirs}_R@{k}"], abs=0.05), (ours, k, shown)
    # the export holds the checkpoint's weights ('module.'-free) under the folder's config
    import torch
    from safetensors.torch import load_file

    export = work / "exports" / "tiny-clip"
    config = json.loads((export / "open_clip_config.json").read_text())
    assert config["model_cfg"] == json.loads((work / "tiny-clip" / "open_clip_config.json").read_text())["model_cfg"]
    trained = torch.load(work / "logs" / "tiny" / "checkpoints" / "epoch_1.pt", weights_only=True)["state_dict"]
    exported = load_file(str(export / "open_clip_model.safetensors"))
    assert set(exported) == {k.removeprefix("module.") for k in trained}
    for key, value in trained.items():
        assert torch.equal(exported[key.removeprefix("module.")], value), key
    assert (export / "eval_results.json").is_file() and (export / "README.md").is_file()
