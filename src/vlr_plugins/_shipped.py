"""Folders the project ships beside the code (recipes/, model_cards/).

A wheel carries them inside the package (``vlr_plugins/_recipes`` ...); a source
checkout or editable install reads them from the repository root.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["shipped_dirs"]


def shipped_dirs(name: str) -> list[Path]:
    """Existing copies of the top-level folder ``name``: the installed one first."""
    dirs: list[Path] = []
    packaged = resources.files("vlr_plugins") / f"_{name}"
    if packaged.is_dir():
        dirs.append(Path(str(packaged)))
    src_tree = Path(__file__).resolve().parents[2] / name
    if src_tree.is_dir() and src_tree not in dirs:
        dirs.append(src_tree)
    return dirs
