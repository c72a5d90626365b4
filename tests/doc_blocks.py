"""The code blocks of README.md and docs/*.md, what each says it needs, and a runner that gives
each block only that.

A block's first line names what it needs as pip requirements: ``# needs: kafkalog[spark]``,
``# needs: kafkalog, confluent-kafka``. What a block may import is the *closure* of those
requirements: the distributions they name, with the extras named, and everything those require,
recursively, as their metadata says (``importlib.metadata``; for ``kafkalog`` itself the
checkout's ``pyproject.toml``, so a new extra counts before it is installed). Every other
installed distribution's top-level modules are blocked while the block runs (see
``tests/test_readme.py`` for why blocking rather than one venv per requirement set).

Run as a script (``python3 tests/doc_blocks.py``) it is the child process that executes one
document's blocks: it reads them, with their blocked modules, as JSON on stdin.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.abc
import importlib.metadata
import importlib.util
import json
import re
import sys
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.DOTALL | re.MULTILINE)
NEEDS = re.compile(r"^# needs: (?P<requirements>[^#(\n]+)")


@dataclass(frozen=True)
class Block:
    document: Path
    index: int  # 1-based among the document's blocks of its language
    lang: str
    line: int  # of the opening fence
    body: str

    @property
    def label(self) -> str:
        return (
            f"{self.document.relative_to(ROOT)} {self.lang} block {self.index} (line {self.line})"
        )

    @property
    def needs(self) -> list[str] | None:
        """The requirements its first line states, or None when it states none."""
        match = NEEDS.match(self.body)
        if match is None:
            return None
        return [r.strip() for r in match.group("requirements").split(",") if r.strip()]


def documents() -> list[Path]:
    """The README and every guide it leads to, in a fixed order."""
    return [README, *sorted(DOCS.glob("*.md"))]


def blocks(document: Path, lang: str) -> list[Block]:
    text = document.read_text()
    found = [m for m in BLOCK.finditer(text) if m.group("lang") == lang]
    return [
        Block(document, n, lang, text.count("\n", 0, m.start()) + 1, m.group("body"))
        for n, m in enumerate(found, 1)
    ]


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def _requires(name: str) -> list[str]:
    """A distribution's requirement strings (markers included)."""
    if _canonical(name) == "kafkalog":
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        found = list(project["dependencies"])
        for extra, specs in project.get("optional-dependencies", {}).items():
            found += [f'{spec}; extra == "{extra}"' for spec in specs]
        return found
    try:
        return importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []  # not installed here: nothing of it can be imported anyway


def closure(requirements: Iterable[str]) -> set[str]:
    """The canonical names of every distribution the requirements bring, recursively."""
    from packaging.requirements import Requirement

    extras_of: dict[str, set[str]] = {}
    pending = [Requirement(r) for r in requirements]
    while pending:
        requirement = pending.pop()
        name = _canonical(requirement.name)
        extras = set(requirement.extras)
        if name in extras_of and extras <= extras_of[name]:
            continue
        extras_of.setdefault(name, set()).update(extras)
        wanted = extras_of[name]
        for spec in _requires(requirement.name):
            dependency = Requirement(spec)
            marker = dependency.marker
            if marker is None or any(marker.evaluate({"extra": e}) for e in {"", *wanted}):
                pending.append(dependency)
    return set(extras_of)


def blocked_modules(requirements: Iterable[str]) -> list[str]:
    """Top-level modules of installed distributions outside the requirements' closure (a module
    several distributions provide is blocked only when none of them is in it)."""
    return list(_blocked(tuple(sorted(requirements))))


@functools.cache
def _installed_modules() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


@functools.cache
def _blocked(requirements: tuple[str, ...]) -> tuple[str, ...]:
    allowed = closure(requirements)
    blocked = []
    for module, distributions in _installed_modules().items():
        if module in sys.stdlib_module_names or not module.isidentifier():
            continue
        if not any(_canonical(d) in allowed for d in distributions):
            blocked.append(module)
    return tuple(sorted(blocked))


def imported_names(source: str) -> set[str]:
    """Top-level names a block's own import statements name."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


# -- the child process --------------------------------------------------------------------------


class _Blocker(importlib.abc.MetaPathFinder):
    """Refuses, as an absent distribution would, any module of the blocked distributions that
    is not imported yet, whoever imports it (the block or a library it calls)."""

    def __init__(self) -> None:
        self.blocked: frozenset[str] = frozenset()
        self.label = ""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname.split(".")[0] in self.blocked:
            raise ModuleNotFoundError(
                f"No module named {fullname!r} ({self.label} does not state what installs it)",
                name=fullname,
            )
        return None


def _run(units: list[dict[str, Any]]) -> None:
    blocker = _Blocker()
    sys.meta_path.insert(0, blocker)
    # libraries probe for optional packages with importlib.util.find_spec (pyspark looks for
    # scipy, torch, ...), which answers None for an absent one: so it does for a blocked one
    probe = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> Any:
        absolute = importlib.util.resolve_name(name, package)
        return None if absolute.split(".")[0] in blocker.blocked else probe(name, package)

    importlib.util.find_spec = find_spec
    namespace: dict[str, object] = {"__name__": "__main__", "__builtins__": builtins}
    for unit in units:
        blocker.blocked = frozenset(unit["blocked"])
        blocker.label = unit["label"]
        exec(compile(unit["source"], unit["label"], "exec"), namespace)
    sys.meta_path.remove(blocker)


if __name__ == "__main__":
    _run(json.load(sys.stdin))
