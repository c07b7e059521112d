"""Long-context open_clip models: configs named ``<base>-ctx<N>`` and a loader that stretches.

``model_configs/`` holds open_clip configs of CLIP ViT-B/32, B/16 and L/14 (plain and
QuickGELU, as OpenAI's weights need) at Long-CLIP's 248 tokens; importing the
integration registers them with ``open_clip.add_model_config``. A pretrained checkpoint
is 77 tokens long, so it is loaded into its base architecture and then stretched with
:func:`vlr_plugins.text.length.extend_text_context` (Long-CLIP: the first 20 positions
kept, the rest interpolated 4x), not by open_clip's own linear resize. Once fine-tuned,
a checkpoint loads back with plain open_clip::

    open_clip.create_model("ViT-B-16-quickgelu-ctx248", pretrained="epoch_1.pt")

Long-CLIP's own released checkpoints (two positional tables, ``positional_embedding`` and
``positional_embedding_res``) load here too, as one table equal to what Long-CLIP's
``encode_text`` adds (:mod:`~vlr_plugins.integrations.open_clip.long_clip_checkpoint`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

__all__ = [
    "CONFIG_DIR",
    "register_long_context_configs",
    "long_context_config",
    "add_long_context_config",
    "parse_long_context_name",
    "create_long_context_model_and_transforms",
    "create_long_context_model",
    "text_positional_embedding",
]

CONFIG_DIR = Path(__file__).parent / "model_configs"
_NAME = re.compile(r"^(?P<base>.+)-ctx(?P<length>\d+)$")
_registered = False


def register_long_context_configs() -> list[str]:
    """Register the shipped ``*-ctx248`` configs with open_clip; returns their names."""
    global _registered
    import open_clip

    if not _registered:
        open_clip.add_model_config(CONFIG_DIR)
        _registered = True
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


def parse_long_context_name(model_name: str) -> tuple[str, int] | None:
    """``"ViT-B-16-ctx248"`` -> ``("ViT-B-16", 248)``; ``None`` for other names."""
    m = _NAME.match(model_name)
    return (m["base"], int(m["length"])) if m else None


def long_context_config(base: str, context_length: int) -> dict[str, Any]:
    """The open_clip config of ``base`` with ``context_length`` text positions."""
    import open_clip

    cfg = open_clip.get_model_config(base)
    if cfg is None:
        raise ValueError(f"open_clip has no model config {base!r} (open_clip.list_models())")
    cfg["text_cfg"]["context_length"] = context_length
    return cfg


def add_long_context_config(base: str, context_length: int, folder: str | os.PathLike) -> str:
    """Write ``<base>-ctx<N>.json`` into ``folder``, register it with open_clip, return its name.

    For bases without a shipped config (your own, or another length); the folder must
    be registered again (this call, or ``open_clip.add_model_config``) in every process
    that loads such a checkpoint.
    """
    import open_clip

    name = f"{base}-ctx{context_length}"
    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(long_context_config(base, context_length), indent=4) + "\n")
    open_clip.add_model_config(path)
    return name


def text_positional_embedding(model: nn.Module) -> nn.Parameter:
    """The text positional table of an open_clip ``CLIP`` or ``CustomTextCLIP``."""
    from torch import nn

    for owner in (model, getattr(model, "text", None)):
        pos = getattr(owner, "positional_embedding", None)
        if isinstance(pos, nn.Parameter):
            return pos
    raise TypeError(
        f"{type(model).__name__} has no text positional_embedding (open_clip CLIP or "
        f"CustomTextCLIP with an open_clip text tower expected)"
    )


def _text_positions(state: dict[str, Any]) -> int | None:
    for key in ("positional_embedding", "text.positional_embedding"):
        if key in state:
            return int(state[key].shape[0])
    return None


def create_long_context_model_and_transforms(
    model_name: str,
    pretrained: str | None = None,
    *,
    context_length: int | None = None,
    keep: int = 20,
    train_new_only: bool = True,
    **kwargs: Any,
) -> tuple[nn.Module, Any, Any]:
    """``open_clip.create_model_and_transforms`` for a longer text context.

    ``model_name``: ``"<base>-ctx<N>"`` (e.g. ``"ViT-B-16-quickgelu-ctx248"``), or any
    open_clip name, ``hf-hub:`` or ``local-dir:`` source together with
    ``context_length``. ``pretrained``: an open_clip tag of the base (``"openai"``) or a
    checkpoint file. A source shorter than the target is loaded at its own length and
    stretched by :func:`~vlr_plugins.text.length.extend_text_context` (``keep`` rows
    kept; ``train_new_only`` keeps them fixed, weight decay included, with
    :func:`~vlr_plugins.text.positions.freeze_leading_rows`); one already at the target
    length (a checkpoint of a previous long fine-tune, a ``local-dir:`` export) is loaded
    as is, its first ``keep`` rows frozen likewise. A checkpoint file of Long-CLIP's own
    (``longclip-B.pt``: ``positional_embedding`` and ``positional_embedding_res``) needs a
    248-position QuickGELU model (``ViT-B-16-quickgelu-ctx248``) and is loaded with its two
    tables as one (rows 0..19 of the first, 20.. of the second; exactly what Long-CLIP's
    ``encode_text`` adds, :mod:`~vlr_plugins.integrations.open_clip.long_clip_checkpoint`),
    else one error naming the file and the key. ``kwargs`` go to open_clip.

    Returns ``(model, preprocess_train, preprocess_val)``; the tokenizer is
    ``open_clip.get_tokenizer(model_name)`` for a registered ``-ctx`` name, else
    ``open_clip.get_tokenizer(source, context_length=N)``.
    """
    import open_clip
    from open_clip.factory import load_state_dict

    from vlr_plugins.integrations.open_clip.long_clip_checkpoint import (
        check_long_clip_context,
        check_long_clip_model,
        fold_long_clip_positions,
        is_long_clip_state,
        load_folded_state,
    )
    from vlr_plugins.text.length import extend_text_context
    from vlr_plugins.text.positions import freeze_leading_rows

    source, target = model_name, context_length
    parsed = parse_long_context_name(model_name)
    if parsed is not None:
        source, length = parsed
        if target is not None and target != length:
            raise ValueError(
                f"{model_name} has {length} text positions; context_length={target} contradicts it"
            )
        target = length
    if target is None:
        raise ValueError(f"{model_name!r} is not a '<base>-ctx<N>' name; give context_length")
    if kwargs.get("force_context_length") not in (None, target):
        raise ValueError(
            f"force_context_length={kwargs['force_context_length']} contradicts the "
            f"target context length {target}"
        )
    kwargs.pop("force_context_length", None)

    state = load_state_dict(pretrained) if pretrained and os.path.isfile(pretrained) else None
    if state is not None and is_long_clip_state(state):
        state = fold_long_clip_positions(state, pretrained)
        check_long_clip_context(model_name, pretrained, target)
        kwargs.pop("require_pretrained", None)  # loaded below
        out = open_clip.create_model_and_transforms(
            source, None, force_context_length=target, **kwargs
        )
        check_long_clip_model(out[0], model_name, pretrained)
        load_folded_state(out[0], state)
    elif state is not None and _text_positions(state) == target:
        del state  # open_clip reads the file itself
        out = open_clip.create_model_and_transforms(
            source, pretrained, force_context_length=target, **kwargs
        )
    else:
        del state
        out = open_clip.create_model_and_transforms(source, pretrained, **kwargs)
    model = out[0]
    have = model.context_length
    if have > target:
        raise ValueError(
            f"{model_name}: the loaded model already has {have} text positions, more "
            f"than the {target} asked for (this only lengthens)"
        )
    if have < target:
        extend_text_context(model, target, keep=keep, train_new_only=train_new_only)
    elif train_new_only and keep:
        pos = text_positional_embedding(model)
        if pos.requires_grad:
            freeze_leading_rows(pos, keep)
    return out


def create_long_context_model(
    model_name: str, pretrained: str | None = None, **kwargs: Any
) -> nn.Module:
    """The model of :func:`create_long_context_model_and_transforms`, without transforms."""
    return create_long_context_model_and_transforms(model_name, pretrained, **kwargs)[0]
