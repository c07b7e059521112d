"""Shared fixtures (a tiny synthetic world, a tiny BLIP-shaped text encoder config) and the
``gpu`` marker's rule.

A test marked ``@pytest.mark.gpu`` needs a CUDA device: without one it skips, and with
``VLR_REQUIRE_GPU=1`` (set by ``benchmarks/gpu_check.sh``) it fails instead, as does any
other skip of such a test (a missing package, say) and any skip of the whole module that
holds it, so that the GPU check never passes by running nothing.

The one exception is an optional accelerator package (vLLM, flash-attn): a gpu test marked
``@pytest.mark.optional_package("vllm")`` skips when that package is not installed, even
under ``VLR_REQUIRE_GPU=1``, with a reason that starts with :data:`OPTIONAL_SKIP`; the GPU
check's summary lists it as not run, apart from the failures.
"""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: set by benchmarks/gpu_check.sh: a ``gpu`` test may not skip
REQUIRE_GPU = "VLR_REQUIRE_GPU"
#: how a skip for a missing optional package starts (benchmarks/gpu_summary.py reads it)
OPTIONAL_SKIP = "optional package not installed"
#: how benchmarks/gpu_check.sh finds the files that hold gpu tests
_GPU_MARK = re.compile(r"\bmark\.gpu\b")


def _gpu_required() -> bool:
    return os.environ.get(REQUIRE_GPU, "") not in ("", "0")


def pytest_collection_modifyitems(config, items):
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu:
        return
    import torch

    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason=f"needs a CUDA device (torch {torch.__version__}, CUDA build "
                                       f"{torch.version.cuda}, none visible); benchmarks/gpu_check.sh runs it on one")
        for item in gpu:
            item.add_marker(skip)
        return
    import importlib.util

    for item in gpu:
        for mark in item.iter_markers("optional_package"):
            missing = [name for name in mark.args if importlib.util.find_spec(name) is None]
            if missing:
                item.add_marker(pytest.mark.skip(reason=f"{OPTIONAL_SKIP}: {', '.join(missing)} (not run)"))


def _reason(longrepr) -> str:
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and _gpu_required() and item.get_closest_marker("gpu") is not None
            and not _reason(report.longrepr).startswith(OPTIONAL_SKIP)):
        report.outcome = "failed"
        report.longrepr = f"a gpu test may not skip under {REQUIRE_GPU}=1; it did: {_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if (report.skipped and _gpu_required() and isinstance(collector, pytest.Module)
            and _GPU_MARK.search(collector.path.read_text(encoding="utf-8"))):  # e.g. a module-level importorskip
        report.outcome = "failed"
        report.longrepr = (f"{collector.nodeid}: skipped whole under {REQUIRE_GPU}=1, so its gpu tests "
                           f"would not run: {_reason(report.longrepr)}")


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """Paths of a small synthetic world written once per session (train, eval, store, tokenizer)."""
    from vlr_plugins.demo.synthetic_world import SyntheticWorld, SyntheticWorldConfig

    world = SyntheticWorld(SyntheticWorldConfig(seed=1, num_train=48, num_eval=16, dim=32))
    paths = world.write(tmp_path_factory.mktemp("world"))
    return {**{k: str(v) for k, v in paths.items()}, "object": world}


@pytest.fixture(scope="session")
def tiny_encoder_cfg(tiny_world):
    """A recipe ``model`` mapping for a random-init 1-layer BLIP text encoder."""
    tok = tiny_world["object"].tokenizer()
    return {
        "type": "BlipTextEncoder",
        "pretrained": None,
        "config": dict(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=160, pad_token_id=tok.pad_token_id,
                       bos_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id),
        "embed_dim": 32,
        "tokenizer": tiny_world["tokenizer"],
    }


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tiny_world, tiny_encoder_cfg):
    """A `vlr train` checkpoint (C5 on the tiny world, one epoch), written once per session."""
    import logging

    pytest.importorskip("mmengine")
    from mmengine.config import Config
    from mmengine.runner import Runner

    from vlr_plugins.integrations.mmengine import recipe_to_mmengine_config
    from vlr_plugins.recipe import load_recipe

    work = tmp_path_factory.mktemp("run")
    recipe = load_recipe("paragraph/c5", {
        "model": tiny_encoder_cfg,
        "data": {"train": tiny_world["train"], "image_embeddings": tiny_world["image_embeddings"]},
        "train": {"batch_size": 16, "epochs": 1, "warmup_steps": 1, "num_workers": 0, "lr": 1e-3},
    })
    Runner.from_cfg(Config(recipe_to_mmengine_config(recipe, str(work), log_level="WARNING"))).train()
    logging.getLogger("mmengine").handlers.clear()
    return work / "epoch_1.pth"


@pytest.fixture(autouse=True)
def _quiet_mmengine():
    """After each test, MMEngine's logger loses its handlers: a runner adds a file handler in its
    work_dir (a test's tmp_path) and a console handler, which later tests would keep writing to."""
    yield
    import logging

    logging.getLogger("mmengine").handlers.clear()
