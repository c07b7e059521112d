"""A run's config formatted once: MMEngine's text, byte for byte, without formatting it again.

MMEngine's Runner writes its config as Python text (``Config.pretty_text``: the config
formatted by yapf, 0.6-1 s for a recipe's config on a 2-core machine) in the log, in the
visualizer's ``vis_data/config.py``, in its copy in the work dir (``<timestamp>.py``) and in
the message hub's run info as a run starts, then in every checkpoint's ``meta``: five times
for a one-epoch run. :class:`FormattedOnceConfig` is that config; it formats the text once
and gives the same text again while the config's values are unchanged, so every file and
checkpoint holds what MMEngine would have written.
"""

from __future__ import annotations

from typing import Any

from mmengine.config import Config

__all__ = ["FormattedOnceConfig"]


class FormattedOnceConfig(Config):
    """An MMEngine ``Config`` whose :attr:`pretty_text` is formatted once per content.

    The content is the config's values (``repr(cfg.to_dict())``, which keeps key order and
    types) and its ``format_python_code`` switch; a value changed after the first call is
    formatted again. Copies (``copy.deepcopy``, as ``Runner.from_cfg`` makes) keep the class
    and the formatted text.

    Example::

        cfg = FormattedOnceConfig.of(Config(dict(model=dict(type="M", lr=1e-3))))
        cfg.pretty_text == Config(dict(model=dict(type="M", lr=1e-3))).pretty_text  # True
    """

    @classmethod
    def of(cls, cfg: Config | dict[str, Any]) -> FormattedOnceConfig:
        """``cfg`` (a ``Config``, or a dict as ``Runner.from_cfg`` takes) as this class: a copy,
        or ``cfg`` itself if it is one already."""
        if isinstance(cfg, cls):
            return cfg
        cfg = cfg if isinstance(cfg, Config) else Config(cfg)
        other = cls.__new__(cls)
        # the attributes as Config.__deepcopy__ copies them (its __setattr__ writes config keys)
        for key, value in cfg.__dict__.items():
            object.__setattr__(other, key, value)
        return other.__deepcopy__({})

    @property
    def pretty_text(self) -> str:
        """``Config.pretty_text``, formatted on the first call for these values."""
        key = (self._format_python_code, repr(self.to_dict()))
        cached = self.__dict__.get("_formatted")
        if cached is None or cached[0] != key:
            cached = (key, super().pretty_text)
            object.__setattr__(self, "_formatted", cached)
        return cached[1]
