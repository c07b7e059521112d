"""What of an MLLM trains: the vision side found by name, LoRA on the LLM's layers only (a vision
tower with the same layer names keeps none), activation checkpointing with the KV cache off."""

from __future__ import annotations

import copy

import pytest
from torch import nn

from vlr_plugins.mllm import LORA_DEFAULTS, VISION_MODULES, add_lora, enable_gradient_checkpointing, vision_modules


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj, self.v_proj = nn.Linear(4, 4), nn.Linear(4, 4)


class _ToyMLLM(nn.Module):
    """A LLaVA-like layout: a CLIP-style tower and a projector beside the language model."""

    def __init__(self) -> None:
        super().__init__()
        self.vision_tower = nn.Module()
        self.vision_tower.vision_model = nn.ModuleList([_Block()])  # nested: the outer one counts
        self.multi_modal_projector = nn.Linear(4, 4)
        self.language_model = nn.ModuleList([_Block(), _Block()])


def test_the_outermost_vision_submodules_are_found_by_name(tiny_vl):
    toy = _ToyMLLM()
    assert vision_modules(toy) == {"vision_tower": toy.vision_tower,
                                   "multi_modal_projector": toy.multi_modal_projector}
    assert list(vision_modules(tiny_vl[0])) == ["model.visual"]  # Qwen2-VL: tower and merger
    assert vision_modules(nn.Linear(2, 2)) == {}
    assert "visual" in VISION_MODULES


def test_lora_targets_the_llm_layers_only():
    pytest.importorskip("peft")
    wrapper = add_lora(_ToyMLLM(), dict(LORA_DEFAULTS, r=2, lora_alpha=4))
    adapted = sorted({name.rsplit(".lora_", 1)[0] for name, _ in wrapper.named_parameters() if "lora_" in name})
    assert adapted == [f"base_model.model.language_model.{i}.{p}" for i in (0, 1) for p in ("q_proj", "v_proj")]
    assert all("lora_" in n for n, p in wrapper.named_parameters() if p.requires_grad)
    assert hasattr(wrapper, "merge_and_unload")


def test_gradient_checkpointing_turns_the_kv_cache_off(tiny_vl):
    model = copy.deepcopy(tiny_vl[0])
    enable_gradient_checkpointing(model)
    assert model.config.use_cache is False
    on = getattr(model, "is_activation_checkpointing", None)
    assert on if on is not None else model.is_gradient_checkpointing
