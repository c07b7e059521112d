"""The wheel users `pip install`: built here offline with the project's build backend, it
carries every file of the package (code and data: YAML protocols, prompt templates, model
configs), the recipes and model cards inside the package, and the `vlr` command, and
nothing else of the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("hatchling")


def _tracked(folder: str) -> list[str]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", folder], capture_output=True, check=True)
    return [name for name in out.stdout.decode().split("\0") if name]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the project's git checkout (which files are the project's)")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(out), str(ROOT)], check=True, capture_output=True)
    (built,) = out.glob("vlr_plugins-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_carries_every_file_of_the_package_and_the_shipped_folders(wheel):
    names = set(wheel.namelist())
    package = [name.removeprefix("src/") for name in _tracked("src/vlr_plugins")]
    assert any(not name.endswith(".py") for name in package)  # data files are among them
    missing = [name for name in package if name not in names]
    assert not missing, missing[:10]
    for folder in ("recipes", "model_cards"):
        files = _tracked(folder)
        assert files
        shipped = [f"vlr_plugins/_{name}" for name in files]
        assert [name for name in shipped if name not in names] == []


def test_the_wheel_holds_nothing_else_of_the_repository(wheel):
    ours = {name.removeprefix("src/") for name in _tracked("src/vlr_plugins")}
    ours |= {f"vlr_plugins/_{name}" for folder in ("recipes", "model_cards") for name in _tracked(folder)}
    extra = [name for name in wheel.namelist() if ".dist-info/" not in name and name not in ours]
    assert extra == []
    assert not any(name.startswith(("tests/", "benchmarks/", "docs/", "scripts/")) for name in wheel.namelist())


def test_the_wheel_installs_the_vlr_command(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    text = wheel.read(entry_points).decode()
    assert "[console_scripts]" in text and "vlr = vlr_plugins.cli:main" in text
