"""CaRe stage I as a plain module on a tiny random Qwen2-VL and test-made videos: the loss is the
cross-entropy of the caption's tokens, the vision tower is frozen and in eval mode, and what
cannot be stage-I trained is refused naming the module."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from vlr_plugins.errors import ConfigError
from vlr_plugins.mllm import FineGrainedAlignment, answer_token_loss
from vlr_plugins.mllm.caption_sft import VideoCaptionSFTDataset, collate_caption_sft

pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("av")
from _tiny_mllm import save_tiny_qwen2vl, tiny_qwen2_lm, write_captioned_clips  # noqa: E402

CAPTIONS = ["A grey square slowly turns white.", "Darkness, then light."]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return str(save_tiny_qwen2vl(tmp_path_factory.mktemp("tiny_qwen2vl"), seed=1))


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    return write_captioned_clips(tmp_path_factory.mktemp("captions"), CAPTIONS)


def test_the_loss_is_the_cross_entropy_of_the_caption_tokens(tiny_folder, captions):
    model = FineGrainedAlignment(tiny_folder)
    data = VideoCaptionSFTDataset(captions, tiny_folder, num_frames=2, max_pixels=3136)
    batch = collate_caption_sft([data[0], data[1]])
    model.eval()
    with torch.no_grad():
        loss = model(**batch, mode="loss")["loss"]
        logits = model.model(**batch).logits  # the transformers model called directly
    # reference: every position t whose next token t + 1 is a caption (or end-of-turn) token
    terms = []
    for b in range(2):
        for t in range(batch["input_ids"].shape[1] - 1):
            if batch["labels"][b, t + 1] != -100:
                terms.append(-F.log_softmax(logits[b, t].double(), dim=-1)[batch["input_ids"][b, t + 1]])
    caption_tokens = [len(data.processor.tokenizer(c + "<|im_end|>")["input_ids"]) for c in CAPTIONS[:2]]
    assert len(terms) == sum(caption_tokens)
    torch.testing.assert_close(loss.double(), torch.stack(terms).mean(), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch, mode="tensor"), logits)


def test_answer_token_loss_needs_a_supervised_token():
    head = torch.nn.Linear(4, 7)
    labels = torch.tensor([[-100, 3, 5], [-100, -100, 2]])
    hidden = torch.randn(2, 3, 4)
    want = F.cross_entropy(head(torch.stack([hidden[0, 0], hidden[0, 1], hidden[1, 1]])), torch.tensor([3, 5, 2]))
    torch.testing.assert_close(answer_token_loss(hidden, labels, head), want)
    with pytest.raises(ValueError, match="no supervised token"):
        answer_token_loss(hidden, torch.full_like(labels, -100), head)


def test_the_vision_tower_is_frozen_and_stays_in_eval_mode(tiny_vl):
    model = FineGrainedAlignment(model=copy.deepcopy(tiny_vl[0]))
    visual = model.model.model.visual
    assert not any(p.requires_grad for p in visual.parameters())
    assert model.model.get_output_embeddings().weight.requires_grad, "stage I trains the LM head"
    assert model.training and not visual.training
    model.eval().train()
    assert model.model.model.language_model.training and not visual.training
    trained = FineGrainedAlignment(model=copy.deepcopy(tiny_vl[0]), freeze_vision=False)
    assert all(p.requires_grad for p in trained.model.model.visual.parameters()) and trained.model.model.visual.training


def test_what_it_refuses_names_the_module(tiny_folder, tiny_vl):
    with pytest.raises(ConfigError, match="FineGrainedAlignment needs either pretrained= .* or model=, not both"):
        FineGrainedAlignment()
    with pytest.raises(ConfigError, match="FineGrainedAlignment needs either pretrained="):
        FineGrainedAlignment(tiny_folder, model=tiny_vl[0])
    with pytest.raises(ConfigError, match=r"FineGrainedAlignment: finetune must be one of \('full', 'lora'\)"):
        FineGrainedAlignment(tiny_folder, finetune="qlora")
    with pytest.raises(ConfigError, match="FineGrainedAlignment: dtype: .*'auto'.*found 'fp16'"):
        FineGrainedAlignment(tiny_folder, dtype="fp16")
    with pytest.raises(ConfigError, match="FineGrainedAlignment: freeze_vision=True, but Qwen2ForCausalLM has none "
                                          "of the vision submodules"):
        FineGrainedAlignment(model=tiny_qwen2_lm()[0])
    with pytest.raises(ConfigError, match="FineGrainedAlignment: Qwen2VLModel has no LM head"):
        FineGrainedAlignment(model=tiny_vl[0].model)
    with pytest.raises(TypeError):  # a plain module: no trainer's arguments
        FineGrainedAlignment(tiny_folder, init_cfg=None)
