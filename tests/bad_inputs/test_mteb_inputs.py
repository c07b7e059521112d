"""The bad-input catalogue of ``vlr mteb --model EXPORT --tasks ...``.

Each row is a real bad input written into an empty folder (the command's working directory):
the files, the command line, the words its one ``error:`` line must hold. Every case exits 2
without a traceback, writes no ``{tmp}/out`` and leaves the folder as it was.
Placeholders: ``{tmp}`` the case's folder, ``{clip}`` a tiny open_clip export, ``{blip}`` a tiny
text-tower BLIP export (no image tower).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from _refusal import assert_refused, fill, tree, write_files

pytest.importorskip("mteb")
pytest.importorskip("open_clip")

import _mteb_exports  # noqa: E402


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mteb-catalogue")
    return {"clip": str(_mteb_exports.open_clip_export(root)), "blip": str(_mteb_exports.blip_export(root))}

T2I = ("from _mteb_local import local_task\n"
       "from PIL import Image\n"
       "T2I = type(local_task('BadT2I', 't2i', {'text': ['a']}, {'image': [Image.new('RGB', (8, 8))]}, {0: [0]}))\n"
       "NOT_A_TASK = 7\n")


def _mteb(model: str = "{clip}", *tasks: str, more: tuple[str, ...] = ()) -> list[str]:
    return ["mteb", "--model", model, "--tasks", *(tasks or ("mteb_bad_tasks:T2I",)), "--out", "{tmp}/out",
            "--device", "cpu", *more]


CASES = [
    ("model: no such folder", {}, _mteb("{tmp}/nowhere"), ["--model", "{tmp}/nowhere", "does not exist"]),
    ("model: a file", {"model.bin": "x"}, _mteb("{tmp}/model.bin"), ["--model", "{tmp}/model.bin", "not a folder"]),
    ("model: a folder that is not an export", {"folder/notes.txt": "hi"}, _mteb("{tmp}/folder"),
     ["--model", "{tmp}/folder", "no config.json"]),
    ("model: another model type", {"bert/config.json": '{"model_type": "bert"}', "bert/model.safetensors": b"w"},
     _mteb("{tmp}/bert"), ["{tmp}/bert/config.json", "'bert'"]),
    ("model: half an export (no weights)", {"half/config.json": '{"model_type": "vlr_blip_text_encoder"}'},
     _mteb("{tmp}/half"), ["{tmp}/half", "no *.safetensors", "half an export"]),
    ("model: open_clip config without weights", {"oc/open_clip_config.json": '{"model_cfg": {}}'},
     _mteb("{tmp}/oc"), ["{tmp}/oc", "open_clip_model.safetensors"]),
    ("model: config.json not JSON", {"broken/config.json": "{", "broken/model.safetensors": b"w"},
     _mteb("{tmp}/broken"), ["{tmp}/broken/config.json", "not readable JSON"]),
    ("tasks: unknown MTEB task", {}, _mteb("{clip}", "MSRVTTT2VV"), ["--tasks", "'MSRVTTT2VV'", "MSRVTTT2V"]),
    ("tasks: module:Class that is not a task", {"mteb_bad_tasks.py": T2I}, _mteb("{clip}", "mteb_bad_tasks:NOT_A_TASK"),
     ["--tasks", "not an MTEB task"]),
    ("tasks: module that cannot be imported", {}, _mteb("{clip}", "no_such_module:T2I"),
     ["--tasks", "no_such_module"]),
    ("tasks: images for a text-tower export", {"mteb_bad_tasks.py": T2I}, _mteb("{blip}"),
     ["--tasks", "BadT2I", "documents are image", "no image tower"]),
    ("frames: for a text-only export", {"mteb_bad_tasks.py": T2I}, _mteb("{blip}", more=("--frames", "4")),
     ["--frames", "text-only"]),
    ("out: a file", {"out": "a file"}, _mteb(), ["--out", "{tmp}/out", "is a file"]),
]


@pytest.mark.parametrize("files, argv, where", [pytest.param(*row[1:], id=row[0]) for row in CASES])
def test_vlr_mteb_refuses(files, argv, where, tmp_path, exports):
    places = {"tmp": str(tmp_path), **exports}
    write_files(tmp_path, files, places)
    before = tree(tmp_path)
    leaves = [] if "out" in files else [tmp_path / "out"]
    assert_refused([fill(a, places) for a in argv], *[fill(w, places) for w in where], leaves=leaves, cwd=tmp_path)
    assert tree(tmp_path) == before, "the folder changed"


def test_vlr_mteb_without_mteb_installed(exports):
    """Where mteb cannot be imported, one error line says which extra to install."""
    code = ("import sys; sys.modules['mteb'] = None; from vlr_plugins.cli import main; "
            f"sys.exit(main(['mteb', '--model', {exports['clip']!r}, '--tasks', 'MSRVTTT2V']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("error: vlr mteb needs MTEB")
    assert "vlr-plugins[mteb]" in out.stderr and "Traceback" not in out.stderr
