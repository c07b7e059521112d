"""The run's console: progress, results and real warnings; MMEngine's report in the log file."""

from __future__ import annotations

import logging
import re
import warnings

import pytest

pytest.importorskip("mmengine")
from _one_epoch import one_epoch_config  # noqa: E402
from vlr_plugins.integrations.mmengine.console import (  # noqa: E402
    NOISE,
    THIRD_PARTY_WARNINGS,
    ConsoleFilter,
    build_runner,
    third_party_warnings,
)


def _record(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("mmengine", level, __file__, 1, message, None, None)


@pytest.mark.parametrize("level, message, shown, without_progress", [
    (logging.INFO, "Epoch(train) [1][10/40]  lr: 1.0e-05  loss: 4.3", True, False),
    (logging.INFO, "Epoch(val) [1][4/4]  short/i2t_r1: 12.5", True, False),
    (logging.INFO, "Saving checkpoint at 1 epochs", True, False),
    (logging.INFO, "\n----\nSystem environment:\n    sys.platform: linux", False, False),
    (logging.INFO, "Config:\nmodel = dict(...)", False, False),
    (logging.INFO, "Hooks will be executed in the following order:", False, False),
    (logging.WARNING, "Dataset ParagraphTextViewsDataset has no metainfo. ``dataset_meta`` ...", False, False),
    (logging.WARNING, '"FileClient" will be deprecated in future.', False, False),
    (logging.WARNING, "The model and loaded state dict do not match exactly", True, True),
    (logging.ERROR, "something failed", True, True),
])
def test_the_console_filter(level, message, shown, without_progress):
    assert ConsoleFilter().filter(_record(level, message)) is shown
    assert ConsoleFilter(progress=False).filter(_record(level, message)) is without_progress


def _warn_from(module: str, message: str, category: type[Warning]) -> None:
    warnings.warn_explicit(message, category, module.replace(".", "/") + ".py", 1, module=module)


def test_third_party_warnings_hides_each_listed_warning_by_message_category_and_module():
    from torch.cuda.amp import GradScaler

    amp = "mmengine.optim.optimizer.amp_optimizer_wrapper"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        GradScaler(enabled=False)  # torch's own text, attributed to the caller: this test
    (deprecation,) = [str(w.message) for w in seen if w.category is FutureWarning]
    notice = next(n for n in THIRD_PARTY_WARNINGS if n.category is FutureWarning)
    assert re.match(notice.message, deprecation) and re.fullmatch(notice.emitter, amp)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with third_party_warnings():
            _warn_from(amp, deprecation, FutureWarning)  # the listed one: hidden
            _warn_from("vlr_plugins.losses.x", deprecation, FutureWarning)  # same text, our module
            _warn_from(amp, deprecation, UserWarning)  # same text and module, another category
            _warn_from(amp, "`torch.cuda.amp.autocast(args...)` is deprecated", FutureWarning)
            _warn_from("somelib", "old API", DeprecationWarning)  # not listed
            _warn_from("vlr_plugins.x", "our deprecation", DeprecationWarning)
            warnings.warn("a real problem", UserWarning)
        shown = [(str(w.message), w.category) for w in seen]
        assert shown == [(deprecation, FutureWarning), (deprecation, UserWarning),
                         ("`torch.cuda.amp.autocast(args...)` is deprecated", FutureWarning),
                         ("old API", DeprecationWarning), ("our deprecation", DeprecationWarning),
                         ("a real problem", UserWarning)]
        _warn_from(amp, deprecation, FutureWarning)  # the filters are restored outside the block
        assert str(seen[-1].message) == deprecation and len(seen) == 7
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("ignore")
        with third_party_warnings(verbose=True):
            _warn_from(amp, deprecation, FutureWarning)
            _warn_from("somelib", "old API", DeprecationWarning)
        assert [str(w.message) for w in seen] == [deprecation, "old API"]


def test_peft_reading_transformers_deprecated_checkpointing_alias_is_not_shown():
    transformers = pytest.importorskip("transformers")
    model = transformers.BertModel(transformers.BertConfig(vocab_size=10, hidden_size=8, num_hidden_layers=1,
                                                           num_attention_heads=2, intermediate_size=8))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        getattr(model, "is_gradient_checkpointing", True)  # as peft.PeftModel.__init__ does
        with third_party_warnings():
            getattr(model, "is_gradient_checkpointing", True)
        with third_party_warnings(verbose=True):
            getattr(model, "is_gradient_checkpointing", True)
    assert [w.category for w in seen] == [FutureWarning, FutureWarning]
    (notice,) = [n for n in THIRD_PARTY_WARNINGS if re.match(n.message, str(seen[0].message))]
    assert re.fullmatch(notice.emitter, "transformers.modeling_utils")


def test_the_runner_logs_everything_to_its_file_and_little_to_the_console(tiny_world, tiny_encoder_cfg, tmp_path,
                                                                          capsys):
    from mmengine.config import Config

    cfg = Config(one_epoch_config("paragraph/c5", tiny_world, tiny_encoder_cfg, tmp_path / "work"))
    try:
        runner = build_runner(cfg)
        runner.logger.info("Epoch(train) [1][1/3]  loss: 1.0")
        runner.logger.warning("Dataset X has no metainfo.")
        console = capsys.readouterr().out
        log = (tmp_path / "work" / runner.timestamp / f"{runner.timestamp}.log").read_text()
    finally:
        logging.getLogger("mmengine").handlers.clear()
    assert "Epoch(train) [1][1/3]" in console
    assert "System environment" not in console and "Config:" not in console and "no metainfo" not in console
    for line in ("System environment", "Config:", "Epoch(train) [1][1/3]", "no metainfo"):
        assert line in log, line


class _RealProblems:
    """A hook that warns, as a run's own code would: a Python warning and a log record."""

    def before_train(self, runner) -> None:
        warnings.warn("the run's own warning", UserWarning)
        runner.logger.warning("the run's own log warning")


@pytest.mark.parametrize("verbose", [False, True])
def test_a_training_run_shows_real_warnings_and_none_of_the_noise(verbose, tiny_world, tiny_encoder_cfg, tmp_path,
                                                                 capsys):
    from mmengine.config import Config
    from mmengine.hooks import Hook

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe

    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "num_workers": 0, "log_interval": 1},
        "eval": [{"name": "long", "ann_file": tiny_world["eval_long"], "max_tokens": 128}]})
    hook = type("RealProblemsHook", (_RealProblems, Hook), {})
    try:
        # pytest records warnings itself: show them as Python does by default, and keep the list
        with warnings.catch_warnings(record=True) as seen, third_party_warnings(verbose):  # as `vlr train` runs
            cfg = Config(recipe_to_mmengine_config(recipe, str(tmp_path / "work")))
            runner = build_runner(cfg, verbose=verbose)
            runner.register_hook(hook())
            runner.train()
            runner.test()
        captured = capsys.readouterr()
        log = (tmp_path / "work" / runner.timestamp / f"{runner.timestamp}.log").read_text()
    finally:
        logging.getLogger("mmengine").handlers.clear()
    console = captured.out + captured.err
    assert "the run's own warning" in [str(w.message) for w in seen]
    assert "the run's own log warning" in console
    assert "Epoch(train) [1][1/3]" in console
    # every notice the run emitted is kept in its log; HardDiskBackend's comes once per process only,
    # as FileClient caches its backends
    emitted = [n for n in NOISE if re.search(n.message, log)]
    assert [n.message for n in emitted if "HardDiskBackend" not in n.message] == [
        n.message for n in NOISE if "HardDiskBackend" not in n.message]
    for notice in NOISE:
        assert bool(re.search(notice.message, console)) is (verbose and notice in emitted), notice.message
