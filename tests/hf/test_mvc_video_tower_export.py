"""The MVC export's video side, tower by tower and frame by frame: every ``SpaceTimeViT`` option
``vlr train mvc`` can record exports to the restated tower with the same embeddings, and the
folder's video processor makes, from the same decoded frames, the very clips ``vlr precompute``
gives the tower -- on frames that need resizing and an odd centre crop, portrait and landscape,
and on a video shorter than the clip."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
pytest.importorskip("av")
pytest.importorskip("timm")
pytest.importorskip("torchvision")

import torch  # noqa: E402
from _videos import write_video  # noqa: E402
from transformers import AutoModel, AutoVideoProcessor  # noqa: E402

from vlr_plugins.cli import main  # noqa: E402
from vlr_plugins.data.video import CLIP_MEAN, CLIP_STD, frame_indices, read_frames, video_transform  # noqa: E402
from vlr_plugins.hf import export_text_encoder  # noqa: E402
from vlr_plugins.text import DualCLSTextEncoder  # noqa: E402
from vlr_plugins.vision import SpaceTimeViT  # noqa: E402

WIDTH, EMBED = 24, 16
BASE = dict(num_frames=4, image_size=32, patch_size=16, tubelet_size=2, width=WIDTH, depth=2, num_heads=2,
            embed_dim=EMBED, token_drop_ratio=0.1, image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD))
TOWERS = {
    "sincos": {},
    "learned positions, layer scale, no final norm": dict(pos_embed="learned", init_values=0.1, final_norm=False),
    "resampled sincos, pool norm eps, unnormalised": dict(pretrained_num_frames=2, pretrained_image_size=48,
                                                          pool_norm=True, pool_norm_eps=1e-5, normalize=False),
    "no projection": dict(embed_dim=None, width=EMBED, num_heads=2),
}
# (height, width, frames): 48 x 53 resizes to 32 x 35, whose centre crop starts at round(1.5) = 2
# (transformers' own crop would start at int(1.5) = 1); a portrait clip; one shorter than 4 frames
VIDEOS = {"wide": (48, 53, 40), "tall": (64, 48, 30), "short": (48, 64, 3)}


def text_encoder(tokenizer, tokenizer_dir, video_width: int) -> DualCLSTextEncoder:
    bert = dict(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=96, initializer_range=0.5,
                pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    return DualCLSTextEncoder(config=bert, embed_dim=EMBED, num_fusion_layers=1, video_width=video_width,
                              max_tokens=64, tokenizer=str(tokenizer_dir)).eval()


def trained_tower(**options) -> SpaceTimeViT:
    """A tower of ``BASE`` + ``options`` whose every weight moved off its initial value."""
    torch.manual_seed(1)
    tower = SpaceTimeViT(**{**BASE, **options})
    with torch.no_grad():
        for p in tower.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return tower.eval()


def save_checkpoint(path, encoder, tower, *, video_meta=None, video_state=None) -> str:
    """The layout WeightsOnlyCheckpointHook writes for an MVC run."""
    meta = {"vlr_text_encoder": encoder.to_config(),
            "vlr_video_encoder": json.loads(json.dumps(tower.to_config())) if video_meta is None else video_meta}
    state = {f"text_encoder.{k}": v for k, v in encoder.state_dict().items()}
    state.update({f"video_encoder.{k}": v for k, v in (video_state or tower.state_dict()).items()})
    torch.save({"meta": meta, "state_dict": state}, path)
    return str(path)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    root = tmp_path_factory.mktemp("videos")
    for name, (h, w, n) in VIDEOS.items():
        write_video(root / name, "ffv1", n, height=h, width=w)
    return root


@pytest.mark.parametrize("options", list(TOWERS.values()), ids=list(TOWERS))
def test_every_recorded_tower_exports_with_its_precompute_rows(options, videos, tiny_tokenizer, tiny_tokenizer_dir,
                                                               tmp_path):
    from vlr_plugins.data import EmbeddingStore
    from vlr_plugins.specs import load_video_encoder

    tower = trained_tower(**options)
    encoder = text_encoder(tiny_tokenizer, tiny_tokenizer_dir, tower.width)
    ckpt = save_checkpoint(tmp_path / "epoch_1.pth", encoder, tower)
    store = tmp_path / "store"
    assert main(["precompute", "--videos", str(videos), "--encoder", f"vlr:{ckpt}", "--out", str(store),
                 "--frames", "4", "--workers", "0"]) == 0
    out = export_text_encoder(ckpt, tmp_path / "export")  # the checkpoint brings its tower along
    model = AutoModel.from_pretrained(out).eval()
    processor = AutoVideoProcessor.from_pretrained(out)
    ids = sorted(VIDEOS)
    clips = processor(videos=[read_frames(videos / f"{i}.mkv") for i in ids], return_tensors="pt")
    with torch.no_grad():
        got = model.get_video_features(**clips)
        # the clips' values are equal (test below); precompute stacks them channels-last, which
        # changes the patch convolution's summation order: float32 rounding, no more
        torch.testing.assert_close(got, EmbeddingStore(store).get(ids).float(), rtol=0, atol=1e-6)
        # precompute's own tower (vlr:CHECKPOINT) and the one built here agree with the export on any clip
        clip = torch.randn(2, 4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
        assert torch.equal(model.get_video_features(clip), tower.encode_video(clip))
        assert torch.equal(model.get_video_features(clip), load_video_encoder(f"vlr:{ckpt}").eval().encode_video(clip))
        assert torch.equal(model.get_video_features(clip[:, :1]), tower.encode_image(clip[:, 0]))  # an image
        assert torch.equal(model.video_tokens(clip), tower(clip).tokens)
    assert (got.norm(dim=-1) - 1).abs().max() < 1e-5 if tower.normalize else (got.norm(dim=-1) - 1).abs().max() > 1e-3


@pytest.mark.parametrize("frames, size", [(4, 32), (16, 24)])
def test_the_processor_makes_precomputes_clips_from_the_same_frames(frames, size, videos, tmp_path):
    from vlr_plugins.hf.mvc_video import video_processor_for

    config = {**BASE, "num_frames": frames, "image_size": size}
    processor = video_processor_for(config)
    processor.save_pretrained(tmp_path)
    back = AutoVideoProcessor.from_pretrained(tmp_path)
    transform = video_transform(False, size, CLIP_MEAN, CLIP_STD)  # what vlr precompute applies
    decoded = [read_frames(videos / f"{name}.mkv") for name in sorted(VIDEOS)]
    want = torch.stack([transform(f[frame_indices(len(f), frames, "middle")]) for f in decoded])
    for p in (processor, back):
        assert torch.equal(p(videos=decoded, return_tensors="pt")["pixel_values_videos"], want)
        assert torch.equal(p(videos=[f.numpy() for f in decoded], return_tensors="pt")["pixel_values_videos"], want)
    # frames already sampled pass through the same transform
    picked = [f[frame_indices(len(f), frames, "middle")] for f in decoded]
    assert torch.equal(processor(videos=picked, do_sample_frames=False, return_tensors="pt")["pixel_values_videos"],
                       want)
    with pytest.raises(ValueError, match="pass num_frames, not fps"):
        processor(videos=decoded, fps=2.0)


def test_the_middle_rule_is_vlrs(tmp_path):
    from vlr_plugins.hf.video_processing_vlr import middle_frame_indices

    for length in range(1, 70):
        for count in (1, 3, 4, 8, 16, 32):
            assert middle_frame_indices(length, count) == frame_indices(length, count, "middle"), (length, count)


def test_a_text_only_export_has_no_video_features(tiny_tokenizer, tiny_tokenizer_dir, tmp_path):
    out = export_text_encoder(text_encoder(tiny_tokenizer, tiny_tokenizer_dir, WIDTH), tmp_path / "text-only")
    assert not (out / "video_preprocessor_config.json").exists()
    model = AutoModel.from_pretrained(out)
    assert model.config.video_config is None and model.video_model is None
    with pytest.raises(ValueError, match="this model has no video tower"):
        model.get_video_features(torch.zeros(1, 4, 3, 32, 32))


def test_wrong_clips_and_mismatched_towers_are_refused(tiny_encoder, tiny_tokenizer, tiny_tokenizer_dir, tmp_path):
    from vlr_plugins.hf import VlrDualCLSTextEncoderConfig

    tower = trained_tower()
    encoder = text_encoder(tiny_tokenizer, tiny_tokenizer_dir, WIDTH)
    model = AutoModel.from_pretrained(export_text_encoder(encoder, tmp_path / "e", video_tower=tower))
    with pytest.raises(ValueError, match=r"takes 4-frame clips \(or single images\), found 3 frames"):
        model.get_video_features(torch.zeros(1, 3, 3, 32, 32))
    with pytest.raises(ValueError, match=r"pixel_values_videos must be \(B, T, 3, 32, 32\)"):
        model.get_video_features(torch.zeros(1, 4, 3, 24, 24))
    with pytest.raises(TypeError, match="video_tower= is for a DualCLSTextEncoder"):
        export_text_encoder(tiny_encoder, tmp_path / "blip", video_tower=tower)
    with pytest.raises(TypeError, match="cannot export a Linear video tower: the export restates SpaceTimeViT"):
        export_text_encoder(encoder, tmp_path / "linear", video_tower=torch.nn.Linear(2, 2))
    assert not (tmp_path / "blip").exists() and not (tmp_path / "linear").exists()
    video_config = model.config.video_config
    with pytest.raises(ValueError, match="the video tower embeds in 16 dims but the texts in 8"):
        VlrDualCLSTextEncoderConfig(embed_dim=8, video_width=WIDTH, video_config=video_config)
    with pytest.raises(ValueError, match="tokens are 24 wide but the fusion layers read 768-wide"):
        VlrDualCLSTextEncoderConfig(embed_dim=EMBED, video_config=video_config)
    with pytest.raises(ValueError, match=r"video_config\['type'\] is 'FramePooledVideoEncoder'"):
        VlrDualCLSTextEncoderConfig(embed_dim=EMBED, video_width=WIDTH,
                                    video_config={**video_config, "type": "FramePooledVideoEncoder"})
    with pytest.raises(ValueError, match=r"unknown keys \['token_drop_ratio'\]"):
        VlrDualCLSTextEncoderConfig(embed_dim=EMBED, video_width=WIDTH,
                                    video_config={**video_config, "token_drop_ratio": 0.1})
