"""The demos ``vlr demo`` runs, offline on a CPU, and the synthetic worlds they train on.

- :func:`run_demo` (:mod:`vlr_plugins.demo.paragraph`): C1 / C5 / C7 of the paragraph
  paper on a :class:`SyntheticWorld` of captions, paragraphs and image embeddings;
- :func:`run_mvc_demo` (:mod:`vlr_plugins.demo.mvc`): Baseline-B and MVC-B on a
  :class:`SyntheticVideoWorld` of clips with summary and detailed captions.

The worlds are applications of :mod:`vlr_plugins.data` (they write its sample and store
formats); nothing in the core imports this package.
"""

from __future__ import annotations

from vlr_plugins._lazy import lazy_exports

__all__ = ["DemoConfig", "run_demo", "MVCDemoConfig", "run_mvc_demo", "SyntheticWorld", "SyntheticWorldConfig",
           "SyntheticVideoWorld", "SyntheticVideoWorldConfig"]

_LAZY = {"DemoConfig": "vlr_plugins.demo.paragraph", "run_demo": "vlr_plugins.demo.paragraph",
         "MVCDemoConfig": "vlr_plugins.demo.mvc", "run_mvc_demo": "vlr_plugins.demo.mvc",
         "SyntheticWorld": "vlr_plugins.demo.synthetic_world", "SyntheticWorldConfig": "vlr_plugins.demo.synthetic_world",
         "SyntheticVideoWorld": "vlr_plugins.demo.synthetic_video_world",
         "SyntheticVideoWorldConfig": "vlr_plugins.demo.synthetic_video_world"}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
