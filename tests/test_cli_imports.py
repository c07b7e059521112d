"""A command that answers at once: ``vlr --help``, every ``vlr VERB --help``, ``vlr list`` and the refusals
that need no model (a bad option or value, a recipe that is not there, a malformed ``--set``)
import no torch, numpy, transformers, MMEngine or open_clip. One fresh interpreter runs the
cases in turn through :func:`vlr_plugins.cli.main` and reports what each left in ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import vlr_plugins

HEAVY = ("torch", "transformers", "mmengine", "open_clip", "open_clip_train", "lavis", "numpy")

_SCRIPT = r"""
import contextlib, io, json, sys
from vlr_plugins.cli import build_parser, main

HEAVY = %r
verbs = list(build_parser()._subparsers._group_actions[0].choices)
cases = [[]] + [[verb] for verb in verbs]
cases = [[*c, "--help"] for c in cases] + [
    ["train", "paragraph/c1", "--no-such-option"],
    ["eval", "--model", "blip:x", "--benchmarks", "b.yaml", "--batch-size", "zero"],
    ["train", "no/such/recipe"],
    ["train", "paragraph/c1", "--set", "train.epochs"],
    ["list"],
]
report = []
for argv in cases:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    report.append({"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue(),
                   "heavy": [m for m in HEAVY if m in sys.modules]})
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def run() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(vlr_plugins.__file__).parents[1]),
                                                                   os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", _SCRIPT % (HEAVY,)], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return {"cases": json.loads(out.stdout.splitlines()[-1])}


def test_help_and_refusals_import_no_heavy_module(run):
    cases = {" ".join(c["argv"]): c for c in run["cases"]}
    helps = [c for c in run["cases"] if c["argv"][-1] == "--help"]
    assert len(helps) == 19  # vlr and its 18 verbs
    for case in helps:
        assert case["code"] in (0, None), case
        assert "usage: vlr" in case["out"] or "usage: vlr" in case["err"], case
    bad_option = cases["train paragraph/c1 --no-such-option"]
    assert bad_option["code"] == 2 and "unrecognized arguments: --no-such-option" in bad_option["err"]
    bad_value = cases["eval --model blip:x --benchmarks b.yaml --batch-size zero"]
    assert bad_value["code"] == 2 and "--batch-size" in bad_value["err"]
    no_recipe = cases["train no/such/recipe"]
    assert no_recipe["code"] == 2
    assert no_recipe["err"].strip().splitlines()[-1].startswith("error: no/such/recipe: no such file")
    bad_set = cases["train paragraph/c1 --set train.epochs"]
    assert bad_set["code"] == 2 and "error: --set: expected KEY=VALUE" in bad_set["err"]
    listing = cases["list"]
    assert listing["code"] == 0
    for heading in ("losses:", "models:", "readers:", "metrics:", "recipes:"):
        assert heading in listing["out"].splitlines()
    assert "  paragraph/c5 " in listing["out"] and "(invalid" not in listing["out"]
    for case in run["cases"]:
        assert case["heavy"] == [], f"vlr {' '.join(case['argv'])} imported {case['heavy']}"
