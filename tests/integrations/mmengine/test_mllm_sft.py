"""CaRe stage I through MMEngine on a tiny random Qwen2-VL and test-made videos: the model is the
core module (tests/mllm/test_care_stage1.py) with MMEngine's data preprocessor, the LLM trains,
the vision tower stays bit-identical, and `vlr train care/stage1` writes a folder that stage II
starts from."""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("av")
from mmengine.config import Config  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from _refusal import run_vlr  # noqa: E402
from _tiny_mllm import save_tiny_qwen2vl, write_captioned_clips  # noqa: E402

from vlr_plugins.integrations.mmengine.mllm_sft_model import CaptionSFTModel  # noqa: E402
from vlr_plugins.mllm import EOLEmbedder  # noqa: E402
from vlr_plugins.mllm.caption_sft import VideoCaptionSFTDataset, collate_caption_sft  # noqa: E402

RECIPE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "recipes", "care", "stage1.yaml")
CAPTIONS = ["A grey square slowly turns white.", "Darkness, then light.", "Nothing moves.", "A fade."]
# CPU-sized overrides of the recipe (the same for Config and for `vlr train --set`)
TINY = {
    "model.gradient_checkpointing": False,
    "train_dataloader.batch_size": 2, "train_dataloader.num_workers": 0,
    "train_dataloader.persistent_workers": False,
    "train_dataloader.dataset.num_frames": 2, "train_dataloader.dataset.max_pixels": 3136,
    "train_cfg.max_iters": 2, "default_hooks.checkpoint.interval": 100, "default_hooks.logger.interval": 1,
    "env_cfg.dist_cfg.backend": "gloo",
}
OPTIM = {"type": "OptimWrapper", "optimizer": {"type": "AdamW", "lr": 1e-2, "weight_decay": 0.0}}


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return str(save_tiny_qwen2vl(tmp_path_factory.mktemp("tiny_qwen2vl"), seed=1))


@pytest.fixture(scope="module")
def captions(tmp_path_factory):
    return write_captioned_clips(tmp_path_factory.mktemp("captions"), CAPTIONS)


def stage1_config(folder, ann_file, work_dir, **model):
    cfg = Config.fromfile(RECIPE)
    cfg.merge_from_dict({**TINY, "model.pretrained": folder, "train_dataloader.dataset.ann_file": ann_file,
                         "train_dataloader.dataset.processor": folder})
    cfg.model.update(model)
    cfg.optim_wrapper = OPTIM
    cfg.work_dir, cfg.log_level = str(work_dir), "WARNING"
    cfg.experiment_name = f"stage1_{os.path.basename(work_dir)}"  # one MMEngine visualizer per run
    return cfg


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_the_mmengine_model_is_the_core_module_with_a_data_preprocessor(tiny_folder):
    """Core stage I (tests/mllm/test_care_stage1.py) behind MMEngine's BaseModel: the same
    module tree, so checkpoint keys are the transformers model's under ``model.``."""
    from mmengine.model import BaseDataPreprocessor, BaseModel

    from vlr_plugins.mllm import FineGrainedAlignment

    model = CaptionSFTModel(tiny_folder)
    assert isinstance(model, FineGrainedAlignment) and isinstance(model, BaseModel)
    assert isinstance(model.data_preprocessor, BaseDataPreprocessor)
    assert set(model.state_dict()) == {f"model.{k}" for k in model.model.state_dict()}
    with pytest.raises(ValueError, match="^CaptionSFTModel: mode='loss' needs labels"):
        model(torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def test_stage1_steps_change_the_llm_and_leave_the_vision_tower_bit_identical(tiny_folder, captions, tmp_path):
    runner = Runner.from_cfg(stage1_config(tiny_folder, captions, tmp_path))
    model = runner.model
    assert isinstance(model, CaptionSFTModel) and model.finetune == "full"
    before = snapshot(model)
    runner.train()
    after = snapshot(model)
    vision = [k for k in before if ".visual." in k]
    llm = [k for k in before if ".language_model." in k]
    assert vision and llm
    assert all(torch.equal(before[k], after[k]) for k in vision), "the vision tower (and merger) must not change"
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any("layers.0.self_attn.q_proj" in k for k in changed) and any("embed_tokens" in k for k in changed)
    assert any("lm_head" in k for k in changed), "stage I trains the LM head too"
    assert not model.model.model.visual.training, "the frozen tower stays in eval mode"
    exported = os.path.join(tmp_path, "pretrained")
    assert os.path.isfile(os.path.join(exported, "model.safetensors"))


def test_lora_trains_adapters_only_and_exports_them_merged(tiny_folder, captions, tmp_path):
    pytest.importorskip("peft")
    cfg = stage1_config(tiny_folder, captions, tmp_path, finetune="lora", lora=dict(r=4, lora_alpha=8, lora_dropout=0.0))
    cfg.custom_hooks = [dict(type="WeightsOnlyCheckpointHook")]  # export by hand below
    runner = Runner.from_cfg(cfg)
    model = runner.model
    before = snapshot(model)
    runner.train()
    after = snapshot(model)
    lora = [k for k in before if "lora_" in k]
    assert lora and not any(".visual." in k for k in lora), "adapters on the LLM only"
    assert any(not torch.equal(before[k], after[k]) for k in lora if "lora_B" in k)
    assert all(torch.equal(before[k], after[k]) for k in before if "lora_" not in k)
    data = VideoCaptionSFTDataset(captions, tiny_folder, num_frames=2, max_pixels=3136)
    batch = collate_caption_sft([data[2], data[3]])
    model.eval()
    with torch.no_grad():
        with_adapters = model(**batch, mode="tensor")
    folder = model.save_pretrained(tmp_path / "merged")
    from transformers import AutoModelForImageTextToText

    merged = AutoModelForImageTextToText.from_pretrained(folder).eval()
    assert not any("lora_" in k for k in merged.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(merged(**batch).logits, with_adapters, atol=1e-4, rtol=0)


def test_recipe_holds_the_papers_values():
    cfg = Config.fromfile(RECIPE)
    per_step = cfg.train_dataloader.batch_size * cfg.vlr.world_size * cfg.optim_wrapper.accumulative_counts
    assert per_step == cfg.vlr.global_batch == 64
    assert cfg.optim_wrapper.optimizer.lr == 2e-5
    data = cfg.train_dataloader.dataset
    assert (data.num_frames, data.strategy, data.max_pixels) == (16, "uniform", 460800)
    assert data.instruction == "Describe the video in detail."
    assert cfg.model.freeze_vision is True and cfg.vlr.kind == "care" and cfg.vlr.stage == 1


def test_vlr_list_shows_the_recipe():
    code, out, _ = run_vlr(["list", "recipes"])
    assert code == 0
    assert any(line.split()[:2] == ["care/stage1", "[care]"] for line in out.splitlines()), out


def _set(overrides):
    return [f"{k}={'null' if v is None else json.dumps(v) if isinstance(v, (dict, bool)) else v}"
            for k, v in overrides.items()]


def test_vlr_train_care_stage1_hands_a_folder_to_stage2(tiny_folder, captions, tmp_path):
    work = tmp_path / "stage1"
    code, out, err = run_vlr(["train", "care/stage1", "--train", captions, "--work-dir", work, "--set",
                              f"model.pretrained={tiny_folder}", f"train_dataloader.dataset.processor={tiny_folder}",
                              *_set(TINY), f"optim_wrapper={json.dumps(OPTIM)}", "experiment_name=stage1_cli"],
                             cwd=tmp_path)
    assert code == 0, err
    folder = work / "pretrained"
    ckpt = torch.load(work / "iter_2.pth", map_location="cpu", weights_only=True)["state_dict"]
    # stage II's embedder loads the exported folder: the trained weights, with the processor
    embedder = EOLEmbedder(str(folder), prompt="care")
    loaded = embedder.model.state_dict()
    trained = {k.removeprefix("model."): v for k, v in ckpt.items()}
    assert set(loaded) == set(trained)
    assert all(torch.equal(loaded[k], trained[k]) for k in loaded)
    assert embedder.encode_text(["a dog runs"]).shape == (1, 32)
    # and stage II trains from it through the CLI
    nli = tmp_path / "nli.csv"
    with open(nli, "w", newline="", encoding="utf-8") as f:
        # 5 iterations of 2: the recipe's warm-up (0.4 of 2 epochs) lasts 2 of them
        csv.writer(f).writerows([["sent0", "sent1", "hard_neg"], *[[f"a dog {i}", "a pet", "a car"] for i in range(10)]])
    code, out, err = run_vlr(["train", "care/stage2_paper", "--train", nli, "--work-dir", tmp_path / "stage2",
                              "--set", f"model.embedder.pretrained={folder}",
                              f"train_dataloader.dataset.tokenizer={folder}", "train_dataloader.batch_size=2",
                              "train_dataloader.num_workers=0", "train_dataloader.persistent_workers=false",
                              "model.gradient_checkpointing=false", "train_cfg.max_epochs=1",
                              f"optim_wrapper={json.dumps(OPTIM)}", "experiment_name=stage2_cli"], cwd=tmp_path)
    assert code == 0, err


def test_a_dtype_that_is_not_one_is_refused_before_loading(tiny_folder):
    from vlr_plugins.errors import ConfigError

    with pytest.raises(ConfigError, match="CaptionSFTModel: dtype: .*'auto'.*found 'fp16'"):
        CaptionSFTModel(tiny_folder, dtype="fp16")
