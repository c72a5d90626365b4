"""The package's layers import only the layers before them (the developers' guide):
``records`` -> ``index`` -> ``log`` -> ``spark`` -> ``server`` -> ``cli``, all over ``errors``
and ``files``.
Imports inside functions count too: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "kafkalog"
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
