"""A newcomer's first mistakes with ``kafkalog``, each answered with what to type instead
(exit status 2, one line, no traceback), and nothing read changed.

Found by following README.md's operator commands on a fresh machine: ``verify data/some-topic``
(a topic's name for its partition directory) said only "no directory"; ``dump --files`` of a
partition directory said "[Errno 21] Is a directory"; ``dump FILE`` without ``--files`` said
only that ``--files`` is required.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clirun import kafkalog, tree_snapshot
from provenance import FIXTURES

BROKER = FIXTURES / "real-kafka2.8.0-zk-snappy-seanorth"  # README's data directory


@pytest.fixture
def data(tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(BROKER, copy)
    return copy


def _error(*args: str) -> str:
    result = kafkalog(*args)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr and result.stdout == "", result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kafkalog: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("command", [["verify"], ["cat"], ["lookup", "--offset", "0"]])
def test_a_topic_name_for_a_partition_directory_names_its_partitions(
    data: Path, command: list[str]
) -> None:
    before = tree_snapshot(data)
    said = _error(command[0], str(data / "some-topic"), *command[1:])
    assert (
        f"{data / 'some-topic'}; some-topic is a topic: its partitions are the directories " in said
    )
    assert f"{data / 'some-topic-0'}, in the data directory {data}" in said
    assert tree_snapshot(data) == before


def test_a_misspelt_partition_directory_names_the_one_meant(data: Path) -> None:
    said = _error("cat", str(data / "some-topc-0"))
    assert said.endswith(f"; did you mean {data / 'some-topic-0'}?")
    assert "did you mean" not in _error("verify", str(data / "elsewhere"))


def test_dump_of_a_directory_says_which_files_to_give(data: Path) -> None:
    part = data / "some-topic-0"
    said = _error("dump", "--files", str(part))
    assert said == (
        f"kafkalog: error: {part} is a directory: dump takes segment files, as "
        f"kafka-dump-log.sh does (kafkalog dump --files {part}/*.log); a whole partition or "
        f"data directory is checked by kafkalog verify {part}"
    )


def test_dump_of_files_named_without_files_says_how(data: Path) -> None:
    segment = data / "some-topic-0" / "00000000000000000000.log"
    said = _error("dump", str(segment))
    assert said == (
        "kafkalog: error: name the files after --files, as kafka-dump-log.sh takes them: "
        f"kafkalog dump --files {segment}"
    )
    assert "kafkalog dump --files DIR/00000000000000000000.log" in _error("dump")
    assert kafkalog("dump", "--files", str(segment)).returncode == 0
