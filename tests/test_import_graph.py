"""The package's import graph: no cycle, and no module hidden behind a same-named attribute.

The graph is read statically from every ``import`` in src/vlr_plugins (deferred imports
inside functions too, since a cycle through them still couples the modules).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import vlr_plugins

ROOT = Path(vlr_plugins.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ["vlr_plugins", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            # importing a parent package is implied by being inside it: no edge
            if t and t != name and not name.startswith(t + "."):
                found.add(t)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(u: str) -> list[str] | None:
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                return stack[stack.index(v):] + [v]
            if v not in state and (found := visit(v)):
                return found
        stack.pop()
        state[u] = 2
        return None

    for u in sorted(graph):
        if u not in state and (found := visit(u)):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    modules = _modules()
    graph = {m: _imports(m, p, set(modules)) for m, p in modules.items()}
    assert len(graph) > 50 and graph["vlr_plugins.cli"], "the graph was read"
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_every_module_imports_as_itself():
    # `import vlr_plugins.a.b as m` must give the module, not a function re-exported as `b`
    # (only modules whose package imports without optional dependencies are checked)
    for name in sorted(_modules()):
        package, _, leaf = name.rpartition(".")
        if not package or ".integrations." in name + ".":
            continue
        try:
            parent = importlib.import_module(package)
        except ImportError:
            continue
        attr = parent.__dict__.get(leaf)
        if attr is not None:
            assert getattr(attr, "__name__", None) == name, f"{name} is shadowed by {attr!r} in {package}"
