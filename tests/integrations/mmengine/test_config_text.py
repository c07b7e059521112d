"""A run's config formatted once: what MMEngine writes, at one formatting per run."""

from __future__ import annotations

import copy
import logging

import pytest

pytest.importorskip("mmengine")
import mmengine.config.config as mmengine_config  # noqa: E402
import torch  # noqa: E402
from _one_epoch import one_epoch_config  # noqa: E402
from mmengine.config import Config  # noqa: E402

from vlr_plugins.integrations.mmengine.config_text import FormattedOnceConfig  # noqa: E402


@pytest.fixture
def formattings(monkeypatch):
    """How many times MMEngine's config text went through yapf (the costly part)."""
    calls = []
    format_code = mmengine_config.FormatCode

    def counted(*args, **kwargs):
        calls.append(1)
        return format_code(*args, **kwargs)

    monkeypatch.setattr(mmengine_config, "FormatCode", counted)
    return calls


def _plain():
    return dict(model=dict(type="M", layers=[1, 2], lr=1e-3, name="a'b"), work_dir="w", flag=True,
                pairs=(dict(a=1), 2.5), nothing=None)


def test_the_text_is_mmengines_formatted_once_per_content(formattings):
    cfg = FormattedOnceConfig.of(Config(_plain()))
    reference = Config(_plain()).pretty_text
    formattings.clear()
    assert cfg.pretty_text == reference and cfg.pretty_text == reference
    assert cfg.dump() == reference
    assert len(formattings) == 1
    copied = copy.deepcopy(cfg)  # Runner.from_cfg and Runner.__init__ each copy the config
    assert type(copied) is FormattedOnceConfig and copied.pretty_text == reference and len(formattings) == 1
    # a value changed (or a type: 1 and True print differently) is formatted again
    for change in ({"model.lr": 2e-3}, {"flag": 1}, {"model.layers": (1, 2)}):
        changed = copy.deepcopy(cfg)
        changed.merge_from_dict(change)
        plain = Config(_plain())
        plain.merge_from_dict(change)
        assert changed.pretty_text == plain.pretty_text != reference, change
    assert FormattedOnceConfig.of(_plain()).pretty_text == reference  # a dict, as Runner.from_cfg takes
    assert FormattedOnceConfig.of(cfg) is cfg


def test_a_run_formats_its_config_once_and_writes_what_mmengine_writes(tiny_world, tiny_encoder_cfg, tmp_path,
                                                                       formattings):
    from vlr_plugins.integrations.mmengine.console import build_runner

    plain = one_epoch_config("paragraph/c1", tiny_world, tiny_encoder_cfg, tmp_path)
    try:
        runner = build_runner(Config(plain))
        runner.train()
    finally:
        logging.getLogger("mmengine").handlers.clear()
    assert len(formattings) == 1, "the log, vis_data/config.py, the config copy, run info and checkpoint share one"
    # what plain MMEngine writes for this config: Runner.from_cfg fills in nothing it prints
    expected = Config(plain).pretty_text
    ts = runner.timestamp
    log = (tmp_path / ts / f"{ts}.log").read_text()
    assert f" - INFO - Config:\n{expected}\n" in log
    assert (tmp_path / f"{ts}.py").read_text() == expected
    assert (tmp_path / ts / "vis_data" / "config.py").read_text() == expected
    ckpt = torch.load(tmp_path / "epoch_1.pth", map_location="cpu", weights_only=True)
    assert ckpt["meta"]["cfg"] == expected
