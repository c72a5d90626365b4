"""The package's layers import only the layers before them (the developers' guide):
``records`` -> ``index`` -> ``log`` -> ``spark`` -> ``server`` -> ``cli``, all over ``errors``
and ``files``; and no two modules depend on each other, directly or through others.
Imports inside functions and under ``TYPE_CHECKING`` count too: a lazy import is still a
dependency, and a cycle only the type checker follows is still a cycle in the design."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kafkalog"
LIMIT = 50  # cycles listed at most
ORDER = ["errors", "files", "records", "index", "log", "spark", "server", "cli"]


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "kafkalog" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "kafkalog":
                found.update(f"kafkalog.{a.name}" for a in node.names)
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_every_layer_imports_only_earlier_layers() -> None:
    violations = []
    checked = 0
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        own = rel.parts[0].removesuffix(".py")
        if own not in ORDER:
            continue  # the package's __init__ and __main__ sit above every layer
        checked += 1
        for module in _imports(path):
            layer = _layer(module)
            if layer is None or layer == own:
                continue
            if layer not in ORDER or ORDER.index(layer) > ORDER.index(own):
                violations.append(f"{rel} imports {module}")
    assert checked > 40
    assert violations == []


def _module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its
    ``__init__``)."""
    modules = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _dependencies(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in it.

    ``import a.b`` and ``from a.b import c`` depend on ``a.b``, or on ``a.b.c`` when that is a
    module (``from kafkalog.spark import plan``); relative imports are resolved against the
    module's package. The parent packages an import runs first are not counted: every module
    of a package that re-exports its modules would be in a cycle with it. An
    ``importlib.import_module`` of a computed name is not seen (``records`` names the modules of
    its lazy attributes under ``TYPE_CHECKING`` as well)."""

    def known(module: str) -> str | None:
        while module and module not in modules:
            module = module.rpartition(".")[0]
        return module or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(known(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x (level 1: this package), from ..y import x
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in modules else known(base))
    return {m for m in found if m is not None and m != name}


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for succ in graph[todo.pop()] - seen:
            seen.add(succ)
            todo.append(succ)
    return seen


def _cycles(graph: dict[str, set[str]], limit: int = LIMIT) -> list[list[str]]:
    """Every elementary cycle of imports (up to ``limit``), each from its smallest module round
    to it again. Only modules that reach each other (a strongly connected component) are
    searched, so an acyclic graph costs one reachability pass per module."""
    reach = {name: _reachable(graph, name) for name in graph}
    found: list[list[str]] = []
    for start in sorted(graph):
        # the modules both reached from start and reaching it, above it: a cycle through a
        # smaller module was found from that one
        allowed = {m for m in reach[start] if m > start and start in reach[m]}
        todo = [[start]]
        while todo and len(found) < limit:
            path = todo.pop()
            for succ in sorted(graph[path[-1]], reverse=True):
                if succ == start:
                    found.append([*path, start])
                elif succ in allowed and succ not in path:
                    todo.append([*path, succ])
    return sorted(found)[:limit]


def test_no_import_cycles() -> None:
    modules = _module_names()
    graph = {name: _dependencies(name, path, modules) for name, path in modules.items()}
    assert len(graph) > 40 and sum(map(len, graph.values())) > 100
    cycles = [" -> ".join(cycle) for cycle in _cycles(graph, LIMIT)]
    more = f"\n(the first {LIMIT}; there may be more)" if len(cycles) == LIMIT else ""
    assert not cycles, "import cycles:\n" + "\n".join(cycles) + more


def test_dependencies_count_every_form_of_import(tmp_path: Path) -> None:
    names = ["kafkalog.p", "kafkalog.p.a", "kafkalog.p.b", "kafkalog.p.c", "kafkalog.p.d"]
    names += ["kafkalog.q", "kafkalog.q.e", "kafkalog.q.f"]
    modules = {name: tmp_path / f"{name}.py" for name in names}
    source = """
import kafkalog.p.b
from kafkalog.p import c, CONSTANT
from . import d
from ..q import e
from ..q.f import name
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from kafkalog.q import Thing
def lazy():
    import numpy
"""
    (tmp_path / "a.py").write_text(source)
    found = _dependencies("kafkalog.p.a", tmp_path / "a.py", modules)
    assert found == {
        "kafkalog.p",  # CONSTANT, a name of the package
        "kafkalog.p.b",
        "kafkalog.p.c",
        "kafkalog.p.d",
        "kafkalog.q",  # Thing
        "kafkalog.q.e",
        "kafkalog.q.f",
    }
    assert _cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"b", "d"}, "d": set()}) == [
        ["a", "b", "a"],
        ["b", "c", "b"],
    ]
