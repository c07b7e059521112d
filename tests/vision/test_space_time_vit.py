"""SpaceTimeViT: outputs, token dropping only in training, gradient checkpointing, images, configs."""

from __future__ import annotations

import pytest
import torch

from _tiny_towers import TINY_VIT

from vlr_plugins.registry import MODELS
from vlr_plugins.vision import SpaceTimeViT, VideoTower, load_video_checkpoint

pytest.importorskip("timm")


def _clip(seed: int = 0, frames: int = 4) -> torch.Tensor:
    return torch.randn(2, frames, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def test_outputs_and_embedding():
    vit = SpaceTimeViT(**TINY_VIT, embed_dim=16, pool_norm=True).eval()
    out = vit(_clip())
    assert out.tokens.shape == (2, 8, 32) and out.pooled.shape == (2, 32) and out.keep_index is None
    assert torch.allclose(out.pooled, vit.pool_norm(out.tokens.mean(dim=1)))
    assert torch.allclose(out.embedding, torch.nn.functional.normalize(vit.proj(out.pooled), dim=-1))
    assert vit.encode_video(_clip()).shape == (2, 16) and vit.num_tokens == 8
    assert isinstance(vit, VideoTower)
    assert (vit.image_size, vit.image_mean) == (32, (0.485, 0.456, 0.406))


def test_tokens_are_dropped_in_training_only():
    vit = SpaceTimeViT(**TINY_VIT, token_drop_ratio=0.5)
    vit.eval()
    assert vit(_clip()).tokens.shape == (2, 8, 32)
    vit.train()
    out = vit(_clip())
    assert out.tokens.shape == (2, 4, 32) and out.keep_index.shape == (2, 4)
    vit.token_drop_ratio = 0.0
    assert vit(_clip()).keep_index is None


def test_dropped_tokens_never_reach_the_kept_ones():
    vit = SpaceTimeViT(**TINY_VIT, token_drop_ratio=0.5).train()
    frames = _clip()
    torch.manual_seed(3)
    out = vit(frames)
    # scribble over every tubelet that was dropped: what was kept must not change
    scribbled = frames.clone()
    t, h, w = vit.grid
    for b in range(2):
        for n in set(range(8)) - set(out.keep_index[b].tolist()):
            ti, hi, wi = n // (h * w), (n // w) % h, n % w
            scribbled[b, 2 * ti:2 * ti + 2, :, 16 * hi:16 * hi + 16, 16 * wi:16 * wi + 16] = 9.0
    torch.manual_seed(3)
    again = vit(scribbled)
    assert torch.equal(again.keep_index, out.keep_index)
    assert torch.allclose(again.tokens, out.tokens, atol=1e-6)
    assert not torch.allclose(vit.eval()(scribbled).tokens, vit(frames).tokens)


def test_tube_dropping_keeps_the_same_patches_in_every_tubelet():
    vit = SpaceTimeViT(**TINY_VIT, token_drop_ratio=0.5, token_drop_mode="tube").train()
    keep = vit(_clip()).keep_index
    assert keep.shape == (2, 4)
    assert torch.equal(keep[:, 2:] - keep[:, :2], torch.full((2, 2), 4))


@pytest.mark.parametrize("checkpointing", [True, 1])
def test_gradient_checkpointing_gives_the_same_gradients(checkpointing):
    torch.manual_seed(0)
    plain = SpaceTimeViT(**TINY_VIT, embed_dim=8).train()
    ckpt = SpaceTimeViT(**TINY_VIT, embed_dim=8, grad_checkpointing=checkpointing).train()
    ckpt.load_state_dict(plain.state_dict())
    frames = _clip()
    grads = []
    for model in (plain, ckpt):
        model.zero_grad()
        model.encode_video(frames).pow(2).sum().backward()
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for name, grad in grads[0].items():
        assert torch.allclose(grad, grads[1][name], atol=1e-6), name


def test_an_image_is_a_one_tubelet_clip():
    vit = SpaceTimeViT(**TINY_VIT, embed_dim=8).eval()
    one = SpaceTimeViT(**dict(TINY_VIT, num_frames=2), embed_dim=8).eval()
    load_video_checkpoint(one, vit.state_dict())
    images = _clip()[:, 0]
    expected = one.encode_video(images[:, None].expand(-1, 2, -1, -1, -1))
    assert torch.allclose(vit.encode_image(images), expected, atol=1e-6)
    assert torch.allclose(vit.encode_video(images[:, None]), expected, atol=1e-6)


def test_learned_positions_are_a_spatial_plus_a_temporal_table():
    vit = SpaceTimeViT(**TINY_VIT, pos_embed="learned")
    assert vit.pos_embed_spatial.shape == (1, 4, 32) and vit.pos_embed_temporal.shape == (1, 2, 32)
    with torch.no_grad():
        vit.pos_embed_temporal.normal_()
    table = vit._positions(2)[0]
    assert torch.allclose(table[5], vit.pos_embed_spatial[0, 1] + vit.pos_embed_temporal[0, 1])
    vit.encode_video(_clip()).sum().backward()
    assert vit.pos_embed_temporal.grad is not None and vit.pos_embed_spatial.grad is not None
    with pytest.raises(ValueError, match="learnt tables are resampled"):
        SpaceTimeViT(**TINY_VIT, pos_embed="learned", pretrained_num_frames=8)


def test_config_rebuilds_the_same_tower():
    vit = SpaceTimeViT(**TINY_VIT, embed_dim=8, pool_norm=True, token_drop_ratio=0.1,
                       pretrained_num_frames=2).eval()
    config = vit.to_config()
    assert config["type"] == "SpaceTimeViT" and config["pretrained_num_frames"] == 2
    rebuilt = MODELS.build(config).eval()
    rebuilt.load_state_dict(vit.state_dict())
    assert torch.equal(rebuilt.encode_video(_clip()), vit.encode_video(_clip()))


def test_wrong_inputs_say_what_to_do():
    vit = SpaceTimeViT(**TINY_VIT)
    with pytest.raises(ValueError, match="takes 4-frame clips .* num_frames=6 .*pretrained_num_frames=4"):
        vit(torch.randn(1, 6, 3, 32, 32))
    with pytest.raises(ValueError, match=r"should be \(B, T, 3, 32, 32\)"):
        vit(torch.randn(1, 4, 3, 48, 48))
    with pytest.raises(ValueError, match="multiple of tubelet_size"):
        SpaceTimeViT(**dict(TINY_VIT, num_frames=3))
