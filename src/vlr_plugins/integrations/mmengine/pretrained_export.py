"""After training, the trained model as a transformers folder: what the next stage loads.

CaRe's stage II starts from the stage-I MLLM (``model.embedder.pretrained``), which
``EOLEmbedder`` loads with ``from_pretrained``; MMEngine's own checkpoints hold the
wrapper's state dict instead. :class:`ExportPretrainedHook` calls the model's
``save_pretrained`` once training ends, on the main process; under FSDP (whose ranks each
hold a shard of every parameter) inside ``summon_full_params``, which every rank enters to
gather the whole parameters on the main process. (DeepSpeed's ZeRO-2, the stage the recipes
use, keeps every parameter whole on each rank.)
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from mmengine.dist import is_main_process
from mmengine.hooks import Hook

from vlr_plugins.errors import ConfigError
from vlr_plugins.integrations.mmengine.registry import HOOKS

__all__ = ["ExportPretrainedHook"]


@HOOKS.register_module()
class ExportPretrainedHook(Hook):
    """Write ``runner.model.save_pretrained(work_dir / out_dir)`` after the last iteration.

    ``out_dir``: a folder name inside the run's ``work_dir`` (default ``pretrained``), or an
    absolute path. The model must have ``save_pretrained(folder)``
    (:class:`~vlr_plugins.integrations.mmengine.mllm_sft_model.CaptionSFTModel`: the MLLM,
    LoRA merged, with its processor). Add it with
    ``custom_hooks=[dict(type='ExportPretrainedHook')]``.
    """

    priority = "LOWEST"

    def __init__(self, out_dir: str = "pretrained") -> None:
        if not isinstance(out_dir, str) or not out_dir.strip():
            raise ConfigError(f"ExportPretrainedHook: out_dir must be a folder name, found {out_dir!r}")
        self.out_dir = out_dir

    def after_train(self, runner) -> None:
        model = getattr(runner.model, "module", runner.model)
        if not hasattr(model, "save_pretrained"):
            raise ConfigError(f"ExportPretrainedHook: {type(model).__name__} has no save_pretrained(folder)")
        with _whole_parameters(runner.model):
            if is_main_process():
                folder = os.path.join(runner.work_dir, self.out_dir)
                model.save_pretrained(folder)
                runner.logger.info(f"wrote the trained model as a transformers folder: {folder}")


def _whole_parameters(wrapped: Any) -> Any:
    """A context in which the main process's modules hold every parameter whole: under torch's
    FSDP ``summon_full_params`` (collective: every rank enters it), else nothing to do."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(wrapped, FSDP):
        return FSDP.summon_full_params(wrapped, writeback=False, rank0_only=True)
    return contextlib.nullcontext()
