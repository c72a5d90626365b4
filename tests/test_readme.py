"""The README's and the guides' promises: their examples run with only what each says it needs,
their links lead somewhere, and CI runs exactly the README's test command.

Every ```python block of README.md and docs/*.md runs, in order, one document to a Python
process (a reader types a page's examples into one session: later ones use earlier names). A
block's first line states what it needs (``# needs: kafkalog, kafka-python``); every ```bash
block that states it runs too, from the clone's root. While a block runs, only the closure of
what it states can be imported (``tests/doc_blocks.py``): every other installed distribution's
modules are refused as if absent, whoever imports them.

Why blocking, not one virtual environment per requirement set: a venv per set (kafkalog alone,
with Spark, with each Kafka client) means installing numba, pyarrow and for some pyspark
(320 MB) four or five times per run, minutes on 2 cores against a 15-minute budget for the whole
suite, and a network or a warm pip cache on every CI machine. Blocking gives the same answer to
the question asked ("does this block work with only what it says?") for what matters here: a
block that imports, or calls kafkalog code that imports, a distribution its line does not bring
fails with ModuleNotFoundError. The closure is computed from the installed distributions'
metadata and the checkout's pyproject.toml, not from a hand list. What it cannot see: a version
older than the one installed here, and a module an earlier block of the same page already
imported (as in the reader's own session, it stays imported); the static check of each block's
own import statements catches the latter for the block's code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from doc_blocks import (
    DOCS,
    README,
    ROOT,
    Block,
    blocked_modules,
    blocks,
    closure,
    documents,
    imported_names,
)

GUIDES = ("spark.md", "operators.md", "embedded.md", "serve.md", "cli.md")
PYTHON = [b for d in documents() for lang in ("python", "py") for b in blocks(d, lang)]
RUNNABLE_DOCUMENTS = [d for d in documents() if blocks(d, "python")]


def _label(document: Path) -> str:
    return str(document.relative_to(ROOT))


def test_every_example_says_what_it_needs() -> None:
    missing = [b.label for b in PYTHON if b.needs is None]
    assert not missing, f"no '# needs: ...' first line: {missing}"
    assert len(PYTHON) >= 25


def test_every_stated_requirement_is_a_distribution_we_know() -> None:
    """A misspelt name (``confluent_kafka`` for ``confluent-kafka``) would block nothing."""
    import importlib.metadata

    for block in PYTHON:
        for requirement in block.needs or []:
            name = re.split(r"[\[<>=; ]", requirement)[0]
            importlib.metadata.distribution(name)  # raises for an unknown one


def test_the_closure_follows_metadata() -> None:
    """kafkalog alone brings pyarrow and numba's llvmlite but not Spark nor the clients;
    the spark extra brings pyspark and its py4j."""
    core = closure(["kafkalog"])
    assert {"kafkalog", "pyarrow", "numba", "llvmlite", "kio"} <= core
    assert not {"pyspark", "confluent-kafka", "kafka-python", "pytest"} & core
    assert {"pyspark", "py4j"} <= closure(["kafkalog[spark]"])
    blocked = blocked_modules(["kafkalog"])
    assert {"pyspark", "confluent_kafka", "kafka", "aiokafka", "pytest"} <= set(blocked)
    assert "pyarrow" not in blocked and "numpy" not in blocked


def test_each_example_imports_only_what_it_states() -> None:
    wrong = []
    for block in PYTHON:
        blocked = set(blocked_modules(block.needs or []))
        wrong += [f"{block.label}: {name}" for name in imported_names(block.body) & blocked]
    assert not wrong, f"imports what its '# needs:' line does not bring: {wrong}"


@pytest.mark.parametrize("document", RUNNABLE_DOCUMENTS, ids=_label)
def test_examples_run_with_only_what_they_state(document: Path) -> None:
    units = [
        {"label": b.label, "source": b.body, "blocked": blocked_modules(b.needs or [])}
        for b in blocks(document, "python")
    ]
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "doc_blocks.py")],
        input=json.dumps(units),
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,  # the README's examples read tests/fixtures from the clone's root
    )
    assert result.returncode == 0, result.stderr[-4000:]


def _shell_blocks() -> list[Block]:
    return [b for d in documents() for b in blocks(d, "bash") if b.needs is not None]


@pytest.mark.parametrize("block", _shell_blocks(), ids=lambda b: b.label)
def test_shell_examples_run_with_only_what_they_state(block: Block, tmp_path: Path) -> None:
    """The ``kafkalog`` commands of a block run as a user types them, from the clone's root,
    each Python process of theirs with the same blocking (through a ``sitecustomize``)."""
    (tmp_path / "sitecustomize.py").write_text(
        textwrap.dedent(
            f"""\
            import json, os, sys
            sys.path.insert(0, {str(ROOT / "tests")!r})
            from doc_blocks import _Blocker
            blocker = _Blocker()
            blocker.blocked = frozenset(json.loads(os.environ["KAFKALOG_DOC_BLOCKED"]))
            blocker.label = {block.label!r}
            sys.meta_path.insert(0, blocker)
            sys.path.pop(0)
            """
        )
    )
    env = {
        **os.environ,
        "KAFKALOG_DOC_BLOCKED": json.dumps(blocked_modules(block.needs or [])),
        "PYTHONPATH": os.pathsep.join(
            [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.body],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]


def test_ci_runs_the_readme_test_command() -> None:
    first_block = blocks(README, "bash")[0].body
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    setup_and_demo, setup_and_test = commands[0], commands[1]
    assert setup_and_demo == "python3 -m pip install -e '.[spark]' && kafkalog job"
    assert setup_and_test == "python3 -m pip install -e '.[test]' && python3 -m pytest -n 2"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup_and_test in [line.strip() for line in ci]


def test_the_readme_is_a_front_page() -> None:
    """Read in five minutes: under 200 lines, one short section per audience, each ending in a
    link to its guide; the architecture and the measured numbers one link away."""
    text = README.read_text()
    assert text.count("\n") < 200
    sections = re.split(r"^#{2,3} ", text, flags=re.MULTILINE)[1:]
    audiences = {s.split("\n")[0].split(":")[0]: s for s in sections}
    for audience, guide in (
        ("Data engineer", "docs/spark.md"),
        ("Operator", "docs/operators.md"),
        ("Python programmer", "docs/embedded.md"),
        ("Application developer", "docs/serve.md"),
    ):
        section = audiences[audience].strip()
        assert section.splitlines()[-1].count(f"]({guide})"), f"{audience} does not end in {guide}"
    for target in ("ARCHITECTURE.md", "bench/RESULTS.md", "docs/cli.md"):
        assert f"]({target})" in text


def test_every_guide_is_there_and_every_link_leads_somewhere() -> None:
    assert sorted(p.name for p in DOCS.glob("*.md")) == sorted(GUIDES)
    broken = []
    for document in documents():
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", document.read_text()):
            if "://" in target:
                continue
            path = document.parent / target if target else document
            if not path.exists():
                broken.append(f"{_label(document)} -> {target}")
            elif anchor and anchor not in _anchors(path):
                broken.append(f"{_label(document)} -> {target}#{anchor}")
    assert not broken, broken


def _anchors(document: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings."""
    if document.suffix != ".md":
        return set()
    headings = re.findall(r"^#+ (.+)$", document.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_spark_option_is_in_the_guides_tables() -> None:
    """The option tables are the data source's public API: none may go missing."""
    from kafkalog.spark.options import KNOWN_OPTIONS
    from kafkalog.spark.writer import WRITE_OPTIONS

    guide = (DOCS / "spark.md").read_text()
    tables = guide[guide.index("## Spark options") : guide.index("## Running on a cluster")]
    documented = {m.lower() for m in re.findall(r"^\| `?([A-Za-z.]+)`?", tables, re.MULTILINE)}
    documented |= {m.lower() for m in re.findall(r"`([A-Za-z.]+)`", tables)}
    assert not KNOWN_OPTIONS - documented
    assert not WRITE_OPTIONS - documented


def test_a_block_that_imports_what_it_does_not_state_fails() -> None:
    """The check can fail: kafka-python is installed here, but a block stating only kafkalog
    cannot import it, directly or by a probe, as if it were absent."""
    source = (
        "import importlib.util\n"
        "assert importlib.util.find_spec('kafka') is None\n"
        "assert importlib.util.find_spec('pyarrow') is not None\n"
        "import kafka\n"
    )
    unit = {"label": "probe", "source": source, "blocked": blocked_modules(["kafkalog"])}
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "doc_blocks.py")],
        input=json.dumps([unit]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "No module named 'kafka' (probe does not state what installs it)" in result.stderr
