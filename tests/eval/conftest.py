"""``cpu_blas``: a test taking it runs once under each BLAS the engine's CPU tile products may
use (:mod:`vlr_plugins.eval._cpu_blas`), chosen by ``VLR_CPU_BLAS``; numpy's and oneDNN's only
on a CPU where the engine may take them (where they score equal embeddings equally wherever
they sit: :func:`~vlr_plugins.eval._cpu_blas.eligible`), else that run is skipped, saying why.
Those runs count the tiles in torch's ops; one more, ``numba-count``, takes torch's BLAS and
numba's counting loops (:mod:`vlr_plugins.eval._count_kernels`; skipped without numba), which
the engine takes for large work, so that every such test checks them against its reference too."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["torch", "numpy", "onednn", "numba-count"])
def cpu_blas(request, monkeypatch):
    from vlr_plugins.eval._cpu_blas import _available, eligible

    if request.param == "numba-count":
        pytest.importorskip("numba")
        monkeypatch.setenv("VLR_COUNT_KERNEL", "numba")
        monkeypatch.setenv("VLR_CPU_BLAS", "torch")
        return "torch"
    monkeypatch.setenv("VLR_COUNT_KERNEL", "torch")
    if not eligible(request.param):
        import numpy as np

        what = f"numpy {np.__version__}'s BLAS" if request.param == "numpy" else "oneDNN's fp32 product"
        why = "gives equal rows different scores on this CPU" if _available(request.param) else "is not in this build"
        pytest.skip(f"{what} {why}: the engine never takes it here (test_cpu_blas checks that)")
    monkeypatch.setenv("VLR_CPU_BLAS", request.param)
    return request.param
