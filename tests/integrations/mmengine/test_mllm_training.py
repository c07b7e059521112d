"""CaRe stage II through MMEngine's Runner on a tiny random Qwen2-VL: the LLM trains, the
vision tower stays bit-identical, LoRA merges exactly, and the model is the core module
(tests/mllm/test_care_stage2.py) with MMEngine's data preprocessor."""

from __future__ import annotations

import os
import re
import sys
import warnings

import pytest
import torch

pytest.importorskip("mmengine")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")
from mmengine.config import Config  # noqa: E402
from mmengine.runner import FlexibleRunner, Runner  # noqa: E402

from _tiny_mllm import save_tiny_qwen2vl, write_nli_csv  # noqa: E402

from vlr_plugins.integrations.mmengine.mllm_model import EOLContrastiveModel  # noqa: E402
from vlr_plugins.mllm import EOLEmbedder, EOLTripletsDataset, collate_eol_triplets  # noqa: E402

RECIPES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "recipes", "care")
@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return str(save_tiny_qwen2vl(tmp_path_factory.mktemp("tiny_qwen2vl"), seed=1))


@pytest.fixture(scope="module")
def nli_csv(tmp_path_factory):
    return write_nli_csv(tmp_path_factory.mktemp("nli") / "nli.csv")


def stage2_config(recipe, folder, ann_file, work_dir, **model):
    cfg = Config.fromfile(os.path.join(RECIPES, f"{recipe}.yaml"))
    cfg.model.embedder.pretrained = folder
    cfg.model.update(model)
    cfg.train_dataloader.update(batch_size=2, num_workers=0, persistent_workers=False)
    cfg.train_dataloader.dataset.update(ann_file=ann_file, tokenizer=folder)
    cfg.train_cfg.max_epochs = 1
    cfg.optim_wrapper = dict(type="OptimWrapper", optimizer=dict(type="AdamW", lr=1e-2, weight_decay=0.0))
    cfg.env_cfg.dist_cfg.backend = "gloo"
    cfg.default_hooks.checkpoint.interval = 100
    cfg.work_dir, cfg.log_level = str(work_dir), "WARNING"
    return cfg


def snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_stage2_steps_change_the_llm_and_leave_the_vision_tower_bit_identical(tiny_folder, nli_csv, tmp_path):
    runner = Runner.from_cfg(stage2_config("stage2_paper", tiny_folder, nli_csv, tmp_path))
    model = runner.model
    assert isinstance(model, EOLContrastiveModel) and model.finetune == "full"
    before = snapshot(model)
    runner.train()
    after = snapshot(model)
    vision = [k for k in before if ".visual." in k]
    llm = [k for k in before if ".language_model." in k]
    assert vision and llm
    assert all(torch.equal(before[k], after[k]) for k in vision), "the vision tower must not change"
    assert all(torch.equal(before[k], after[k]) for k in before if "lm_head" in k)
    changed = [k for k in llm if not torch.equal(before[k], after[k])]
    assert any("layers.0.self_attn.q_proj" in k for k in changed) and any("embed_tokens" in k for k in changed)
    assert not model.embedder.model.model.visual.training, "the frozen tower stays in eval mode"


def test_lora_trains_adapters_only_and_merges_to_the_same_embeddings(tiny_folder, nli_csv, tmp_path):
    pytest.importorskip("peft")
    cfg = stage2_config("stage2_paper", tiny_folder, nli_csv, tmp_path, finetune="lora",
                        lora=dict(r=4, lora_alpha=8, lora_dropout=0.0))
    runner = Runner.from_cfg(cfg)
    model = runner.model
    before = snapshot(model)
    runner.train()
    after = snapshot(model)
    lora = [k for k in before if "lora_" in k]
    assert lora and not any(".visual." in k for k in lora), "adapters on the LLM only"
    assert any(not torch.equal(before[k], after[k]) for k in lora if "lora_B" in k)
    assert all(torch.equal(before[k], after[k]) for k in before if "lora_" not in k)
    texts = ["a dog runs on the grass", "the red table"]
    model.eval()
    with_adapters = model.embedder.encode_text(texts)
    merged = model.merge_lora()
    assert not any("lora_" in k for k in merged.state_dict())
    torch.testing.assert_close(model.embedder.encode_text(texts), with_adapters, atol=1e-5, rtol=0)


def test_the_mmengine_model_is_the_core_module_with_a_data_preprocessor(tiny_folder):
    """Core stage II (tests/mllm/test_care_stage2.py) behind MMEngine's BaseModel: the same
    module tree, so checkpoint keys are the core module's and stay those of earlier runs."""
    from mmengine.model import BaseDataPreprocessor, BaseModel

    from vlr_plugins.mllm import RetrievalAdaptation

    embedder = EOLEmbedder(tiny_folder)
    model = EOLContrastiveModel(embedder=embedder)
    assert isinstance(model, RetrievalAdaptation) and isinstance(model, BaseModel)
    assert isinstance(model.data_preprocessor, BaseDataPreprocessor)
    assert set(model.state_dict()) == ({f"embedder.{k}" for k in embedder.state_dict()}
                                       | {f"loss_fn.{k}" for k in model.loss_fn.state_dict()})
    with pytest.raises(ValueError, match=r"^EOLContrastiveModel: finetune must be one of \('full', 'lora'\), "
                                         r"found 'qlora'$"):
        EOLContrastiveModel(embedder=embedder, finetune="qlora")


def test_the_released_prompt_is_stripped_and_pairs_need_no_negatives(tiny_folder, nli_csv, tmp_path):
    care = EOLTripletsDataset(nli_csv, tiny_folder, prompt="care")
    released = EOLTripletsDataset(nli_csv, tiny_folder, prompt="care_train")
    newline = getattr(care.processor, "tokenizer", care.processor)("\n")["input_ids"]
    assert care[0]["ids"][0] == released[0]["ids"][0] + newline
    pairs = EOLTripletsDataset(nli_csv, tiny_folder, hard_negatives=False)
    assert len(pairs[0]["ids"]) == 2
    with pytest.raises(ValueError, match="items mix"):
        collate_eol_triplets([pairs[0], care[0]])


@pytest.mark.parametrize("recipe", ["stage2_paper", "stage2_released", "stage2_released_deepspeed", "e5v"])
def test_recipes_hold_the_published_values(recipe):
    cfg = Config.fromfile(os.path.join(RECIPES, f"{recipe}.yaml"))
    per_step = cfg.train_dataloader.batch_size * cfg.vlr.world_size * cfg.optim_wrapper.get("accumulative_counts", 1)
    if recipe == "stage2_released_deepspeed":
        per_step *= cfg.strategy.gradient_accumulation_steps
    assert per_step == cfg.vlr.global_batch == 768
    assert cfg.model.loss == dict(type="SupervisedSimCSELoss", temperature=0.05)
    assert cfg.train_cfg.max_epochs == 2 and cfg.model.embedder.max_text_tokens == 32
    lr = cfg.optim_wrapper.optimizer.lr
    assert lr == {"stage2_paper": 2e-4, "stage2_released": 2e-5, "stage2_released_deepspeed": 2e-5, "e5v": 4e-4}[recipe]
    warmup = cfg.param_scheduler[0]
    if recipe == "e5v":
        assert cfg.model.finetune == "lora" and cfg.model.lora.r == 64 and warmup.end == 100 and not warmup.by_epoch
    else:
        ratio = {"stage2_paper": 0.2}.get(recipe, 0.1)
        assert warmup.end == pytest.approx(ratio * cfg.train_cfg.max_epochs) and cfg.model.finetune == "full"


@pytest.mark.parametrize("recipe", ["stage1", "stage2_paper", "stage2_released", "stage2_released_deepspeed", "e5v"])
def test_vlr_train_reads_each_care_recipe_as_an_mmengine_config(recipe):
    """``stage2_released_deepspeed`` names its ``default_scope`` two ``_base_`` files up."""
    from vlr_plugins.integrations.mmengine.native import is_native_config

    assert is_native_config(os.path.join(RECIPES, f"{recipe}.yaml"))
    assert not is_native_config(os.path.join(RECIPES, "_stage2.yaml"))  # a base: no vlr block


def test_the_flexible_runner_path_runs_the_same_model(tiny_folder, nli_csv, tmp_path):
    """The GPU recipes use FlexibleRunner (DeepSpeed / FSDP strategies); on CPU its
    single-device strategy runs the same model, dataset and hooks."""
    from mmengine.runner import FlexibleRunner

    cfg = stage2_config("stage2_paper", tiny_folder, nli_csv, tmp_path)
    cfg.runner_type = "FlexibleRunner"
    cfg.strategy = dict(type="SingleDeviceStrategy")
    runner = FlexibleRunner.from_cfg(cfg)
    runner.train()  # the flexible runner builds the model here
    after = runner.model.embedder.model.state_dict()
    before = EOLEmbedder(tiny_folder).model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if ".visual." in k)
    assert any(not torch.equal(before[k], after[k]) for k in before if ".language_model." in k)


class _RealProblems:
    """A hook that warns, as a run's own code would: a Python warning and a log record."""

    def before_train(self, runner) -> None:
        warnings.warn("the run's own warning", UserWarning)
        runner.logger.warning("the run's own log warning")


@pytest.mark.parametrize("verbose", [False, True])
def test_a_flexible_runner_run_shows_progress_and_real_warnings_and_logs_the_rest(verbose, tiny_folder, nli_csv,
                                                                                 tmp_path, capsys):
    """CaRe's DeepSpeed recipe runs on FlexibleRunner, whose strategy builds the logger: its
    console is filtered as the Runner's is, and its log file keeps everything."""
    from mmengine.hooks import Hook

    from vlr_plugins.integrations.mmengine.console import NOISE, build_runner, third_party_warnings

    cfg = stage2_config("stage2_paper", tiny_folder, nli_csv, tmp_path)
    cfg.runner_type, cfg.log_level = "FlexibleRunner", "INFO"
    hook = type("RealProblemsHook", (_RealProblems, Hook), {})
    # pytest records warnings itself: show them as Python does by default, and keep the list
    with warnings.catch_warnings(record=True) as seen, third_party_warnings(verbose):  # as `vlr train` runs
        runner = build_runner(cfg, verbose=verbose)
        assert type(runner).__mro__[1] is FlexibleRunner
        runner.register_hook(hook())
        runner.train()
    captured = capsys.readouterr()
    console = captured.out + captured.err
    log = (tmp_path / runner.timestamp / f"{runner.timestamp}.log").read_text()
    assert "the run's own warning" in [str(w.message) for w in seen]
    assert "the run's own log warning" in console and "Epoch(train) [1][10/10]" in console
    for line in ("System environment", "Config:", "Hooks will be executed", "SyncBatchNorm", "Exp name:"):
        assert line in log, line
        assert (line in console) is verbose, line
    for notice in NOISE:  # HardDiskBackend's comes once per process, as FileClient caches its backends
        if re.search(notice.message, log):
            assert bool(re.search(notice.message, console)) is verbose, notice.message
        else:
            assert "HardDiskBackend" in notice.message


def test_vlr_train_builds_the_recipes_flexible_runner_with_a_quiet_console(tiny_folder, nli_csv, tmp_path, capsys):
    from vlr_plugins.cli import main

    work = tmp_path / "run"
    assert main(["train", "care/stage2_paper", "--train", nli_csv, "--work-dir", str(work),
                 "--set", f"model.embedder.pretrained={tiny_folder}", f"train_dataloader.dataset.tokenizer={tiny_folder}",
                 "train_dataloader.batch_size=2", "train_dataloader.num_workers=0",
                 "train_dataloader.persistent_workers=false", "train_cfg.max_epochs=1", "runner_type=FlexibleRunner",
                 "strategy={type: SingleDeviceStrategy}",  # a section the recipe lacks, added whole
                 "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.01}}",
                 "env_cfg.dist_cfg.backend=gloo"]) == 0
    console = capsys.readouterr().out
    (log,) = work.glob("*/*.log")
    assert f"full log: {log}" in console and "Epoch(train) [1][10/10]" in console
    assert "System environment" not in console and "Config:" not in console
    assert "System environment" in log.read_text() and (work / "epoch_1.pth").is_file()


def test_vlr_train_runs_a_care_recipe_filled_from_the_command_line(tiny_folder, nli_csv, tmp_path, capsys):
    from vlr_plugins.cli import main

    work = tmp_path / "run"
    argv = ["train", "care/stage2_paper", "--train", nli_csv, "--work-dir", str(work),
            "--set", f"model.embedder.pretrained={tiny_folder}", f"train_dataloader.dataset.tokenizer={tiny_folder}",
            "train_dataloader.batch_size=2", "train_dataloader.num_workers=0",
            "train_dataloader.persistent_workers=false", "train_cfg.max_epochs=1",
            "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.01}}",
            "env_cfg.dist_cfg.backend=gloo"]
    assert main(argv) == 0, capsys.readouterr().err
    assert (work / "epoch_1.pth").is_file()
    # a value left at '???' is named with the option that fills it, before anything runs
    code = main(["train", "care/stage2_paper", "--work-dir", str(tmp_path / "other")])
    err = capsys.readouterr().err
    assert code == 2 and "model.embedder.pretrained" in err and "--train FILE" in err
    assert not (tmp_path / "other").exists()
    assert main(["train", "care/stage2_paper", "--set", "modle.x=1", "--work-dir", str(tmp_path / "o")]) == 2
    assert "--set: modle.x" in capsys.readouterr().err
    if not torch.cuda.is_available():  # the recipe's mixed precision is refused up front, with the way out
        assert main(argv[:-2] + ["env_cfg.dist_cfg.backend=gloo"]) == 2
        assert "AmpOptimWrapper" in capsys.readouterr().err


def test_vlr_train_care_resumes_after_kill(tiny_folder, nli_csv, tmp_path):
    """``vlr train care/stage2_paper`` killed with SIGKILL once its first epoch's checkpoint is
    written, then ``--resume auto``: the run ends where an uninterrupted one would (3 epochs
    of 20 steps), with AdamW's state carried on."""
    import signal
    import subprocess
    import time

    from vlr_plugins.cli import main

    work = tmp_path / "run"
    argv = ["train", "care/stage2_paper", "--train", nli_csv, "--work-dir", str(work),
            "--set", f"model.embedder.pretrained={tiny_folder}", f"train_dataloader.dataset.tokenizer={tiny_folder}",
            "train_dataloader.batch_size=1", "train_dataloader.num_workers=0",
            "train_dataloader.persistent_workers=false", "train_cfg.max_epochs=3",
            "optim_wrapper={type: OptimWrapper, optimizer: {type: AdamW, lr: 0.01}}",
            "env_cfg.dist_cfg.backend=gloo"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "vlr_plugins.cli", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while not (work / "last_checkpoint").exists():
            if proc.poll() is not None:
                pytest.fail(f"training stopped with status {proc.returncode} before its first checkpoint: "
                            f"{proc.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "no checkpoint after 300 s"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    first = torch.load((work / "last_checkpoint").read_text().strip(), map_location="cpu", weights_only=True)
    assert first["meta"]["epoch"] < 3
    assert main([*argv, "--resume", "auto"]) == 0
    ckpt = torch.load(work / "epoch_3.pth", map_location="cpu", weights_only=True)
    assert ckpt["meta"]["epoch"] == 3 and ckpt["meta"]["iter"] == 60
    assert {int(s["step"]) for s in ckpt["optimizer"]["state"].values()} == {60}, "AdamW's state went on"
    assert len(ckpt["param_schedulers"]) == len(first["param_schedulers"]) > 0
    straight = tmp_path / "straight"  # the same run, never killed: the schedules end in the same place
    assert main([*[a if a != str(work) else str(straight) for a in argv]]) == 0
    reference = torch.load(straight / "epoch_3.pth", map_location="cpu", weights_only=True)
    assert ([s["last_step"] for s in ckpt["param_schedulers"]]
            == [s["last_step"] for s in reference["param_schedulers"]]), "the schedules went on"
