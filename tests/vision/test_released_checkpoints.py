"""Training checkpoints as UMT and SMILE release them (the run's config pickled beside the
weights, the optimizer's state too) load through load_video_checkpoint as their state dicts do,
the config read as plain dicts; any other pickled object, or a payload, is refused and never runs."""

from __future__ import annotations

import argparse

import pytest
import torch
from _pickled import AttrDict, payloads, saved_as
from _tiny_towers import TINY_VIT
from _video_reference import code_layout_encoder

from vlr_plugins.checkpoint_meta import load_weights_only
from vlr_plugins.vision import SpaceTimeViT, load_video_checkpoint, read_state_dict

pytest.importorskip("timm")

UMT_VIT = dict(TINY_VIT, tubelet_size=1, pool_norm=True, embed_dim=16)


class EasyDict(AttrDict):  # pickled as UMT's own utils.easydict.EasyDict
    pass


def _umt_state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return {**code_layout_encoder("vision_encoder.encoder.", width=32, tubelet=1),
            "vision_encoder.pool_norm.weight": 1 + 0.2 * torch.randn(32, generator=g),
            "vision_encoder.pool_norm.bias": 0.2 * torch.randn(32, generator=g),
            "vision_proj.weight": 0.2 * torch.randn(16, 32, generator=g), "vision_proj.bias": torch.zeros(16),
            "text_proj.weight": torch.randn(16, 8, generator=g), "temp": torch.tensor(0.07)}


def _training_state(state: dict[str, torch.Tensor]) -> dict:
    """What the trainers save beside the weights: a real optimizer's, scheduler's and scaler's state."""
    params = [torch.nn.Parameter(v.clone()) for v in state.values() if v.dim()]
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    sum(p.square().sum() for p in params).backward()
    optimizer.step()
    scheduler.step()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
    return {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict()}


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


UMT_CONFIG = {"model": {"model_cls": "UMT", "vision_encoder": {"name": "vit_b16", "num_frames": 4, "tubelet_size": 1}},
              "train_file": [["webvid.json", "videos/", "video"]], "optimizer": {"opt": "adamW", "lr": 1e-4},
              "output_dir": "exp/umt_b16", "evaluate": False}


def test_a_umt_training_checkpoint_loads_end_to_end(tmp_path):
    state = _umt_state()
    ckpt = {"model": state, **_training_state(state), "config": EasyDict(UMT_CONFIG), "epoch": 3, "global_step": 120}
    path = saved_as(ckpt, tmp_path / "ckpt_best.pth", {EasyDict: "utils.easydict.EasyDict"})
    with pytest.raises(Exception, match="utils.easydict.EasyDict"):
        torch.load(path, weights_only=True)  # what made users re-save every file
    vit = SpaceTimeViT(**UMT_VIT)
    loaded = load_video_checkpoint(vit, path)
    assert (loaded.layout, loaded.missing, loaded.unexpected) == ("umt", [], [])
    reference = SpaceTimeViT(**UMT_VIT)
    load_video_checkpoint(reference, state)  # the same weights as a state dict in memory
    assert _same_weights(vit, reference) and torch.equal(vit.proj.weight, state["vision_proj.weight"])
    assert read_state_dict(path).keys() == state.keys()
    back = load_weights_only(path)
    assert back["config"] == UMT_CONFIG and type(back["config"]["model"]["vision_encoder"]) is dict
    assert back["epoch"] == 3 and back["optimizer"]["param_groups"][0]["lr"] == pytest.approx(5e-5)


def test_a_smile_checkpoint_with_its_args_loads_end_to_end(tmp_path):
    # VideoMAE-code trainers (SMILE pre-training, UMT single-modality) save `args`, a Namespace
    state = {**code_layout_encoder("encoder.", tubelet=2), "decoder.head.weight": torch.randn(48, 16),
             "encoder_to_decoder.weight": torch.randn(16, 32), "mask_token": torch.zeros(1, 1, 16)}
    args = argparse.Namespace(model="pretrain_videomae_base_patch16_224", num_frames=4, tubelet_size=2,
                              window_size=(2, 2, 2), mask_ratio=0.9, lr=1.5e-4, output_dir="smile/")
    torch.save({"model": state, "optimizer": _training_state(state)["optimizer"], "epoch": 799,
                "scaler": {"scale": 65536.0}, "args": args}, tmp_path / "checkpoint-799.pth")
    vit = SpaceTimeViT(**TINY_VIT)
    loaded = load_video_checkpoint(vit, tmp_path / "checkpoint-799.pth", layout="smile")
    assert loaded.missing == [] and loaded.unexpected == [] and "mask_token" in loaded.dropped
    reference = SpaceTimeViT(**TINY_VIT)
    load_video_checkpoint(reference, {"model": state}, layout="smile")
    assert _same_weights(vit, reference)
    assert load_weights_only(tmp_path / "checkpoint-799.pth")["args"] == vars(args)


def test_a_config_class_not_on_the_list_is_refused_by_name(tmp_path):
    path = saved_as({"model": _umt_state(), "config": EasyDict(UMT_CONFIG)}, tmp_path / "mm.pth",
                    {EasyDict: "mmengine.config.ConfigDict"})
    with pytest.raises(ValueError, match=r"mm.pth holds more than tensors: .*\(mmengine.config.ConfigDict\)"):
        load_video_checkpoint(SpaceTimeViT(**UMT_VIT), path)


def test_a_payload_in_a_released_checkpoint_never_runs(tmp_path):
    marker = tmp_path / "ran"
    for named, payload in payloads(marker).items():
        config = EasyDict({**UMT_CONFIG, "optimizer": {"opt": "adamW", "lr": payload}})
        path = saved_as({"model": _umt_state(), "config": config}, tmp_path / "ckpt.pth",
                        {EasyDict: "utils.easydict.EasyDict"})
        with pytest.raises(ValueError, match=rf"holds more than tensors: a pickled Python object \({named}\)") as info:
            load_video_checkpoint(SpaceTimeViT(**UMT_VIT), path)
        assert not marker.exists(), f"the {named} payload ran"
        assert "weights_only=False" not in str(info.value)
