"""The MVC export's video side, tower by tower and frame by frame: every ``SpaceTimeViT`` option
``vlr train mvc`` can record exports to the restated tower with the same embeddings, and the
folder's video processor makes, from the same decoded frames, the very clips ``vlr precompute``
gives the tower -- on frames that need resizing and an odd centre crop, portrait and landscape,
and on a video shorter than the clip."""

from __future__ import annotations


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

# the tiny towers, text encoders and checkpoints of an MVC run: tests/_support/_tiny_mvc.py
from _tiny_mvc import BASE, EMBED, VIDEOS, WIDTH, save_checkpoint, text_encoder, trained_tower  # noqa: E402

TOWERS = {
    "sincos": {},
    "learned positions, layer scale, no final norm": dict(pos_embed="learned", init_values=0.1, final_norm=False),
    "resampled sincos, pool norm eps, unnormalised": dict(pretrained_num_frames=2, pretrained_image_size=48,
                                                          pool_norm=True, pool_norm_eps=1e-5, normalize=False),
    "no projection": dict(embed_dim=None, width=EMBED, num_heads=2),
}


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


def test_sentence_transformers_encodes_texts_and_videos_as_the_model(videos, tiny_tokenizer, tiny_tokenizer_dir,
                                                                     tmp_path):
    """``SentenceTransformer(folder)``: texts through the tokenizer at the default budget, videos (every
    decoded frame) through the folder's processor (``processing_vlr.VlrVideoTextProcessor``)."""
    st = pytest.importorskip("sentence_transformers", minversion="6.0")
    from transformers import AutoProcessor

    tower = trained_tower()
    encoder = text_encoder(tiny_tokenizer, tiny_tokenizer_dir, tower.width)
    out = export_text_encoder(save_checkpoint(tmp_path / "epoch_1.pth", encoder, tower), tmp_path / "export")
    model = AutoModel.from_pretrained(out, trust_remote_code=True).eval()
    processor = AutoProcessor.from_pretrained(out, trust_remote_code=True)
    texts = ["a red car near the beach", "an old man rides a horse"]
    frames = [read_frames(videos / f"{name}.mkv") for name in sorted(VIDEOS)]
    with torch.no_grad():
        batch = processor(text=texts, truncation=True, max_length=model.config.max_tokens_for(), padding=True,
                          return_tensors="pt")
        text = model.get_text_features(batch["input_ids"], batch["attention_mask"])
        video = model.get_video_features(**processor(videos=frames, return_tensors="pt"))
    sentence = st.SentenceTransformer(str(out), trust_remote_code=True, device="cpu")
    torch.testing.assert_close(sentence.encode(texts, convert_to_tensor=True), text, rtol=0, atol=1e-6)
    torch.testing.assert_close(sentence.encode(frames, convert_to_tensor=True), video, rtol=0, atol=1e-6)
