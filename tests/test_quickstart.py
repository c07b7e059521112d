"""docs/quickstart.md runs as written: its files are saved and its shell blocks run verbatim,
in a fresh folder, in subprocesses, with HF_HUB_OFFLINE=1 (nothing may be downloaded)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _doc_route import FENCE, run_verbatim

pytest.importorskip("mmengine")
pytest.importorskip("PIL")

DOC = Path(__file__).resolve().parents[1] / "docs" / "quickstart.md"


def blocks() -> tuple[dict[str, str], list[str]]:
    """The doc's files (fences with ``file=NAME``) and its shell blocks (``bash``), in order."""
    files, shell = {}, []
    for lang, info, body in FENCE.findall(DOC.read_text(encoding="utf-8")):
        name = re.search(r"\bfile=(\S+)", info)
        if name:
            files[name.group(1)] = body
        elif lang == "bash":
            shell.append(body)
    return files, shell


def test_the_doc_has_every_step():
    files, shell = blocks()
    assert {"make_data.py", "my_encoder.py", "quick.yaml", "benchmarks.yaml", "use.py"} <= set(files)
    commands = "\n".join(shell)
    for step in ("vlr precompute", "vlr train", "vlr eval", "vlr export", "python use.py"):
        assert step in commands, step
    assert "## Offline use" in DOC.read_text(encoding="utf-8")


def test_quickstart_runs_verbatim_offline(tmp_path):
    files, shell = blocks()
    work = tmp_path / "work"
    work.mkdir()
    for name, text in files.items():
        (work / name).write_text(text)
    # `vlr precompute` imports `--encoder my_encoder:...` from the current folder itself, as `python -m` does
    out = run_verbatim("\n".join(shell), work, tmp_path)
    shown = f"\nstdout:\n{out.stdout[-6000:]}\nstderr:\n{out.stderr[-6000:]}"
    assert out.returncode == 0, shown
    assert "48 pictures" in out.stdout, shown
    assert "torch.Size([2, 32])" in out.stdout, shown
    assert (work / "results" / "quick" / "results.json").is_file()
    assert (work / "exports" / "quick" / "model.safetensors").is_file()
    assert (work / "exports" / "quick" / "README.md").is_file()
    # the quiet console: training progress, not MMEngine's environment report and config
    assert "Epoch(train)" in out.stdout and "System environment" not in out.stdout, shown
