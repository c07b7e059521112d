"""The dtype an MLLM is loaded in: ``--model-dtype {auto,float32,bfloat16,float16}`` of ``vlr
eval`` / ``vlr precompute`` (``mllm:`` specs), ``vlr lens`` and ``vlr caption``, and how a run
records the dtype it used.

``auto`` is what transformers 5 loads by default: the checkpoint's own dtype (bfloat16 for
Qwen2-VL and CaRe). On a CPU all three dtypes load and run (torch 2.14 has CPU kernels for
bfloat16 and float16 matmuls and convolutions, so neither is refused), but without AMX or
AVX512-BF16 a half-precision matmul is tens of times slower there than a float32 one: on a
CPU choose float32; on a GPU bfloat16 (or float16 where bfloat16 is not supported).

Runs record the dtype the model computes in (:func:`dtype_name`, ``auto`` resolved) as
``model_dtype``: in ``vlr eval``'s results.json, in a store's meta (so a resumed ``vlr
precompute`` at another dtype is refused like any other changed setting), in ``lens.json``
and in a captions file's settings record.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["MODEL_DTYPES", "add_model_dtype_option", "dtype_name", "resolve_model_dtype", "slow_on_cpu"]

#: the choices of ``--model-dtype``; ``auto``: the checkpoint's own
MODEL_DTYPES = ("auto", "float32", "bfloat16", "float16")
_HALF = ("float16", "bfloat16")  # by name: this module imports torch only in the functions (`--help` needs none)


def resolve_model_dtype(name: str | torch.dtype | None, where: str = "dtype") -> torch.dtype | None:
    """``"bfloat16"`` -> ``torch.bfloat16``; ``"auto"`` or None -> None (the checkpoint's own).

    Any torch floating dtype name is taken (``EOLEmbedder(dtype="float64")``); anything else
    is a :class:`~vlr_plugins.errors.ConfigError` (a ``ValueError``) naming ``where`` and
    listing :data:`MODEL_DTYPES`.
    """
    import torch

    if name is None or isinstance(name, torch.dtype):
        return name
    if name == "auto":
        return None
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        from vlr_plugins.errors import ConfigError

        raise ConfigError(f"{where}: expected a torch dtype name such as 'bfloat16' (one of "
                          f"{', '.join(MODEL_DTYPES)}; 'auto': the checkpoint's own), found {name!r}")
    return dtype


def dtype_name(module: torch.nn.Module) -> str:
    """The dtype ``module`` computes in, by name (``"bfloat16"``): its first floating-point
    parameter's, which for a transformers model is what ``model.dtype`` says."""
    import torch

    for p in module.parameters():
        if p.is_floating_point():
            return str(p.dtype).removeprefix("torch.")
    return str(torch.get_default_dtype()).removeprefix("torch.")


def slow_on_cpu(module: torch.nn.Module, device: Any) -> str | None:
    """A warning when ``module`` sits in bfloat16 / float16 on a CPU (``auto`` on a bf16
    checkpoint does that), where float32 is much faster; None otherwise."""
    import torch

    if torch.device(device).type != "cpu":
        return None
    name = dtype_name(module)
    if name not in _HALF:
        return None
    return (f"the model computes in {name} on the CPU, where half-precision matmuls are usually many times "
            f"slower than float32; pass --model-dtype float32 for a faster CPU run (docs/care.md)")


def add_model_dtype_option(parser: argparse.ArgumentParser, *aliases: str, what: str = "the MLLM") -> None:
    """Add ``--model-dtype`` (and ``aliases``, e.g. ``"--dtype"``) to ``parser``: one of
    :data:`MODEL_DTYPES`, default ``auto``, read as ``args.model_dtype``."""
    parser.add_argument("--model-dtype", *aliases, dest="model_dtype", choices=MODEL_DTYPES, default="auto",
                        help=f"the dtype {what} is loaded in: auto (default: the checkpoint's own, bfloat16 for "
                             "Qwen2-VL), float32 (the fast choice on a CPU), bfloat16 or float16 (GPUs)")
