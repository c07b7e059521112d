"""EOL prompts: the exact strings each shipped family renders, user files, bad files."""

from __future__ import annotations

import pytest

from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm import EOLPrompt, VideoInput, list_eol_prompts, load_eol_prompt

pytest.importorskip("transformers")
from _tiny_mllm import byte_tokenizer  # noqa: E402

# CaReBench, utils/model.py
CAREBENCH_EOL = {
    "text": "<sent>\nSummary above sentence in one word:",
    "image": "<image>\nSummary above image in one word:",
    "video": "<video>\nSummary above video in one word:",
}
QWEN_VISION = {"image": "<|vision_start|><|image_pad|><|vision_end|>",
               "video": "<|vision_start|><|video_pad|><|vision_end|>"}


def chat_of(tokenizer):
    return lambda messages: tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def carebench_prompt(tokenizer, modality, sentence=""):
    """CaReBench's construction (BaseModelForQwen2VL + EncoderForQwen2VL): the EOL text as the
    user's text part, chat template with generation prompt, then the placeholders replaced."""
    messages = [{"role": "user", "content": [{"type": "text", "text": CAREBENCH_EOL[modality]}]}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if modality == "video":
        prompt = prompt.replace("<video>", QWEN_VISION["video"])
    if modality == "image":
        prompt = prompt.replace("<image>", QWEN_VISION["image"])
    return prompt.replace("<sent>", sentence)


def test_care_prompts_render_exactly_as_carebench():
    tok = byte_tokenizer()
    care = load_eol_prompt("care")
    text = care.render("text", chat=chat_of(tok), sentence="A man slices a watermelon.")
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nA man slices a watermelon.\nSummary above sentence in one word:<|im_end|>\n"
                    "<|im_start|>assistant\n")
    video = care.render("video", chat=chat_of(tok))
    assert video == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                     "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>\n"
                     "Summary above video in one word:<|im_end|>\n<|im_start|>assistant\n")
    image = care.render("image", chat=chat_of(tok))
    assert image == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                     "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>\n"
                     "Summary above image in one word:<|im_end|>\n<|im_start|>assistant\n")
    assert text == carebench_prompt(tok, "text", "A man slices a watermelon.")
    assert video == carebench_prompt(tok, "video") and image == carebench_prompt(tok, "image")


def test_care_train_is_the_stripped_prompt_of_carebench_trainer():
    tok = byte_tokenizer()
    sentence = "Two dogs play."
    rendered = load_eol_prompt("care_train").render("text", chat=chat_of(tok), sentence=sentence)
    # tasks/finetuning.py: template.replace('<sent>', input).strip()
    assert rendered == carebench_prompt(tok, "text", sentence).strip()
    assert rendered.endswith("<|im_start|>assistant")


def test_e5v_prompts_are_written_out_as_e5v_evaluates():
    e5v = load_eol_prompt("e5v")
    llama3 = "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n \n"
    text = e5v.render("text", chat=None, sentence="A dog sitting in the grass.")
    assert text == llama3.format("A dog sitting in the grass.\nSummary above sentence in one word: ")
    image = e5v.render("image", chat=None, media_tokens={"image": "<image>"})
    assert image == llama3.format("<image>\nSummary above image in one word: ")
    with pytest.raises(ConfigError, match="has no video prompt; it has: text, image"):
        e5v.render("video", chat=None)


def test_a_user_prompt_file_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text('name: mine\ndescription: one line\nchat_template: false\n'
                    'text: "Q: <sent>\\nIn one word:"\nvideo: "<video> In one word:"\n'
                    'video_input: {num_frames: 8, strategy: middle, max_pixels: 50176}\n')
    mine = load_eol_prompt(path)
    assert mine.render("text", chat=None, sentence="hi") == "Q: hi\nIn one word:"
    assert mine.render("video", chat=None, media_tokens={"video": "<V>"}) == "<V> In one word:"
    assert mine.video_input == VideoInput(num_frames=8, strategy="middle", max_pixels=50176)
    assert mine.source == str(path)
    assert load_eol_prompt(mine) is mine


def test_shipped_prompts_are_listed_with_descriptions():
    listed = list_eol_prompts()
    assert {"care", "care_train", "e5v"} <= set(listed) and all(listed.values())
    assert load_eol_prompt("care").video_input == VideoInput(num_frames=32, strategy="uniform", frame_repeat=2,
                                                            min_pixels=128 * 28 * 28, max_pixels=230400)


@pytest.mark.parametrize("body, message", [
    ("name: x\ntext: 'no placeholder'\n", r"x.yaml, key 'text': the text prompt must hold <sent>"),
    ("name: x\ntext: '<sent>'\ncolour: red\n", r"x.yaml: unknown key 'colour'"),
    ("name: x\nvideo: 'no clip here'\n", r"x.yaml, key 'video': the video prompt must hold <video>"),
    ("name: x\n", r"x.yaml: needs at least one of"),
    ("name: x\ntext: '<sent>'\nvideo: '<video>'\nvideo_input: {strategy: random}\n",
     r"x.yaml, key 'video_input': strategy must be one of"),
    ("- a list\n", r"x.yaml: an EOL prompt file holds a mapping, found list"),
])
def test_bad_prompt_files_say_what_and_where(tmp_path, body, message):
    path = tmp_path / "x.yaml"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        load_eol_prompt(path)


def test_unknown_names_list_the_shipped_ones():
    with pytest.raises(ConfigError, match=r"no EOL prompt named 'nope' and no such file; shipped: care, care_train, e5v"):
        load_eol_prompt("nope")


def test_a_chat_prompt_needs_a_chat_template():
    with pytest.raises(ConfigError, match="written for the model's chat template"):
        EOLPrompt(name="p", text="<sent>").render("text", chat=None, sentence="s")
