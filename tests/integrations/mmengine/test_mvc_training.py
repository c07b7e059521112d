"""MVC pretraining through MMEngine (mvc_config.py, mvc_model.py, mvc_dataset.py): ``vlr train
mvc/mvc_b`` shrunk to tiny towers and the test-made video world, its plain config, its
checkpoint, resuming, and the model's wiring of the core loss."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from _mvc_world import EMBED_DIM, mvc_run, mvc_world, tiny_sets

pytest.importorskip("mmengine")
pytest.importorskip("av")

from vlr_plugins.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def world():
    return mvc_world()


@pytest.fixture(scope="module")
def trained(world):
    """``vlr train mvc/mvc_b`` for one epoch (8 clips, batch 4: 2 steps)."""
    return mvc_run()


def _scalars(work: Path, latest: bool = False) -> list[dict]:
    logs = sorted(work.glob("*/vis_data/scalars.json"))
    if not latest:
        assert len(logs) == 1
    log = logs[-1]
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_train_writes_a_weights_only_checkpoint_with_both_towers(trained):
    ckpt = torch.load(trained / "epoch_1.pth", map_location="cpu", weights_only=True)
    keys = ckpt["state_dict"].keys()
    assert any(k.startswith("text_encoder.bert.") for k in keys)
    assert any(k.startswith("video_encoder.blocks.") for k in keys) and "match_head.weight" in keys
    meta = ckpt["meta"]
    assert meta["vlr_text_encoder"]["type"] == "DualCLSTextEncoder" and meta["vlr_text_encoder"]["dual_cls"]
    assert meta["vlr_video_encoder"]["type"] == "SpaceTimeViT" and meta["vlr_video_encoder"]["num_frames"] == 4
    assert meta["vlr_recipe"]["name"] == "MVC-B" and meta["vlr_recipe"]["data"]["schema"] == "mvc"
    assert meta["iter"] == 2


def test_every_loss_term_is_logged_separately(trained):
    rows = [r for r in _scalars(trained) if "loss" in r]
    assert len(rows) == 2
    terms = {f"{t}_{v}" for t in ("vtc", "vtm", "mlm") for v in ("summary", "detailed")} | {"vtc", "vtm", "mlm"}
    assert all(terms <= set(r) for r in rows)
    # equal weights: the loss is the sum of the three terms (after the first step MMEngine logs
    # the loss averaged since the epoch's start, the terms per step)
    first = rows[0]
    assert first["loss"] == pytest.approx(first["vtc"] + first["vtm"] + first["mlm"], rel=1e-4)


def test_dump_config_is_a_plain_mmengine_config(world, tmp_path):
    from mmengine.config import Config

    out = tmp_path / "mvc_b.py"
    assert main(["train", "mvc/mvc_b", "--train", world["train"], "--work-dir", str(tmp_path / "w"),
                 "--dump-config", str(out), "--set", *tiny_sets(world, epochs=2)]) == 0
    cfg = Config.fromfile(str(out))
    assert not (tmp_path / "w").exists()
    model = cfg.model
    assert model.type == "VideoTextPretrainingModel" and model.video_encoder.num_frames == 4
    assert model.text_encoder.video_width == 32 and model.loss.views == ["summary", "detailed"]
    assert model.loss.vocab_size == int(world["vocab"]) and model.loss.mask_id is not None
    data = cfg.train_dataloader.dataset
    assert data.type == "MVCVideoTextDataset" and data.frames == 4 and data.sampler == "rand"
    assert [(v["name"], list(v["field"])) for v in data.positives] == [
        ("summary", ["O", "S1", "S2"]), ("detailed", ["D1*", "D2*", "P1", "P2"])]
    # one warm-up epoch (2 iterations), then cosine to 1% of the initial rate
    warm, cos = cfg.param_scheduler
    assert (warm.type, warm.begin, warm.end, warm.by_epoch) == ("LinearLR", 0, 2, False)
    assert (cos.type, cos.begin, cos.end, cos.eta_min) == ("CosineAnnealingLR", 2, 4, 1e-6)


def test_resume_after_kill_restores_epoch_iteration_optimizer_and_scheduler(world, tmp_path):
    """``vlr train`` killed with SIGKILL once its first epoch's checkpoint is written, then
    ``--resume auto``: the run ends where an uninterrupted one would (3 epochs of 2 steps)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    work = tmp_path / "run"
    argv = ["train", "mvc/mvc_b", "--train", world["train"], "--work-dir", str(work)]
    sets = ["--set", *tiny_sets(world, epochs=3)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "vlr_plugins.cli", *argv, *sets], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (work / "last_checkpoint").exists():
            assert proc.poll() is None, f"training stopped with status {proc.returncode} before its first checkpoint"
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    first = torch.load((work / "last_checkpoint").read_text().strip(), map_location="cpu", weights_only=True)
    assert first["meta"]["epoch"] < 3
    assert main([*argv, "--resume", "auto", *sets]) == 0
    ckpt = torch.load(work / "epoch_3.pth", map_location="cpu", weights_only=True)
    assert ckpt["meta"]["epoch"] == 3 and ckpt["meta"]["iter"] == 6
    assert {int(s["step"]) for s in ckpt["optimizer"]["state"].values()} == {6}, "AdamW's state went on"
    # the schedule went on where it stopped: the resumed steps' rates are the cosine's (one
    # warm-up epoch of 2 steps, then 4 steps from 1e-4 down to 1e-6)
    rows = [r for r in _scalars(work, latest=True) if "lr" in r]
    cosine = [1e-6 + (1e-4 - 1e-6) * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(4)]
    assert [r["lr"] for r in rows] == pytest.approx(cosine[-len(rows):], rel=1e-4)
    assert len(rows) >= 2 and len(ckpt["param_schedulers"]) == 2


def test_model_passes_the_batch_to_the_core_loss(world):
    """The model's loss equals the core loss called by hand on the same encodings (a frozen
    tower: its weights get no gradient)."""
    from vlr_plugins.integrations.mmengine import VideoTextPretrainingModel
    from vlr_plugins.losses import VideoTextPretrainingLoss
    from vlr_plugins.text import DualCLSTextEncoder
    from vlr_plugins.vision import SpaceTimeViT

    torch.manual_seed(0)
    vocab = int(world["vocab"])
    text = DualCLSTextEncoder(config=dict(vocab_size=vocab, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=64,
                                          max_position_embeddings=96),
                              embed_dim=EMBED_DIM, num_fusion_layers=1, video_width=32, max_tokens=64,
                              tokenizer=world["tokenizer"])
    tower = SpaceTimeViT(num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=32, depth=1,
                         num_heads=2, pool_norm=True, embed_dim=EMBED_DIM)
    loss = VideoTextPretrainingLoss.from_tokenizer(text.load_tokenizer(), views=["summary", "detailed"],
                                                   hard_negatives=False, mlm_weight=0.0)
    model = VideoTextPretrainingModel(text, tower, loss, freeze_video=True)
    model.eval()  # no dropout, no token dropping: two forward passes see the same tokens
    frames = torch.randn(2, 4, 3, 32, 32)
    ids = torch.randint(5, vocab, (4, 10))
    mask = torch.ones_like(ids)
    owner, view = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 0, 1])
    got = model(frames, ids, mask, owner, view, mode="loss")
    got["loss"].backward()  # before the loss runs again (it clamps its learnable temperature in place)
    assert all(p.grad is None for p in tower.parameters())
    assert text.bert.embeddings.word_embeddings.weight.grad is not None
    with torch.no_grad():
        video = tower(frames)
        encoded = text.encode(ids, mask, view)
        want = loss(model, video.embedding, encoded.embeds, owner, view, video_tokens=video.tokens,
                    text_hidden=encoded.hidden, input_ids=ids, attention_mask=mask)
    for k in ("loss", "vtc", "vtm", "vtc_summary", "vtc_detailed"):
        assert torch.allclose(got[k].detach(), want[k], atol=1e-5), k
