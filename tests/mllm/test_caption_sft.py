"""CaRe stage-I data: the (video, caption) chat, its label mask, frames and pixel limits, batches."""

from __future__ import annotations

import json

import pytest
import torch

from vlr_plugins.data.video import frame_indices
from vlr_plugins.errors import ConfigError, DataFormatError
from vlr_plugins.mllm.caption_sft import (
    CAPTION_INSTRUCTION,
    IGNORE_INDEX,
    VideoCaptionSFTDataset,
    caption_chat,
    collate_caption_sft,
)

pytest.importorskip("transformers")
pytest.importorskip("av")
from _tiny_mllm import QWEN_CHAT, write_clip  # noqa: E402

CAPTIONS = ["A grey square fades to white.", "Dark."]


@pytest.fixture
def captions(tmp_path):
    write_clip(tmp_path / "v.mkv", num_frames=12, height=32, width=32)  # frame k is filled with 10 * k, 8 fps
    path = tmp_path / "caps.jsonl"
    path.write_text(json.dumps({"video": "v.mkv", "caption": CAPTIONS[0]}) + "\n"
                    + json.dumps({"video": "v.mkv", "caption": CAPTIONS[1], "start": 0.5, "end": 1.0}) + "\n")
    return path


def dataset(captions, processor, **kw):
    kw.setdefault("num_frames", 2)
    kw.setdefault("max_pixels", 28 * 28 * 4)
    return VideoCaptionSFTDataset(captions, processor, **kw)


def test_the_chat_is_the_templates_two_turns_split_at_the_generation_prompt(tiny_vl):
    _, processor = tiny_vl
    prompt, answer = caption_chat(processor, "A cat sleeps.")
    system = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    assert prompt == (system + "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>"
                      "Describe the video in detail.<|im_end|>\n<|im_start|>assistant\n")
    assert answer == "A cat sleeps.<|im_end|>"
    assert CAPTION_INSTRUCTION == "Describe the video in detail."


def test_labels_supervise_the_caption_and_end_of_turn_only(tiny_vl, captions):
    _, processor = tiny_vl
    tok = processor.tokenizer
    data = dataset(captions, processor)
    item = data[0]
    ids, labels = item["input_ids"].tolist(), item["labels"].tolist()
    supervised = [i for i, label in enumerate(labels) if label != IGNORE_INDEX]
    # the supervised positions are one run at the end, holding exactly their own token ids
    assert supervised == list(range(len(ids) - len(supervised), len(ids)))
    assert [ids[i] for i in supervised] == [labels[i] for i in supervised]
    assert tok.decode([ids[i] for i in supervised]) == CAPTIONS[0] + "<|im_end|>"
    # everything before is the prompt as the processor expands it for this clip
    prompt, _ = caption_chat(processor, CAPTIONS[0])
    expected = processor(text=[prompt], videos=[data.frames(0)], size={"shortest_edge": 28 * 28, "longest_edge": 3136},
                         do_sample_frames=False, return_tensors="pt")
    assert ids[: len(ids) - len(supervised)] == expected["input_ids"][0].tolist()
    video_tokens = sum(i == processor.video_token_id for i in ids)
    assert video_tokens == int(item["video_grid_thw"].prod()) // 4 > 0, "one token per merged 2 x 2 patch"
    assert torch.equal(item["pixel_values_videos"], expected["pixel_values_videos"])


def test_frames_follow_the_uniform_rule_inside_the_moment(tiny_vl, captions):
    _, processor = tiny_vl
    data = dataset(captions, processor, num_frames=3, frame_repeat=2)
    whole = data.frames(0)
    assert whole.shape == (6, 3, 32, 32) and whole.dtype == torch.uint8
    assert [int(f[0, 0, 0]) for f in whole] == [10 * k for k in frame_indices(12, 3, "uniform") for _ in range(2)]
    # 0.5-1.0 s at 8 fps = frames 4..7; segments [4, 6) and [6, 8), middles (start + end - 1) // 2 = 4 and 6
    moment = dataset(captions, processor, num_frames=2).frames(1)
    assert [int(f[0, 0, 0]) for f in moment] == [40, 60]


def test_max_pixels_bounds_the_frames_the_processor_makes(tiny_vl, tmp_path):
    _, processor = tiny_vl
    write_clip(tmp_path / "big.mkv", num_frames=4, height=84, width=112)
    path = tmp_path / "caps.jsonl"
    path.write_text(json.dumps({"video": "big.mkv", "caption": "x"}) + "\n")
    areas = []
    for limit in (28 * 28, 28 * 28 * 4, 84 * 112):
        t, h, w = dataset(path, processor, max_pixels=limit)[0]["video_grid_thw"][0].tolist()
        assert t == 1 and h * w * 14 * 14 <= limit
        areas.append(h * w * 14 * 14)
    assert areas[0] < areas[1] < areas[2], areas


def test_collate_pads_on_the_right_with_ignored_labels(tiny_vl, captions):
    _, processor = tiny_vl
    data = dataset(captions, processor)
    items = [data[0], data[1]]
    batch = collate_caption_sft(items, pad_token_id=7)
    lengths = [len(i["input_ids"]) for i in items]
    assert lengths[0] > lengths[1] and batch["input_ids"].shape == (2, lengths[0])
    for row, (item, n) in enumerate(zip(items, lengths)):
        assert torch.equal(batch["input_ids"][row, :n], item["input_ids"])
        assert torch.equal(batch["labels"][row, :n], item["labels"])
        assert batch["attention_mask"][row].tolist() == [1] * n + [0] * (lengths[0] - n)
        assert (batch["labels"][row, n:] == IGNORE_INDEX).all() and (batch["input_ids"][row, n:] == 7).all()
    assert torch.equal(batch["pixel_values_videos"], torch.cat([i["pixel_values_videos"] for i in items]))
    assert torch.equal(batch["video_grid_thw"], torch.cat([i["video_grid_thw"] for i in items]))


def test_an_unreadable_video_is_named_by_its_record(tiny_vl, tmp_path):
    _, processor = tiny_vl
    (tmp_path / "broken.mp4").write_bytes(b"not a video at all")
    path = tmp_path / "caps.jsonl"
    path.write_text(json.dumps({"video": "broken.mp4", "caption": "x"}) + "\n")
    data = dataset(path, processor)
    with pytest.raises(DataFormatError, match=r"caps.jsonl, line 1, field 'video': cannot read the video"):
        data[0]


@pytest.mark.parametrize("kw, key", [
    (dict(num_frames=0), "num_frames"), (dict(strategy="random"), "strategy"), (dict(max_pixels=-1), "max_pixels"),
    (dict(instruction=" "), "instruction"),
])
def test_bad_settings_are_refused_by_name(tiny_vl, captions, kw, key):
    with pytest.raises(ConfigError, match=key):
        dataset(captions, tiny_vl[1], **kw)


def test_a_template_without_the_generation_prompt_prefix_is_refused(tiny_vl):
    from _tiny_mllm import tiny_processor

    odd = tiny_processor()
    odd.chat_template = QWEN_CHAT.replace("<|im_start|>assistant\n{% endif %}", "<|im_start|>assistant:\n{% endif %}")
    with pytest.raises(ConfigError, match="generation prompt"):
        caption_chat(odd, "x")


def test_the_dataset_pickles_without_its_processor(tmp_path, captions, tiny_vl):
    import pickle

    _, processor = tiny_vl
    folder = tmp_path / "proc"
    processor.save_pretrained(folder)
    data = dataset(captions, str(folder))
    assert data[1]["input_ids"].ndim == 1 and data._processor is not None
    assert pickle.loads(pickle.dumps(data))._processor is None
