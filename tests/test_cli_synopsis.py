"""The command reference cannot drift from the parsers: the generated regions of README.md and
docs/cli.md must be what ``tests/cli_synopsis.py`` writes from them today."""

from __future__ import annotations

import re

import pytest

import cli_synopsis
from cli_synopsis import DOCUMENTS, ROOT, command_parsers, regenerate, regions
from kafkalog.cli.main import COMMANDS

EXPECTED = {"README.md": {"commands"}, "docs/cli.md": {"synopsis", "json-commands"}}


@pytest.mark.parametrize("relative", DOCUMENTS)
def test_generated_regions_are_what_the_parsers_say(relative: str) -> None:
    text = (ROOT / relative).read_text()
    assert {name for name, _ in regions(text)} == EXPECTED[relative]
    assert regenerate(text) == text, (
        f"{relative} differs from the parsers: run python3 tests/cli_synopsis.py"
    )


def test_the_synopsis_shows_every_option_of_every_command() -> None:
    """Including the ones the hand-kept synopsis lacked (issue 35)."""
    synopsis = cli_synopsis.synopsis()
    for name, parser in command_parsers().items():
        assert f"kafkalog {name} " in synopsis
        for option in re.findall(r"--[a-z][a-z-]*", parser.format_usage()):
            assert option in synopsis
    for option in ("--cleanup-policy", "--partition", "--format", "--value-column", "--config"):
        assert option in synopsis


def test_a_changed_parser_changes_the_synopsis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: an option added to a command appears in what is generated."""
    from kafkalog.cli import verify

    original = verify.add_parser

    def with_extra(sub: object) -> None:
        original(sub)
        sub.choices["verify"].add_argument("--brand-new-option")  # type: ignore[attr-defined]

    monkeypatch.setattr(verify, "add_parser", with_extra)
    text = (ROOT / "docs/cli.md").read_text()
    assert "--brand-new-option" in regenerate(text) and regenerate(text) != text


def test_the_json_table_covers_every_command_with_json() -> None:
    text = (ROOT / "docs/cli.md").read_text()
    table = text[text.index("| command | `type` | fields |") :].split("\n\n")[0]
    in_table = {m.split()[0] for m in re.findall(r"^\| `([a-z-]+(?: --[a-z-]+)?)`", table, re.M)}
    with_json = {n for n, p in command_parsers().items() if "--json" in p.format_usage()}
    assert in_table == with_json
    assert len(COMMANDS) == len(command_parsers())
