"""Caption settings as data: the shipped files load, a wrong key is refused naming file and key,
and the prompt is rendered in the model's chat template."""

from __future__ import annotations

import pytest

from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm.caption_settings import (
    CAPTION_PROMPT,
    caption_prompt,
    list_caption_settings,
    load_caption_settings,
)


def test_shipped_settings_are_the_papers():
    assert set(list_caption_settings()) == {"carebench", "care_stage1"}
    bench = load_caption_settings("carebench")
    assert bench.prompt == CAPTION_PROMPT == "Describe the video in detail."
    assert bench.video_input.num_frames == 32 and bench.generation["do_sample"] is False
    assert load_caption_settings("care_stage1").video_input.max_pixels == 460800


def test_a_users_file_and_its_mistakes(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text("prompt: Say what happens.\nvideo_input: {num_frames: 4}\ngeneration: {max_new_tokens: 7}\n")
    s = load_caption_settings(good)
    assert (s.name, s.prompt, s.video_input.num_frames, s.generation) == \
        ("mine", "Say what happens.", 4, {"max_new_tokens": 7})
    for text, where in [("generation: {max_tokens: 7}\n", "generation.max_tokens"),
                        ("generation: {max_new_tokens: 0}\n", "generation.max_new_tokens"),
                        ("promt: x\n", "promt"), ("prompt: ''\n", "prompt"),
                        ("video_input: {num_frames: 0}\n", "video_input")]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match="bad.yaml") as e:
            load_caption_settings(bad)
        assert where in str(e.value)
    with pytest.raises(ConfigError, match="carebench"):
        load_caption_settings("carebenhc")


def test_the_prompt_is_one_user_turn_in_the_chat_template(tiny_vl):
    _, processor = tiny_vl
    text = caption_prompt(processor, "Describe the video in detail.")
    assert text.endswith("<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Describe the video in "
                         "detail.<|im_end|>\n<|im_start|>assistant\n")
