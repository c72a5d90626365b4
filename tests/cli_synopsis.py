"""The command reference in the docs, generated from the ``kafkalog`` argument parsers.

A hand-kept synopsis drifted from ``--help`` (options missing, a ``--json`` list of 6 commands
where 8 had it). The docs now hold regions between ``<!-- BEGIN generated: NAME -->`` and
``<!-- END generated: NAME -->`` that this module writes from the parsers themselves;
``tests/test_cli_synopsis.py`` fails when a region differs from what the parsers say.

    python3 tests/cli_synopsis.py      # rewrite every generated region of README.md and docs/

Regions: ``commands`` (one line per command: its name and help line), ``synopsis`` (each
command's usage as argparse prints it, then its help line), ``json-commands`` (the commands
that take ``--json``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from kafkalog.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
#: the files whose generated regions this module keeps
DOCUMENTS = ("README.md", "docs/cli.md")
WIDTH = 100  # argparse wraps usage lines at the terminal's width: fixed here, so output is stable
REGION = re.compile(
    r"(<!-- BEGIN generated: (?P<name>[a-z-]+) .*?-->\n)(?P<body>.*?)(<!-- END generated: "
    r"(?P=name) -->)",
    re.DOTALL,
)


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's own parser, registered as ``kafkalog`` registers it (each module's
    ``add_parser``/``add_parsers``), by command name."""
    parser = argparse.ArgumentParser(prog="kafkalog")
    sub = parser.add_subparsers(dest="command")
    done: set[str] = set()
    for _, module_name, _ in COMMANDS:
        if module_name in done:
            continue
        done.add(module_name)
        module = importlib.import_module(f"kafkalog.cli.{module_name}")
        register = getattr(module, "add_parsers", None) or module.add_parser
        register(sub)
    parsers: dict[str, argparse.ArgumentParser] = dict(sub.choices)
    return {name: parsers[name] for name, _, _ in COMMANDS}


def _usage(parser: argparse.ArgumentParser) -> str:
    """argparse's usage of one command, at a fixed width, without ``usage: `` and ``[-h]``."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH + 2)  # HelpFormatter wraps at the terminal width - 2
    try:
        text = parser.format_usage()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    text = text.removeprefix("usage: ").replace(" [-h]", "", 1)
    lines = text.rstrip("\n").split("\n")
    # argparse indents continuation lines under the first argument ([-h]): "usage: " goes
    return "\n".join([lines[0], *(line[7:] for line in lines[1:])])


def commands() -> str:
    width = max(len(name) for name, _, _ in COMMANDS)
    lines = [f"kafkalog {name:<{width}}  {help_line}" for name, _, help_line in COMMANDS]
    return "```\n" + "\n".join(lines) + "\n```\n"


def synopsis() -> str:
    parsers = command_parsers()
    entries = [f"{_usage(parsers[name])}\n        {help_line}" for name, _, help_line in COMMANDS]
    return "```\n" + "\n".join(entries) + "\n```\n"


def json_commands() -> str:
    parsers = command_parsers()
    names = [name for name, _, _ in COMMANDS if "--json" in parsers[name].format_usage()]
    listed = ", ".join(f"`{name}`" for name in names)
    return f"`--json` (on {listed}) prints nothing but JSON objects, one a line.\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "commands": commands,
    "synopsis": synopsis,
    "json-commands": json_commands,
}


def regions(text: str) -> list[tuple[str, str]]:
    """(name, body) of every generated region of a document."""
    return [(m.group("name"), m.group("body")) for m in REGION.finditer(text)]


def regenerate(text: str) -> str:
    """The document with every generated region rewritten from the parsers."""
    return REGION.sub(lambda m: m.group(1) + GENERATORS[m.group("name")]() + m.group(4), text)


def main() -> int:
    for relative in DOCUMENTS:
        path = ROOT / relative
        text = path.read_text()
        new = regenerate(text)
        if new != text:
            path.write_text(new)
            print(f"rewrote the generated regions of {relative}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
