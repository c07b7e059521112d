"""What the vlr side of an open_clip_train run takes (``--vlr-*``), as data: importable without
torch or open_clip, so ``vlr openclip-train --help`` and its refusals of bad options answer at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vlr_plugins.recipe import TextViews

__all__ = ["TEMPERATURE_SOURCES", "VLRTrainOptions"]

#: where the contrastive temperature comes from: ``model`` (open_clip's learnable
#: ``logit_scale``) or ``loss`` (the core loss's own)
TEMPERATURE_SOURCES = ("model", "loss")


@dataclass
class VLRTrainOptions:
    """What the vlr side of a run needs; :mod:`.train` builds it from the command line.

    ``context_length``: stretch the text tower to this many positions (``None``: keep,
    unless the model name is ``<base>-ctx<N>``). ``keep_positions`` rows stay as they
    were, and with ``freeze_kept_positions`` they do not train (Long-CLIP).
    """

    loss: dict[str, Any] = field(default_factory=lambda: {"type": "InfoNCELoss"})
    views: TextViews | None = None
    temperature: str = "model"
    short: str | None = None
    image_embeddings: str | None = None
    image_key: str | None = None
    image_root: str | None = None
    context_length: int | None = None
    keep_positions: int = 20
    freeze_kept_positions: bool = True
    fraction: float = 1.0
    data_seed: int = 0
