"""``cpu_blas``: a test taking it runs once under each BLAS the engine's CPU tile products may
use (:mod:`vlr_plugins.eval._cpu_blas`), chosen by ``VLR_CPU_BLAS``."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["torch", "numpy"])
def cpu_blas(request, monkeypatch):
    monkeypatch.setenv("VLR_CPU_BLAS", request.param)
    return request.param
