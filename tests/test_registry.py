"""The core registry: named, listable, idempotent, refusing silent replacement."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vlr_plugins
from vlr_plugins.registry import LOSSES, Registry


def test_register_get_build_and_list():
    reg = Registry("things")

    @reg.register
    class Widget:
        """A widget for tests.

        More text.
        """

        def __init__(self, size=1):
            self.size = size

    assert reg.get("Widget") is Widget
    assert reg.build({"type": "Widget", "size": 3}).size == 3
    assert [(e.name, e.description) for e in reg.entries()] == [("Widget", "A widget for tests.")]
    reg.register(Widget)  # the same object again: a no-op
    assert reg.names("W*") == ["Widget"] and reg.names("X*") == []


def test_replacing_a_different_object_is_refused():
    reg = Registry("things")

    def one():
        return 1

    def two():
        return 2

    reg.register(one, name="f")
    with pytest.raises(KeyError, match="already has 'f'"):
        reg.register(two, name="f")
    assert reg.get("f")() == 1
    reg.register(two, name="f", force=True)
    assert reg.get("f")() == 2


def test_unknown_names_list_what_exists():
    with pytest.raises(KeyError, match="no loss named .NoSuchLoss.; known: .*InfoNCELoss"):
        LOSSES.get("NoSuchLoss")
    with pytest.raises(KeyError, match="a loss config needs a 'type' key"):
        LOSSES.build({"temperature": 0.1})


@pytest.mark.parametrize("kind, entry", [("losses", "loss"), ("models", "model"), ("readers", "reader"),
                                         ("metrics", "metric"), ("things", "thing"), ("data", "data")])
def test_an_unknown_name_is_refused_naming_one_entry_of_the_kind(kind, entry):
    with pytest.raises(KeyError, match=f"^\"no {entry} named 'Nope'; known: none\"$"):
        Registry(kind).get("Nope")


def _registering_modules() -> dict[str, set[str]]:
    """kind -> the modules that call ``LOSSES/MODELS/READERS/METRICS.register`` of
    :mod:`vlr_plugins.registry` (read from the source, so a new one is found)."""
    root = Path(vlr_plugins.__file__).parent
    kinds = {"LOSSES": "losses", "MODELS": "models", "READERS": "readers", "METRICS": "metrics"}
    found: dict[str, set[str]] = {kind: set() for kind in kinds.values()}
    for path in root.rglob("*.py"):
        text = path.read_text("utf-8")
        if "vlr_plugins.registry import" not in text:
            continue
        tree = ast.parse(text)
        core = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                and n.module == "vlr_plugins.registry" for a in n.names}
        for n in ast.walk(tree):
            if (isinstance(n, ast.Attribute) and n.attr == "register" and isinstance(n.value, ast.Name)
                    and n.value.id in core and n.value.id in kinds):
                parts = ["vlr_plugins", *path.relative_to(root).with_suffix("").parts]
                found[kinds[n.value.id]].add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _eager_imports(package: str) -> set[str]:
    """The modules a package's ``__init__`` imports when it is imported (its top-level imports)."""
    path = Path(vlr_plugins.__file__).parent.joinpath(*package.split(".")[1:], "__init__.py")
    if not path.is_file():
        return set()
    return {n.module for n in ast.parse(path.read_text("utf-8")).body if isinstance(n, ast.ImportFrom) and n.module}


def test_each_registry_imports_every_module_that_registers_into_it():
    """A registry imports its listed modules on first lookup (``vlr list``, a config's
    ``type``): every module that registers into it must be one of them or be imported by one
    that is a package (``vlr_plugins.losses`` imports its losses); a package that resolves its
    names on first use (data, eval, mllm, text) imports none."""
    from vlr_plugins.registry import all_registries

    expected = _registering_modules()
    assert sum(map(len, expected.values())) > 20, "the scan found the registrations"
    for kind, registry in all_registries().items():
        listed = set(registry._modules)
        reached = listed | {m for package in listed for m in _eager_imports(package)}
        missing = expected[kind] - reached
        assert not missing, f"{kind}: {sorted(missing)} register into it but vlr_plugins.registry does not list them"


def test_the_shipped_index_lists_every_entry_as_the_registries_do():
    """``vlr list`` reads names and descriptions from the index without importing the entries;
    it must be what the registries hold (after a new or renamed entry: python -m vlr_plugins.registry)."""
    import json

    from vlr_plugins.registry import INDEX, all_registries, index_of

    with open(INDEX, encoding="utf-8") as f:
        shipped = json.load(f)
    live = index_of(all_registries())
    assert shipped == live, "src/vlr_plugins/_registry_index.json is stale: run python -m vlr_plugins.registry"
    for kind, reg in all_registries().items():
        assert [(e.name, e.description) for e in reg.summaries()] == [(r["name"], r["description"]) for r in live[kind]]


def test_summaries_come_from_the_index_until_the_modules_are_imported_and_keep_new_entries(tmp_path):
    import json
    import subprocess
    import sys

    script = (
        "import json, sys\n"
        "from vlr_plugins.registry import LOSSES\n"
        "before = [e.name for e in LOSSES.summaries('*NCE*')]\n"
        "@LOSSES.register(name='ZZNCELoss')\n"
        "class Z:\n    'A loss of a user module.'\n"
        "after = [(e.name, e.description) for e in LOSSES.summaries('ZZ*')]\n"
        "print(json.dumps({'before': before, 'after': after, 'torch': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(Path(vlr_plugins.__file__).parents[1])})
    got = json.loads(out.stdout)
    assert not got["torch"] and "InfoNCELoss" in got["before"]
    assert got["after"] == [["ZZNCELoss", "A loss of a user module."]]
