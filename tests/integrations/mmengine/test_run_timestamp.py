"""Each run its own timestamp: log folder, log file, logger, message hub and visualizer."""

from __future__ import annotations

import logging
import time

import pytest

pytest.importorskip("mmengine")
from _one_epoch import one_epoch_config  # noqa: E402
from mmengine.config import Config  # noqa: E402
from mmengine.logging import MMLogger  # noqa: E402
from mmengine.runner import Runner  # noqa: E402

from vlr_plugins.integrations.mmengine.console import build_runner  # noqa: E402
from vlr_plugins.integrations.mmengine.run_timestamp import claim_timestamp  # noqa: E402


def test_a_timestamp_taken_in_the_work_dir_or_in_this_process_gets_a_suffix(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert claim_timestamp(a, "20260101_000000") == "20260101_000000" and (a / "20260101_000000").is_dir()
    assert claim_timestamp(a, "20260101_000000") == "20260101_000000_1" and (a / "20260101_000000_1").is_dir()
    (a / "20260101_000001").mkdir()  # another process's run, or an earlier one
    assert claim_timestamp(a, "20260101_000001") == "20260101_000001_1"
    # another work dir: the same name, unless a run of this process is named after it (it would
    # share that run's logger, message hub and visualizer), whichever runner built it
    assert claim_timestamp(b, "20260101_000002") == "20260101_000002"
    MMLogger.get_instance("C1_20260101_000003")
    assert claim_timestamp(b, "20260101_000003") == "20260101_000003_1"
    assert sorted(p.name for p in b.iterdir()) == ["20260101_000002", "20260101_000003_1"]


@pytest.fixture
def one_second(monkeypatch):
    """Runners built while this is on start in the same second, as two `vlr train` could."""
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now)
    return monkeypatch.undo


def _config(recipe_name, tiny_world, tiny_encoder_cfg, work_dir):
    return Config(one_epoch_config(recipe_name, tiny_world, tiny_encoder_cfg, work_dir))


def test_two_runs_started_in_the_same_second_keep_apart(tiny_world, tiny_encoder_cfg, tmp_path, one_second):
    cfg = _config("paragraph/c1", tiny_world, tiny_encoder_cfg, tmp_path / "work")
    try:
        # plain MMEngine: one folder, one log file, and the second run writes with the first's visualizer
        with pytest.warns(UserWarning, match="instance named of .* has been created"):  # MMEngine's own notice
            plain = [Runner.from_cfg(cfg) for _ in range(2)]
        assert plain[0].log_dir == plain[1].log_dir and plain[0].visualizer is plain[1].visualizer
        assert plain[0].message_hub is plain[1].message_hub
        first, second = (build_runner(cfg) for _ in range(2))
        elsewhere = build_runner(_config("paragraph/c1", tiny_world, tiny_encoder_cfg, tmp_path / "other"))
        one_second()
        runs = [first, second, elsewhere, plain[0]]
        assert len({r.log_dir for r in runs}) == 4 and len({r.experiment_name for r in runs}) == 4
        assert len({id(r.visualizer) for r in runs}) == 4 and len({id(r.message_hub) for r in runs}) == 4
        assert len({id(r.logger) for r in runs}) == 4
        stamp = plain[0].timestamp  # the second every run started in
        assert first.timestamp.startswith(stamp) and second.timestamp.startswith(stamp + "_")
        for run in runs[:3]:
            assert run.log_dir == str(tmp_path / ("other" if run is elsewhere else "work") / run.timestamp)
        second.train()
        first.train()
    finally:
        logging.getLogger("mmengine").handlers.clear()
    first_log = (tmp_path / "work" / first.timestamp / f"{first.timestamp}.log").read_text()
    second_log = (tmp_path / "work" / second.timestamp / f"{second.timestamp}.log").read_text()
    for log, run in ((first_log, first), (second_log, second)):
        assert log.count("Epoch(train) [1][3/3]") == 1 and f"Exp name: {run.experiment_name}" in log
    assert (tmp_path / "work" / first.timestamp / "vis_data" / "scalars.json").read_text().count('"step": 3') == 1
    assert (tmp_path / "work" / second.timestamp / "vis_data" / "scalars.json").read_text().count('"step": 3') == 1
    # the work dir's checkpoints are shared as before: the last run to save is the one --resume auto finds
    assert (tmp_path / "work" / "last_checkpoint").read_text().strip().endswith("epoch_1.pth")
