"""UMT, SMILE and native checkpoints load into SpaceTimeViT with no missing or unexpected keys,
and the tower then computes what the original computes (transformers' VideoMAE:
test_video_checkpoints_videomae.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from _video_reference import code_layout_encoder, code_layout_forward, sinusoid
from _tiny_towers import TINY_VIT

from vlr_plugins.vision import (
    SpaceTimeViT,
    detect_layout,
    load_video_checkpoint,
    read_state_dict,
    smile_to_space_time,
    umt_to_space_time,
)

pytest.importorskip("timm")

EPS = 1e-6


def _clip(frames: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(2, frames, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


# --- UMT -----------------------------------------------------------------------------------

def _umt_full_model(width: int = 32, embed: int = 16, tubelet: int = 1) -> dict[str, torch.Tensor]:
    """A full UMT model's state dict: the ViT under ``vision_encoder.`` with its pool norm and
    CLIP-alignment decoder, ``vision_proj``, and the text side (all in UMT's names)."""
    g = torch.Generator().manual_seed(1)
    sd = code_layout_encoder("vision_encoder.encoder.", width=width, tubelet=tubelet)
    sd.update({
        "vision_encoder.pool_norm.weight": 1 + 0.2 * torch.randn(width, generator=g),
        "vision_encoder.pool_norm.bias": 0.2 * torch.randn(width, generator=g),
        "vision_encoder.clip_decoder.0.head.weight": torch.randn(8, width, generator=g),
        "vision_encoder.clip_decoder.0.head.bias": torch.randn(8, generator=g),
        "vision_encoder.clip_decoder.0.norm.weight": torch.ones(8),
        "vision_encoder.clip_decoder.0.norm.bias": torch.zeros(8),
        "vision_proj.weight": 0.2 * torch.randn(embed, width, generator=g),
        "vision_proj.bias": 0.2 * torch.randn(embed, generator=g),
        "text_encoder.bert.embeddings.word_embeddings.weight": torch.randn(10, 8, generator=g),
        "text_proj.weight": torch.randn(embed, 8, generator=g),
        "text_proj.bias": torch.randn(embed, generator=g),
        "itm_head.weight": torch.randn(2, 8, generator=g),
        "itm_head.bias": torch.randn(2, generator=g),
        "temp": torch.tensor(0.07),
    })
    return sd


UMT_VIT = dict(TINY_VIT, tubelet_size=1, pool_norm=True, embed_dim=16)


def _umt_reference(sd: dict, frames: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    tokens = code_layout_forward(sd, "vision_encoder.encoder.", frames, positions, heads=2)
    pooled = F.layer_norm(tokens.mean(dim=1), (32,), sd["vision_encoder.pool_norm.weight"],
                          sd["vision_encoder.pool_norm.bias"], EPS)
    return F.normalize(F.linear(pooled, sd["vision_proj.weight"], sd["vision_proj.bias"]), dim=-1)


def test_umt_model_loads_whole_and_runs_like_umt():
    sd = _umt_full_model()
    assert detect_layout(sd) == "umt"
    vit = SpaceTimeViT(**UMT_VIT).eval()
    loaded = load_video_checkpoint(vit, sd)
    assert loaded.missing == [] and loaded.unexpected == []
    tower = ("vision_encoder.encoder.", "vision_encoder.pool_norm", "vision_proj")
    assert loaded.dropped == sorted(k for k in sd if not k.startswith(tower))
    frames = _clip()
    with torch.no_grad():
        expected = _umt_reference(sd, frames, sinusoid(16, 32))  # 4 frames x 2 x 2 patches
        assert torch.allclose(vit.encode_video(frames), expected, atol=1e-5)


def test_umt_backbone_checkpoint_without_prefix_loads_too():
    full = _umt_full_model()
    backbone = {k[len("vision_encoder."):]: v for k, v in full.items() if k.startswith("vision_encoder.")}
    vit = SpaceTimeViT(**dict(UMT_VIT, embed_dim=None))
    loaded = load_video_checkpoint(vit, backbone, layout="umt")
    assert loaded.missing == [] and loaded.unexpected == [] and loaded.dropped[0].startswith("clip_decoder.")
    assert torch.equal(vit.pool_norm.weight, full["vision_encoder.pool_norm.weight"])


def test_umt_weights_of_fewer_frames_get_their_table_resampled_in_time():
    # UMT runs 8-frame weights on 16 frames; here 2-frame weights on 4 frames (tubelet 1)
    sd = _umt_full_model()
    vit = SpaceTimeViT(**UMT_VIT, pretrained_num_frames=2).eval()
    load_video_checkpoint(vit, sd)
    source = sinusoid(2 * 4, 32).reshape(2, 4, 32)  # (T0, HW, D): UMT's table for the checkpoint
    table = F.interpolate(source.permute(1, 2, 0), size=4, mode="linear", align_corners=False)
    table = table.permute(2, 0, 1).reshape(16, 32)
    assert torch.allclose(vit.pos_video[0], table, atol=1e-6)
    frames = _clip()
    with torch.no_grad():
        assert torch.allclose(vit.encode_video(frames), _umt_reference(sd, frames, table), atol=1e-5)
        # an image keeps the checkpoint's own first-frame table (UMT's img_pos_embed)
        image = frames[:, 0]
        assert torch.allclose(vit.encode_image(image), _umt_reference(sd, image[:, None], sinusoid(4, 32)),
                              atol=1e-5)


def test_umt_weights_of_another_resolution_get_their_table_resampled_in_space():
    sd = _umt_full_model()
    vit = SpaceTimeViT(**dict(UMT_VIT, image_size=48), pretrained_image_size=32).eval()
    load_video_checkpoint(vit, sd)
    grid = sinusoid(16, 32).reshape(4, 2, 2, 32).permute(0, 3, 1, 2)
    table = F.interpolate(grid, size=(3, 3), mode="bicubic", align_corners=False).permute(0, 2, 3, 1)
    assert torch.allclose(vit.pos_video[0], table.reshape(36, 32), atol=1e-6)
    frames = torch.randn(2, 4, 3, 48, 48)
    with torch.no_grad():
        assert torch.allclose(vit.encode_video(frames), _umt_reference(sd, frames, table.reshape(36, 32)),
                              atol=1e-5)


# --- SMILE (VideoMAE's own code) -----------------------------------------------------------

def test_smile_pretraining_checkpoint_keeps_the_encoder():
    sd = {"model": {**code_layout_encoder("encoder.", tubelet=2),
                    "decoder.blocks.0.norm1.weight": torch.ones(16),
                    "decoder.head.weight": torch.randn(48, 16),
                    "encoder_to_decoder.weight": torch.randn(16, 32), "mask_token": torch.zeros(1, 1, 16)}}
    assert detect_layout(sd) == "smile"
    vit = SpaceTimeViT(**TINY_VIT, normalize=False).eval()
    loaded = load_video_checkpoint(vit, sd)
    assert loaded.missing == [] and loaded.unexpected == []
    assert loaded.dropped == ["decoder.blocks.0.norm1.weight", "decoder.head.weight",
                              "encoder_to_decoder.weight", "mask_token"]
    frames = _clip()
    with torch.no_grad():
        expected = code_layout_forward(sd["model"], "encoder.", frames, sinusoid(8, 32), heads=2)
        assert torch.allclose(vit(frames).tokens, expected, atol=1e-5)


def test_smile_finetuned_checkpoint_maps_fc_norm_to_pool_norm():
    g = torch.Generator().manual_seed(2)
    sd = {**code_layout_encoder("", tubelet=2, final_norm=False),
          "fc_norm.weight": 1 + 0.2 * torch.randn(32, generator=g),
          "fc_norm.bias": 0.2 * torch.randn(32, generator=g),
          "head.weight": torch.randn(400, 32, generator=g), "head.bias": torch.randn(400, generator=g)}
    mapped = smile_to_space_time({"module": sd})
    assert "pool_norm.weight" in mapped and "head.weight" not in mapped and "norm.weight" not in mapped
    vit = SpaceTimeViT(**TINY_VIT, final_norm=False, pool_norm=True, normalize=False).eval()
    load_video_checkpoint(vit, {"module": sd})
    frames = _clip()
    with torch.no_grad():
        tokens = code_layout_forward(sd, "", frames, sinusoid(8, 32), heads=2)
        expected = F.layer_norm(tokens.mean(dim=1), (32,), sd["fc_norm.weight"], sd["fc_norm.bias"], EPS)
        assert torch.allclose(vit(frames).pooled, expected, atol=1e-5)


def test_layer_scale_gammas_map_to_timm_layer_scale():
    sd = code_layout_encoder("", tubelet=2)
    sd.update({f"blocks.{i}.gamma_{j}": torch.full((32,), 0.5) for i in range(2) for j in (1, 2)})
    vit = SpaceTimeViT(**TINY_VIT, init_values=0.1)
    load_video_checkpoint(vit, sd, layout="smile")
    assert torch.equal(vit.blocks[1].ls2.gamma, torch.full((32,), 0.5))


# --- native, files, errors -----------------------------------------------------------------

def test_native_learnt_tables_are_resampled_to_a_bigger_grid():
    small = SpaceTimeViT(**TINY_VIT, pos_embed="learned")
    with torch.no_grad():
        small.pos_embed_temporal.normal_()
    big = SpaceTimeViT(**dict(TINY_VIT, num_frames=8, image_size=64), pos_embed="learned")
    loaded = load_video_checkpoint(big, small.state_dict())
    assert loaded.layout == "native"
    temporal = F.interpolate(small.pos_embed_temporal.detach().transpose(1, 2), size=4, mode="linear",
                             align_corners=False).transpose(1, 2)
    grid = small.pos_embed_spatial.detach().reshape(1, 2, 2, 32).permute(0, 3, 1, 2)
    spatial = F.interpolate(grid, size=(4, 4), mode="bicubic", align_corners=False)
    spatial = spatial.permute(0, 2, 3, 1).reshape(1, 16, 32)
    assert torch.allclose(big.pos_embed_temporal, temporal) and torch.allclose(big.pos_embed_spatial, spatial)


def test_files_load_through_the_constructor(tmp_path):
    from safetensors.torch import save_file

    sd = _umt_full_model()
    save_file(sd, str(tmp_path / "umt.safetensors"))
    torch.save({"model": sd, "epoch": 3}, tmp_path / "umt.pth")
    a = SpaceTimeViT(**UMT_VIT, pretrained=str(tmp_path / "umt.safetensors"))
    b = SpaceTimeViT(**UMT_VIT, pretrained=str(tmp_path / "umt.pth"), checkpoint_layout="umt")
    assert torch.equal(a.proj.weight, sd["vision_proj.weight"]) and torch.equal(b.proj.weight, a.proj.weight)
    assert read_state_dict(tmp_path / "umt.pth").keys() == sd.keys()


def test_a_checkpoint_pickling_objects_is_not_read(tmp_path):
    from fractions import Fraction  # an object no config class of pickled_configs.CONFIG_CLASSES

    torch.save({"model": {}, "args": {"lr": Fraction(1, 3)}}, tmp_path / "full.pth")
    with pytest.raises(ValueError, match=r"more than tensors: a pickled Python object \(fractions.Fraction\)"):
        read_state_dict(tmp_path / "full.pth")
    (tmp_path / "text.pth").write_text("not a checkpoint\n")
    with pytest.raises(ValueError, match="text.pth is not a PyTorch checkpoint"):
        read_state_dict(tmp_path / "text.pth")


def test_a_mismatched_tower_names_the_flag_to_change():
    sd = umt_to_space_time(_umt_full_model())
    with pytest.raises(KeyError, match=r"unexpected .*pool_norm.*pool_norm=True.*embed_dim=<"):
        load_video_checkpoint(SpaceTimeViT(**dict(TINY_VIT, tubelet_size=1)), sd, layout="native")
    shapes = r"patch_embed.weight: checkpoint \(32, 3, 1, 16, 16\), tower \(32, 3, 2"
    with pytest.raises(ValueError, match=shapes):
        load_video_checkpoint(SpaceTimeViT(**TINY_VIT, pool_norm=True, embed_dim=16), sd, layout="native")
    with pytest.raises(ValueError, match="cannot tell the layout"):
        detect_layout({"weight": torch.zeros(1)})
