"""``vlr demo mvc`` (demo_mvc.py): Baseline-B and MVC-B through MMEngine's Runner on the
synthetic video world, reported as text-to-video recall on summary and detailed queries."""

from __future__ import annotations

import json
import logging

import pytest
import torch

pytest.importorskip("mmengine")
pytest.importorskip("av")

from vlr_plugins.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_mvc") / "out"
    assert main(["demo", "mvc", "--quick", "--out", str(out)]) == 0
    logging.getLogger("mmengine").handlers.clear()
    return out


def test_report_holds_both_recipes_and_both_query_kinds(demo):
    report = json.loads((demo / "report.json").read_text())
    runs = report["runs"]
    assert runs["Baseline-B"]["recipe"] == "mvc/baseline_b" and runs["Baseline-B"]["dual_cls"] is False
    assert runs["Baseline-B"]["views"] == {"summary": ["O"]}
    assert runs["MVC-B"]["dual_cls"] is True
    assert runs["MVC-B"]["views"] == {"summary": ["O", "S1", "S2"], "detailed": ["D1*", "D2*", "P1", "P2"]}
    for name in runs:
        for split in ("summary", "detailed"):
            r = report["results"][name][split]
            assert 0 <= r["t2i_r1"] <= r["t2i_r5"] <= 100
    markdown = (demo / "report.md").read_text()
    assert "| Baseline-B |" in markdown and "MVC-B minus Baseline-B" in markdown


def test_reported_recall_is_the_trained_models(demo):
    """R@1 recomputed by hand from MVC-B's checkpoint: its tower on the clips' middle frames,
    its text encoder on each query in the query's view."""
    from vlr_plugins.demo.synthetic_video_world import SyntheticVideoWorld, SyntheticVideoWorldConfig
    from vlr_plugins.data.video import sample_frames, video_transform
    from vlr_plugins.registry import MODELS
    from vlr_plugins.specs import load_text_encoder

    report = json.loads((demo / "report.json").read_text())
    world = SyntheticVideoWorld(SyntheticVideoWorldConfig(**report["world"]))
    ckpt_path = demo / "runs" / "MVC-B" / f"epoch_{report['demo']['epochs']}.pth"
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=True)
    cfg = dict(ckpt["meta"]["vlr_video_encoder"])
    tower = MODELS.get(cfg.pop("type"))(**cfg)
    tower.load_state_dict({k[len("video_encoder."):]: v for k, v in ckpt["state_dict"].items()
                           if k.startswith("video_encoder.")})
    tower.eval()
    text = load_text_encoder(ckpt_path).eval()
    ids = list(world.eval_videos)
    transform = video_transform(False, tower.image_size, tower.image_mean, tower.image_std)
    clips = torch.stack([transform(sample_frames(demo / "world" / "videos" / f"{i}.mp4", report["demo"]["frames"],
                                                 "middle")) for i in ids])
    with torch.no_grad():
        videos = tower.encode_video(clips)
        for split in ("summary", "detailed"):
            queries = text.encode_text([world.query(i, split) for i in ids], view=split)
            scores = queries @ videos.T
            # rank of the right clip: how many clips score strictly higher
            ranks = (scores > scores.diagonal()[:, None]).sum(1)
            assert report["results"]["MVC-B"][split]["t2i_r1"] == pytest.approx(
                100 * (ranks < 1).float().mean().item(), abs=0.01)


def test_demo_mvc_takes_no_recipes(tmp_path, capsys):
    assert main(["demo", "mvc", "--recipes", "paragraph/c5", "--out", str(tmp_path / "d")]) == 2
    assert "--recipes" in capsys.readouterr().err and not (tmp_path / "d").exists()
