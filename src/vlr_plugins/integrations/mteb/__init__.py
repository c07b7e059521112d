"""MTEB on an export: every folder ``vlr export`` writes as an ``mteb`` encoder, and ``vlr mteb``'s run.

``VlrExportEncoder(folder)`` implements MTEB's encoder protocol with the export's own
towers (:mod:`~vlr_plugins.integrations.mteb.towers`: BLIP paragraph models, MVC's dual-CLS
encoder, EOL embedders (CaRe, E5-V), open_clip folders) and carries its ``ModelMeta``, so

    import mteb
    from vlr_plugins.integrations.mteb import VlrExportEncoder

    mteb.evaluate(VlrExportEncoder("exports/care-7b"), mteb.get_tasks(tasks=["MSRVTTT2V"]))

scores it on MTEB's image and video retrieval tasks. This package imports ``mteb`` (the
``mteb`` extra); ``vlr mteb``'s command module (``integrations/mteb_cli.py``) does not.
"""

from __future__ import annotations

from vlr_plugins.integrations.mteb._folder import ExportFolder, read_export_folder
from vlr_plugins.integrations.mteb.encoder import ClipCollator, VlrExportEncoder, load_export_encoder
from vlr_plugins.integrations.mteb.meta import export_model_meta, folder_revision
from vlr_plugins.integrations.mteb.towers import MissingTowerError, Towers, load_towers

__all__ = [
    "ClipCollator",
    "ExportFolder",
    "MissingTowerError",
    "Towers",
    "VlrExportEncoder",
    "export_model_meta",
    "folder_revision",
    "load_export_encoder",
    "load_towers",
    "read_export_folder",
]
