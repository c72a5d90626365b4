"""The README's promises: its examples run, and CI runs exactly its test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
EXAMPLES = re.findall(r"```python\n(.*?)```", README, re.DOTALL)


def test_readme_examples_run_in_order() -> None:
    """Like a reader typing them into one session: later examples use earlier names."""
    namespace: dict[str, object] = {}
    for index, example in enumerate(EXAMPLES):
        exec(compile(example, f"README.md example {index + 1}", "exec"), namespace)


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 4


def test_ci_runs_the_readme_test_command() -> None:
    first_block = re.search(r"```bash\n(.*?)```", README, re.DOTALL)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    setup_and_demo, setup_and_test = commands[0], commands[1]
    assert "kafkalog job" in setup_and_demo and "pip install" in setup_and_demo
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert setup_and_test in [line.strip() for line in ci]


def test_every_spark_option_is_in_the_readme_tables() -> None:
    """The option tables are the data source's public API: none may go missing."""
    from kafkalog.spark.options import KNOWN_OPTIONS
    from kafkalog.spark.writer import WRITE_OPTIONS

    tables = README[README.index("### Spark options") : README.index("## The command")]
    documented = {m.lower() for m in re.findall(r"^\| `?([A-Za-z.]+)`?", tables, re.MULTILINE)}
    documented |= {m.lower() for m in re.findall(r"`([A-Za-z.]+)`", tables)}
    assert not KNOWN_OPTIONS - documented
    assert not WRITE_OPTIONS - documented
