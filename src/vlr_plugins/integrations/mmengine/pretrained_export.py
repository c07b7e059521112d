"""After training, the trained model as a transformers folder: what the next stage loads.

CaRe's stage II starts from the stage-I MLLM (``model.embedder.pretrained``), which
``EOLEmbedder`` loads with ``from_pretrained``; MMEngine's own checkpoints hold the
wrapper's state dict instead. :class:`ExportPretrainedHook` calls the model's
``save_pretrained`` once training ends, on the main process.
"""

from __future__ import annotations

import os

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
        if is_main_process():
            folder = os.path.join(runner.work_dir, self.out_dir)
            model.save_pretrained(folder)
            runner.logger.info(f"wrote the trained model as a transformers folder: {folder}")
