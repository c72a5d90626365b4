"""``kafkalog verify`` on a data directory checks the files a broker keeps at its root
(``meta.properties``, the four offset checkpoints), each with its one parser, and that a
topic's partitions agree on the topic id: clean on every real broker's directory, a problem
naming the file and byte position on a broken one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from clirun import kafkalog_here
from kafkalog.log.checkpoints import PartitionMetadata
from provenance import FIXTURES

ROOT_FILES = (
    "meta.properties",
    "recovery-point-offset-checkpoint",
    "log-start-offset-checkpoint",
    "replication-offset-checkpoint",
    "cleaner-offset-checkpoint",
)


def _verify(path: Path) -> tuple[int, list[dict[str, object]]]:
    result = kafkalog_here("verify", "--json", str(path))
    return result.returncode, [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize(
    "name",
    [
        "real-cp7.6.0-kafka3.6-kraft-lz4-flink-on-prem",
        "real-kraft-ronem123",
        "volodymyrzee-kafka-2020",
        "kafka-0.9.0.1-broker",
        "kafka-4.0-snapshot-javacode",
        "real-kafka-3.4.0-zk-panic08",
    ],
)
def test_real_brokers_root_files_pass(name: str) -> None:
    data = FIXTURES / name
    assert any((data / f).exists() for f in ROOT_FILES)
    _, entries = _verify(data)
    named = [
        e
        for e in entries
        if e["type"] != "summary"
        and ("partition.metadata" in str(e) or Path(str(e.get("file"))).name in ROOT_FILES)
    ]
    assert named == []


def _copy(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    source = FIXTURES / "real-cp7.6.0-kafka3.6-kraft-lz4-flink-on-prem"
    shutil.copytree(source, data, copy_function=shutil.copyfile)
    for p in [data, *data.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    return data


@pytest.mark.parametrize(
    ("name", "content", "position", "reason"),
    [
        ("replication-offset-checkpoint", b"0\n2\nt 0 5\n", 2, "expected 2 entries, found 1"),
        ("log-start-offset-checkpoint", b"0\n1\nt zero 5\n", 4, "malformed line"),
        ("meta.properties", b"version=1\nnode.id=1\n", 0, "cluster.id was not found"),
        # a damaged line: Kafka's parser reads it as a key, serve refuses it (issue 32.6)
        (
            "meta.properties",
            b"version=1\nnode.id=1\ncluster.id=c\n\x00\x13junk\n",
            33,
            "malformed meta.properties: unknown key",
        ),
        ("meta.properties", b"version=0\n", 0, "version 0 without broker.id"),
        ("cleaner-offset-checkpoint", b"1\n0\n", 0, "unrecognised checkpoint version 1"),
    ],
)
def test_a_broken_root_file_is_a_problem_at_its_byte(
    tmp_path: Path, name: str, content: bytes, position: int, reason: str
) -> None:
    data = _copy(tmp_path)
    (data / name).write_bytes(content)
    returncode, entries = _verify(data)
    assert returncode == 1
    problems = [e for e in entries if e["type"] == "problem"]
    assert [(e["file"], e["position"]) for e in problems] == [(str(data / name), position)]
    assert reason in str(problems[0]["message"])


def test_a_topic_with_two_ids_is_a_problem(tmp_path: Path) -> None:
    data = _copy(tmp_path)
    shutil.copytree(data / "promotions-0", data / "promotions-1")
    theirs = PartitionMetadata.read(data / "promotions-0" / "partition.metadata").topic_id
    PartitionMetadata.write(data / "promotions-1" / "partition.metadata", "AAAAAAAAAAAAAAAAAAAAAg")
    returncode, entries = _verify(data)
    problems = [e for e in entries if e["type"] == "problem"]
    assert returncode == 1 and len(problems) == 1
    assert problems[0]["file"] == str(data / "promotions-1" / "partition.metadata")
    assert theirs in str(problems[0]["message"])
