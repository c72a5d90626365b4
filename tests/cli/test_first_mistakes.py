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

from clirun import kafkalog, kafkalog_here, tree_snapshot
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


def test_cat_past_the_end_says_so_instead_of_printing_nothing(data: Path) -> None:
    """``cat --offset 70`` of a log of 9 offsets, or a time after its last record, printed
    nothing and exited 0: the same as an empty answer to a right question."""
    part = data / "some-topic-0"
    past = kafkalog("cat", str(part), "--offset", "70")
    assert (past.returncode, past.stdout) == (0, "")
    assert past.stderr == f"kafkalog cat: nothing from offset 70: {part} holds offsets [0, 9)\n"
    late = kafkalog("cat", str(part), "--timestamp", "2030-01-01T00:00:00Z")
    assert (late.returncode, late.stdout) == (0, "")
    assert late.stderr == (
        "kafkalog cat: no record at or after timestamp 1893456000000 "
        f"(2030-01-01T00:00:00.000+00:00) in {part}\n"
    )
    for args, lines in ((["--offset", "8"], 1), (["--max", "0"], 0), (["--max", "2"], 2)):
        result = kafkalog("cat", str(part), *args)
        assert (result.returncode, result.stderr) == (0, ""), result
        assert len(result.stdout.splitlines()) == lines, args


def test_repair_says_to_move_its_quarantine_out_of_a_data_directory(data: Path) -> None:
    """The default quarantine folder lands beside the partition, among the data directory's
    partitions, where a broker would take it for one: ``--help`` said so, the run did not."""
    segment = data / "some-topic-0" / "00000000000000000000.log"
    damaged = bytearray(segment.read_bytes())
    damaged[700] ^= 0xFF
    segment.write_bytes(bytes(damaged))
    result = kafkalog("repair", str(data / "some-topic-0"))
    assert result.returncode == 0, result
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(f"{data / 'some-topic-0'}: repaired, log end offset 9; originals in ")
    assert last.endswith(
        " (move it out of the data directory before a Kafka broker starts there: a broker "
        "takes every directory there for a partition)"
    )
    elsewhere = data.parent / "quarantine"
    segment.write_bytes(bytes(damaged))  # damaged again, its quarantine outside this time
    result = kafkalog("repair", "--quarantine", str(elsewhere), str(data / "some-topic-0"))
    assert result.stdout.strip().endswith(f"originals in {elsewhere}"), result


def test_groups_of_a_partition_directory_names_its_data_directory(data: Path) -> None:
    said = _error("groups", str(data / "some-topic-0"))
    assert said == (
        f"kafkalog: error: {data / 'some-topic-0'}: no __consumer_offsets partition here; it "
        f"is a partition of the data directory {data}: give that"
    )
    shutil.rmtree(data / "__consumer_offsets-16")  # a directory no group ever committed in
    assert _error("groups", str(data)).endswith(
        "no __consumer_offsets partition here (no consumer group has committed an offset in "
        "this data directory)"
    )


def test_ctrl_c_says_the_command_did_not_finish(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C ended every command with exit status 130 and nothing said."""
    from kafkalog.cli import verify
    from kafkalog.cli.main import main

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "run", interrupted)
    assert main(["verify", str(BROKER)]) == 130
    assert capsys.readouterr().err == "kafkalog: interrupted, verify did not finish\n"


def test_help_shows_no_docstring_markup(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` prints each command's module docstring: its reST (double backquotes,
    ``:mod:`...```) read as noise on a terminal."""
    from kafkalog.cli.main import COMMANDS, main

    assert len(COMMANDS) >= 16
    for name, _, _ in COMMANDS:
        with pytest.raises(SystemExit):
            main([name, "--help"])
        shown = capsys.readouterr().out
        assert shown.startswith(f"usage: kafkalog {name} ") and "options:" in shown, name
        assert "``" not in shown and ":mod:" not in shown, name


@pytest.fixture
def strimzi(tmp_path: Path) -> Path:
    """Strimzi's layout: each disk's data directory at ``/var/lib/kafka/data-0/kafka-log0``."""
    shutil.copytree(BROKER, tmp_path / "kafka" / "data-0" / "kafka-log0")
    return tmp_path / "kafka"


@pytest.mark.parametrize("command", [["verify"], ["groups"], ["retention"], ["timeline"]])
def test_the_parent_of_a_data_directory_named_like_a_partition_is_refused(
    strimzi: Path, command: list[str]
) -> None:
    """Pointed at ``/var/lib/kafka``, ``data-0`` read as topic ``data``, partition 0, holding
    no segments: verify said OK over 0 records, Spark and ``query`` counted 0 rows. Now an
    error naming the data directory to give instead; nothing changes."""
    before = tree_snapshot(strimzi)
    said = _error(*command, str(strimzi))
    inner = strimzi / "data-0" / "kafka-log0"
    assert f"{strimzi / 'data-0'} is named like a partition (topic data, partition 0)" in said
    assert said.endswith(f"{strimzi} is above a data directory: point at {inner}"), said
    assert tree_snapshot(strimzi) == before


def test_cat_of_a_partition_named_directory_holding_a_data_directory_names_a_partition(
    strimzi: Path,
) -> None:
    """``cat /var/lib/kafka/data-0`` printed "nothing from the log start" (an empty log)."""
    said = _error("cat", str(strimzi / "data-0"))
    assert said.endswith(f"e.g. {strimzi / 'data-0' / 'kafka-log0' / 'some-topic-0'}"), said
    said = _error("cat", str(strimzi))
    assert f"point at {strimzi / 'data-0' / 'kafka-log0'}" in said


def test_the_right_level_and_empty_partitions_are_not_refused(tmp_path: Path) -> None:
    """The check is narrow: a backup of bare topic directories (no checkpoint files) and an
    empty partition directory (no segments, no data directory inside) still read."""
    backup = tmp_path / "backup"
    shutil.copytree(BROKER / "some-topic-0", backup / "some-topic-0")
    (backup / "empty-0").mkdir()
    (backup / "odd-1" / "notes").mkdir(parents=True)  # a directory, but not Kafka's
    result = kafkalog("verify", str(backup))
    assert result.returncode == 0 and "3 partition(s)" in result.stdout, result
    result = kafkalog("verify", str(tmp_path / "backup" / "empty-0"))
    assert "is above a data directory" not in result.stderr, result


@pytest.mark.parametrize("java", ["JAVA_HOME=/nonexistent", "no java on PATH"])
def test_spark_commands_without_java_say_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, java: str
) -> None:
    """Without Java, ``query`` said "kafkalog: internal error: PySparkRuntimeError:
    [JAVA_GATEWAY_EXITED] ... (a bug: ...)", and ``job`` first wrote its 430 MB sample for
    minutes. Now one line saying what is missing and what to install, before anything."""
    if java.startswith("JAVA_HOME"):
        monkeypatch.setenv("JAVA_HOME", "/nonexistent")
        why = "JAVA_HOME=/nonexistent holds no bin/java"
    else:
        monkeypatch.delenv("JAVA_HOME", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
        why = "no java on PATH and JAVA_HOME is not set"
    sample = tmp_path / "sample"
    for command in (["query", str(BROKER), "select 1"], ["job", "--data", str(sample)]):
        result = kafkalog_here(*command)
        assert result.returncode == 2, result
        said = result.stderr.strip()
        assert said.startswith(f"kafkalog: error: kafkalog {command[0]} runs on local Spark"), said
        assert why in said and "install a Java 17 or later" in said, said
        assert "internal error" not in said and result.stdout == ""
    assert not sample.exists()
