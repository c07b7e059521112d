"""``cpu_blas``: a test taking it runs once under each BLAS the engine's CPU tile products may
use (:mod:`vlr_plugins.eval._cpu_blas`), chosen by ``VLR_CPU_BLAS``; numpy's only on a CPU
where the engine may take it (where its BLAS scores equal embeddings equally wherever they
sit: :func:`~vlr_plugins.eval._cpu_blas.invariant`), else that run is skipped, saying why."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["torch", "numpy"])
def cpu_blas(request, monkeypatch):
    if request.param == "numpy":
        from vlr_plugins.eval._cpu_blas import invariant

        if not invariant():
            import numpy as np

            pytest.skip(f"numpy {np.__version__}'s BLAS gives equal rows different scores on this CPU: the engine "
                        "never takes it here (test_cpu_blas checks that)")
    monkeypatch.setenv("VLR_CPU_BLAS", request.param)
    return request.param
