"""MMEngine's distributed Runner on CPU processes (gloo), without patching MMEngine.

MMEngine's ``pytorch`` launcher assumes one GPU per process twice: ``init_dist`` calls
``torch.cuda.set_device(LOCAL_RANK)`` before it starts the process group (which raises
"Found no NVIDIA driver" on a CPU-only machine), and ``Runner.wrap_model`` wraps the model
in ``MMDistributedDataParallel(device_ids=[LOCAL_RANK])``, which DDP refuses for a module
on the CPU. ``vlr train``'s runner (:func:`~vlr_plugins.integrations.mmengine.console.build_runner`)
fills both gaps where MMEngine leaves them open, and only there:

- :func:`init_cpu_process_group` starts the process group itself (``env://``, from the
  variables torchrun sets, with the config's ``env_cfg.dist_cfg``: backend, timeout)
  before MMEngine's ``setup_env`` runs, when the launcher is ``pytorch`` and MMEngine's
  device is the CPU (no CUDA, NPU, MLU or MPS device visible); MMEngine then finds the
  group started and skips ``init_dist``;
- :class:`CpuCapableDistributedDataParallel` (registered in ``MODEL_WRAPPERS``) is
  MMEngine's ``MMDistributedDataParallel`` that drops ``device_ids`` / ``output_device``
  when the module's parameters are on the CPU (DDP's own CPU mode), and passes them on
  otherwise; :func:`cpu_model_wrapper_cfg` makes it the wrapper of a CPU run that names
  none.

``FlexibleRunner``'s DDP and FSDP strategies make the same assumptions;
:mod:`~vlr_plugins.integrations.mmengine.strategies` fills them with these pieces
(:func:`on_cpu_processes` tells when).

With an accelerator per process nothing changes: MMEngine's own path runs.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist
from mmengine.model import MMDistributedDataParallel

from vlr_plugins.errors import ConfigError
from vlr_plugins.integrations.mmengine.registry import MODEL_WRAPPERS, SCOPE

__all__ = ["CpuCapableDistributedDataParallel", "cpu_model_wrapper_cfg", "init_cpu_process_group", "on_cpu_processes"]


@MODEL_WRAPPERS.register_module()
class CpuCapableDistributedDataParallel(MMDistributedDataParallel):
    """``MMDistributedDataParallel`` that also wraps a module on the CPU: there DDP takes no
    ``device_ids`` (MMEngine passes ``[LOCAL_RANK]`` to every DDP subclass), so they are
    dropped; on a GPU they pass through unchanged."""

    def __init__(self, module: torch.nn.Module, device_ids: Any = None, output_device: Any = None,
                 **kwargs: Any) -> None:
        on_cpu = all(p.device.type == "cpu" for p in module.parameters())
        if not on_cpu:
            kwargs.update(device_ids=device_ids, output_device=output_device)
        super().__init__(module=module, **kwargs)


def _cpu_run() -> bool:
    """The processes train on the CPU: MMEngine's device is (no CUDA, NPU, MLU or MPS one)."""
    from mmengine.device import get_device

    return get_device() == "cpu"


def on_cpu_processes() -> bool:
    """A process group is started and the processes train on the CPU."""
    return dist.is_available() and dist.is_initialized() and _cpu_run()


def init_cpu_process_group(launcher: str, env_cfg: dict | None) -> bool:
    """Start the process group of a ``pytorch``-launched (torchrun) run on CPU processes,
    as MMEngine would but without ``torch.cuda.set_device``; ``True`` if it did. Nothing
    happens with another launcher, with an accelerator visible, or when a group exists."""
    if launcher != "pytorch" or not _cpu_run() or not dist.is_available() or dist.is_initialized():
        return False
    kwargs = dict((env_cfg or {}).get("dist_cfg") or {})
    backend = kwargs.pop("backend", "gloo")
    if backend == "nccl":
        raise ConfigError("env_cfg.dist_cfg.backend: nccl needs a CUDA device per process and none is visible; "
                          "use gloo on CPU processes")
    timeout = kwargs.get("timeout")
    if isinstance(timeout, (int, float)):  # seconds, as MMEngine's init_dist takes it
        kwargs["timeout"] = datetime.timedelta(seconds=timeout)
    kwargs.pop("init_backend", None)  # "torch" is the only one on CPU
    dist.init_process_group(backend=backend, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), **kwargs)
    return True


def cpu_model_wrapper_cfg(model_wrapper_cfg: dict | None, distributed: bool,
                          find_unused_parameters: bool) -> dict | None:
    """The ``model_wrapper_cfg`` a distributed run on CPU processes wraps its model with:
    MMEngine's default (``broadcast_buffers=False``, the config's
    ``find_unused_parameters``) in :class:`CpuCapableDistributedDataParallel`. A wrapper the
    config names, a GPU run and a one-process run keep theirs."""
    if model_wrapper_cfg is not None or not distributed or not _cpu_run():
        return model_wrapper_cfg
    return dict(type=f"{SCOPE}.{CpuCapableDistributedDataParallel.__name__}", broadcast_buffers=False,
                find_unused_parameters=find_unused_parameters)
