"""EOLEmbedder on a tiny random Qwen2-VL: last-token pooling, left padding, inputs, dtypes."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from vlr_plugins.data.video import frame_indices
from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm import EOLEmbedder
from vlr_plugins.registry import MODELS
from vlr_plugins.vision.protocol import VideoTower

pytest.importorskip("transformers")
from _tiny_mllm import MAX_PIXELS, clip, save_model_folder, tiny_qwen2_lm, write_clip  # noqa: E402

TEXTS = ["A dog.", "A man slices a watermelon on a wooden table, then eats a piece.", "Snow falls."]


def embedder(tiny_vl, **kw):
    model, processor = tiny_vl
    kw.setdefault("min_pixels", 28 * 28)
    kw.setdefault("max_pixels", MAX_PIXELS)
    return EOLEmbedder(model=model, processor=processor, **kw)


def manual_last_state(model, batch):
    """The model called directly on one unpadded row; hidden_states[-1] at its last token."""
    with torch.no_grad():
        out = model(**batch, output_hidden_states=True)
    return F.normalize(out.hidden_states[-1][0, -1].float(), dim=-1)


def test_text_embedding_is_the_last_prompt_token_of_a_plain_forward(tiny_vl):
    model, processor = tiny_vl
    emb = embedder(tiny_vl)
    got = emb.encode_text(TEXTS)
    for i, text in enumerate(TEXTS):
        prompt = processor.apply_chat_template(
            [{"role": "user", "content": f"{text}\nSummary above sentence in one word:"}],
            tokenize=False, add_generation_prompt=True)
        ref = manual_last_state(model, processor(text=[prompt], return_tensors="pt"))
        torch.testing.assert_close(got[i], ref, atol=1e-5, rtol=0)
    # right padding, read at the last non-pad position, gives the same states
    prompts = emb.prompts("text", TEXTS)
    right = processor(text=prompts, padding=True, padding_side="right", return_tensors="pt")
    with torch.no_grad():
        hidden = model(**right, output_hidden_states=True).hidden_states[-1]
    last = right["attention_mask"].sum(1) - 1
    ref = F.normalize(hidden[torch.arange(len(TEXTS)), last], dim=-1)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


@pytest.mark.parametrize("modality", ["text", "image", "video"])
def test_left_padded_batches_equal_one_by_one(tiny_vl, modality):
    emb = embedder(tiny_vl)
    items = {
        "text": TEXTS,
        "image": [clip(1, 56, 56, seed=1)[0], clip(1, 28, 56, seed=2)[0], clip(1, 28, 28, seed=3)[0]],
        "video": [clip(4, 56, 56, seed=4), clip(2, 28, 56, seed=5), clip(6, 28, 28, seed=6)],
    }[modality]
    encode = getattr(emb, f"encode_{modality}")
    batch = encode(items)
    one_by_one = torch.cat([encode([x]) for x in items])
    lengths = emb.inputs(modality, items)["attention_mask"].sum(1)
    assert len(set(lengths.tolist())) > 1, "the batch must need padding"
    assert batch.shape == (3, emb.embedding_dim) and batch.dtype == torch.float32
    torch.testing.assert_close(batch, one_by_one, atol=1e-5, rtol=0)
    torch.testing.assert_close(batch.norm(dim=-1), torch.ones(3))


def count(ids, processor, token):
    return int((ids == processor.tokenizer.convert_tokens_to_ids(token)).sum())


def test_each_modality_reaches_the_model_with_its_tokens(tiny_vl):
    _, processor = tiny_vl
    emb = embedder(tiny_vl)
    text = emb.inputs("text", TEXTS[:2])
    assert "pixel_values" not in text and "pixel_values_videos" not in text
    assert count(text["input_ids"], processor, "<|vision_start|>") == 0
    assert text["attention_mask"][0, 0] == 0 and text["attention_mask"][:, -1].all(), "padded on the left"

    image = emb.inputs("image", [clip(1, 56, 56)[0], clip(1, 28, 56)[0]])
    assert image["image_grid_thw"].tolist() == [[1, 4, 4], [1, 2, 4]]
    for row, grid in zip(image["input_ids"], image["image_grid_thw"]):
        assert count(row, processor, "<|image_pad|>") == int(grid.prod()) // 4  # 2 x 2 patches merge
        assert count(row, processor, "<|vision_start|>") == count(row, processor, "<|vision_end|>") == 1
        assert count(row, processor, "<|video_pad|>") == 0
    assert image["pixel_values"].shape[0] == int(image["image_grid_thw"].prod(1).sum())

    video = emb.inputs("video", [clip(4, 112, 112), clip(2, 28, 56)])
    # CaRe's frame_repeat=2: each temporal patch of 2 frames holds one frame; 112 px frames
    # are shrunk to max_pixels = 56 x 56
    assert video["video_grid_thw"].tolist() == [[4, 4, 4], [2, 2, 4]]
    for row, grid in zip(video["input_ids"], video["video_grid_thw"]):
        assert count(row, processor, "<|video_pad|>") == int(grid.prod()) // 4
        assert count(row, processor, "<|image_pad|>") == 0
    assert "pixel_values" not in video


def test_frames_are_repeated_then_handed_to_the_processor(tiny_vl):
    _, processor = tiny_vl
    frames = clip(3, 56, 56)
    got = embedder(tiny_vl).inputs("video", [frames])
    ref = processor(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[frames.repeat_interleave(2, 0)],
                    return_tensors="pt")
    torch.testing.assert_close(got["pixel_values_videos"], ref["pixel_values_videos"])
    once = embedder(tiny_vl, frame_repeat=1).inputs("video", [clip(4, 56, 56)])
    assert once["video_grid_thw"].tolist() == [[2, 4, 4]]  # Qwen2-VL pairs consecutive frames


def test_video_files_are_decoded_with_carebench_uniform_frames(tiny_vl, tmp_path):
    pytest.importorskip("av")
    path = write_clip(tmp_path / "clip.mkv", num_frames=12)
    emb = embedder(tiny_vl, num_frames=4)
    # frame k of the file is filled with 10 * k
    picked = frame_indices(12, 4, "uniform")
    frames = torch.stack([torch.full((3, 56, 56), 10 * k, dtype=torch.uint8) for k in picked])
    torch.testing.assert_close(emb.encode_video([path]), emb.encode_video([frames]), atol=1e-5, rtol=0)


def test_normalised_float_frames_follow_the_video_tower_protocol(tiny_vl):
    emb = embedder(tiny_vl)
    assert isinstance(emb, VideoTower)
    assert emb.image_size == 56 and len(emb.image_mean) == len(emb.image_std) == 3
    frames = clip(2, 56, 56)
    mean = torch.tensor(emb.image_mean).view(3, 1, 1)
    std = torch.tensor(emb.image_std).view(3, 1, 1)
    normalised = (frames.float() / 255 - mean) / std
    torch.testing.assert_close(emb.encode_video(normalised[None]), emb.encode_video(frames[None]),
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(emb.encode_image(normalised[:1]), emb.encode_image(frames[:1]), atol=1e-4, rtol=0)


def test_mixed_batches_are_refused(tiny_vl):
    emb = embedder(tiny_vl)
    with pytest.raises(ValueError, match=r"one modality per call; found texts \(2\), videos \(1\): call "
                                         r"encode_text, encode_image and encode_video separately"):
        emb.encode(texts=TEXTS[:2], videos=[clip(2)])
    with pytest.raises(TypeError, match=r"encode_text: item 1 is a Tensor, not a string"):
        emb.encode_text(["a dog", clip(2)])
    torch.testing.assert_close(emb(texts=TEXTS), emb.encode_text(TEXTS))


def test_bf16_runs_on_cpu(tiny_vl):
    model, processor = tiny_vl
    emb16 = EOLEmbedder(model=copy.deepcopy(model).to(torch.bfloat16), processor=processor,
                        min_pixels=28 * 28, max_pixels=MAX_PIXELS)
    emb32 = embedder(tiny_vl)
    for modality, items in (("text", TEXTS), ("video", [clip(2, 56, 56)])):
        low = getattr(emb16, f"encode_{modality}")(items)
        full = getattr(emb32, f"encode_{modality}")(items)
        assert low.dtype == torch.float32 and torch.isfinite(low).all()
        assert (low * full).sum(-1).min() > 0.98  # cosine to the fp32 embedding


def test_sentences_are_cut_to_max_text_tokens(tiny_vl):
    _, processor = tiny_vl
    emb = embedder(tiny_vl, max_text_tokens=5)
    # the byte tokenizer: one token per character
    torch.testing.assert_close(emb.encode_text([TEXTS[1]]), embedder(tiny_vl).encode_text([TEXTS[1][:5]]))


def test_a_text_only_lm_with_e5v_prompts():
    lm, tok = tiny_qwen2_lm()
    emb = EOLEmbedder(model=lm, processor=tok, prompt="e5v")
    assert emb.kind == "llm"
    got = emb.encode_text(TEXTS)
    for i, prompt in enumerate(emb.prompts("text", TEXTS)):
        ref = manual_last_state(lm, tok([prompt], return_tensors="pt"))
        torch.testing.assert_close(got[i], ref, atol=1e-5, rtol=0)
    with pytest.raises(ConfigError, match="a text-only model .kind='llm'. cannot encode videos"):
        emb.encode_video([clip(2)])


def test_loads_a_saved_model_folder_with_auto_classes(tiny_vl, tmp_path):
    save_model_folder(tmp_path / "vl", *tiny_vl)
    loaded = EOLEmbedder(str(tmp_path / "vl"), min_pixels=28 * 28, max_pixels=MAX_PIXELS)
    assert loaded.kind == "mllm"
    torch.testing.assert_close(loaded.encode_text(TEXTS), embedder(tiny_vl).encode_text(TEXTS))
    lm, tok = tiny_qwen2_lm()
    save_model_folder(tmp_path / "lm", lm, tok)
    text_only = MODELS.build({"type": "EOLEmbedder", "pretrained": str(tmp_path / "lm"), "prompt": "e5v"})
    assert text_only.kind == "llm"
    torch.testing.assert_close(text_only.encode_text(TEXTS), EOLEmbedder(model=lm, processor=tok, prompt="e5v")
                               .encode_text(TEXTS))


def test_bad_arguments_say_what_is_wrong(tiny_vl):
    model, processor = tiny_vl
    with pytest.raises(ConfigError, match="either pretrained= .* or model="):
        EOLEmbedder()
    with pytest.raises(ConfigError, match="needs the model's processor"):
        EOLEmbedder(model=model)
    with pytest.raises(ConfigError, match="video settings: frame_repeat must be an integer >= 1, found 0"):
        EOLEmbedder(model=model, processor=processor, frame_repeat=0)
    with pytest.raises(ValueError, match="no video to encode"):
        embedder(tiny_vl).encode_video([])


# mixed lengths: a call's items are sorted into batches by token count, then put back in order
MIXED_TEXTS = ["A dog.", "A man slices a watermelon on a wooden table, then eats a piece, slowly, and smiles.",
               "Snow falls.", "Two dogs chase a ball across the grass.", "Rain.",
               "A woman in a red coat opens an umbrella, then walks away from the camera towards the station."]


def test_a_call_is_cut_into_length_sorted_batches_and_comes_back_in_order(tiny_vl):
    emb = embedder(tiny_vl, batch_size=2, max_batch_tokens=400, max_padding=None)
    prompts = emb.prompts("text", MIXED_TEXTS)
    lengths = emb.token_counts("text", prompts)
    assert lengths == [int(emb.inputs("text", [t])["attention_mask"].sum()) for t in MIXED_TEXTS]
    one_by_one = torch.cat([emb.encode_text([t]) for t in MIXED_TEXTS])
    got = emb.encode_text(MIXED_TEXTS)
    torch.testing.assert_close(got, one_by_one, atol=1e-5, rtol=0)
    # the same texts in another order give the same rows in that order
    perm = [4, 1, 5, 0, 3, 2]
    torch.testing.assert_close(emb.encode_text([MIXED_TEXTS[i] for i in perm]), got[perm], atol=1e-5, rtol=0)
    # rows are far apart next to the tolerance, so a row in the wrong place would show
    assert (torch.cdist(got, got) + torch.eye(len(got))).min() > 1e-3
    # one batch for the whole call (the old way) pads every text to the longest: same rows
    whole = embedder(tiny_vl, batch_size=None)
    torch.testing.assert_close(whole.encode_text(MIXED_TEXTS), one_by_one, atol=1e-5, rtol=0)
    # the default padding bound (10 %) cuts these spread lengths finer: same rows
    bounded = embedder(tiny_vl)
    assert bounded.max_padding == 0.1
    torch.testing.assert_close(bounded.encode_text(MIXED_TEXTS), one_by_one, atol=1e-5, rtol=0)


def test_videos_of_mixed_lengths_are_batched_by_vision_tokens(tiny_vl):
    emb = embedder(tiny_vl, batch_size=2)
    clips = [clip(2, 28, 28, seed=1), clip(6, 56, 56, seed=2), clip(2, 28, 56, seed=3), clip(4, 56, 56, seed=4)]
    text, media = emb._prepare("video", clips)
    counts = emb.token_counts("video", text, media)
    assert counts == [int(emb.inputs("video", [c])["attention_mask"].sum()) for c in clips]
    assert len(set(counts)) == 4  # given out of length order: batches [1, 3], [2, 0]
    one_by_one = torch.cat([emb.encode_video([c]) for c in clips])
    torch.testing.assert_close(emb.encode_video(clips), one_by_one, atol=1e-5, rtol=0)
    assert (torch.cdist(one_by_one, one_by_one) + torch.eye(len(clips))).min() > 1e-3


def test_left_padded_text_rows_sit_at_their_own_positions(tiny_vl):
    # Qwen2-VL (transformers 5) positions a text-only batch 0..L-1 over the left padding: the
    # same attention in exact arithmetic (RoPE is relative), other rounding in bfloat16
    model, processor = tiny_vl
    emb = EOLEmbedder(model=copy.deepcopy(model).to(torch.bfloat16), processor=processor, batch_size=None)
    texts = MIXED_TEXTS[:3]
    one_by_one = torch.cat([emb.encode_text([t]) for t in texts])
    torch.testing.assert_close(emb.encode_text(texts), one_by_one, atol=1e-5, rtol=0)
    inputs = emb.inputs("text", texts)
    with torch.no_grad():
        unpositioned = emb.model.base_model(**inputs, use_cache=False).last_hidden_state[:, -1]
    assert (F.normalize(unpositioned.float(), dim=-1) - one_by_one).abs().max() > 1e-4


def test_batch_limits_are_checked(tiny_vl):
    with pytest.raises(ConfigError, match=r"EOLEmbedder: batch_size must be an integer >= 1 or None .no limit"
                                          r"., found 0"):
        embedder(tiny_vl, batch_size=0)
    with pytest.raises(ConfigError, match=r"max_batch_tokens must be an integer >= 1 or None .no limit., found 1.5"):
        embedder(tiny_vl, max_batch_tokens=1.5)
    with pytest.raises(ConfigError, match=r"EOLEmbedder: max_padding must be a fraction in \[0, 1\) or None"):
        embedder(tiny_vl, max_padding=1.0)
