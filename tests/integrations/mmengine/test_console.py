"""The run's console: progress, results and real warnings; MMEngine's report in the log file."""

from __future__ import annotations

import logging
import warnings

import pytest

pytest.importorskip("mmengine")
from vlr_plugins.integrations.mmengine.console import ConsoleFilter, build_runner, third_party_warnings  # noqa: E402


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


def test_third_party_deprecations_are_hidden_in_the_block_only():
    def third_party():
        warnings.warn_explicit("old API", FutureWarning, "site-packages/lib.py", 1, module="somelib")

    def ours():
        warnings.warn_explicit("our deprecation", DeprecationWarning, "vlr.py", 1, module="vlr_plugins.x")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with third_party_warnings():
            third_party()
            ours()
            warnings.warn("a real problem", UserWarning)
        assert [str(w.message) for w in seen] == ["our deprecation", "a real problem"]
        third_party()  # the filters are restored outside the block
        assert str(seen[-1].message) == "old API"
    with warnings.catch_warnings(record=True) as seen:
        with third_party_warnings(verbose=True):
            third_party()
        assert [str(w.message) for w in seen] == ["old API"]


def test_the_runner_logs_everything_to_its_file_and_little_to_the_console(tiny_world, tiny_encoder_cfg, tmp_path,
                                                                          capsys):
    from mmengine.config import Config

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe

    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "num_workers": 0, "log_interval": 1}})
    cfg = Config(recipe_to_mmengine_config(recipe, str(tmp_path / "work")))
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
