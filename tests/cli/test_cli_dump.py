"""The command as a user runs it: ``kafkalog dump`` and ``kafkalog demo`` (their ``main`` in this
process, ``clirun.kafkalog_here``; a real process where the pipe it writes to is the point)."""

from __future__ import annotations

import os
from pathlib import Path

from clirun import kafkalog_here as kafkalog
from provenance import FIXTURES

V2_NONE = bytes.fromhex(
    "0000000000000064000000600000000702bfafce330000000000020000018bcfe568000000018bcfe568"
    "7bffffffffffffffffffffffffffff0000000320000000086b6579310c76616c756531002600f6010201"
    "04763204046831047631046832011200cf0f04046b330100"
)


def test_dump_matches_kafka_dump_log_format(tmp_path: Path) -> None:
    """Spec §9.2's example: the v2_none vector with deep iteration and data printing."""
    seg = tmp_path / "00000000000000000100.log"
    seg.write_bytes(V2_NONE)
    result = kafkalog("dump", "--deep-iteration", "--print-data-log", "--files", str(seg))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"Dumping {seg}",
        "Log starting offset: 100",
        "baseOffset: 100 lastOffset: 102 count: 3 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 7 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: "
        "1700000000123 size: 108 magic: 2 compresscodec: none crc: 3215969843 isvalid: true",
        "| offset: 100 CreateTime: 1700000000000 keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] key: key1 payload: value1",
        "| offset: 101 CreateTime: 1700000000123 keySize: -1 valueSize: 2 sequence: -1 "
        "headerKeys: [h1,h2] payload: v2",
        "| offset: 102 CreateTime: 1699999999000 keySize: 2 valueSize: -1 sequence: -1 "
        "headerKeys: [] key: k3",
    ]


def test_dump_legacy_and_markers_and_truncation(tmp_path: Path) -> None:
    txn = FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-txn-0" / "00000000000000000000.log"
    result = kafkalog("dump", "--deep-iteration", "--files", str(txn))
    assert result.returncode == 0, result.stderr
    assert (
        "| offset: 9 CreateTime: 1700000000040 keySize: 4 valueSize: 6 sequence: -1 "
        "headerKeys: [] endTxnMarker: COMMIT coordinatorEpoch: 7" in result.stdout
    )
    v1 = FIXTURES / "kafka-4.0-snapshot-javacode" / "v1-gzip-0" / "00000000000000000000.log"
    result = kafkalog("dump", "--deep-iteration", "--files", str(v1))
    lines = result.stdout.splitlines()
    assert lines[2].startswith("offset: 0 position: 0 CreateTime: 1700000000000 ")
    assert "compresscodec: gzip" in lines[2] and lines[2].endswith("isvalid: true")
    assert lines[3].startswith("| offset: 0 CreateTime: 1700000000000 keySize: 2 valueSize: 10")
    assert lines[3].endswith("}")  # Kafka's stray brace on legacy record lines
    cut = tmp_path / "00000000000000000000.log"
    cut.write_bytes(V2_NONE + V2_NONE[:50])
    result = kafkalog("dump", "--files", str(cut))
    assert result.stdout.splitlines()[-1] == "Found 50 invalid bytes at the end of " + cut.name


def test_dump_reports_corruption_as_one_line(tmp_path: Path) -> None:
    bad = bytearray(V2_NONE)
    bad[8:12] = (5).to_bytes(4, "big")
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(bytes(bad))
    before = (seg.stat().st_mtime_ns, seg.read_bytes())
    result = kafkalog("dump", "--files", str(seg))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"kafkalog: error: {seg} at byte 8: record size 5 is smaller than the minimum record "
        "overhead (14)"
    )
    assert (seg.stat().st_mtime_ns, seg.read_bytes()) == before


def test_demo_writes_and_dumps_a_sample(tmp_path: Path) -> None:
    result = kafkalog("demo", "--out", str(tmp_path), "--records", "500")
    assert result.returncode == 0, result.stderr
    seg = tmp_path / "clicks-0" / "00000000000000000000.log"
    assert seg.exists() and os.path.getsize(seg) > 0
    assert "decoded 502 records" in result.stdout
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        assert f"compresscodec: {codec}" in result.stdout
    assert "isControl: true" in result.stdout and "LogAppendTime: " in result.stdout
    assert "isvalid: false" not in result.stdout


def test_a_closed_pipe_ends_the_command_quietly(tmp_path: Path) -> None:
    """``kafkalog dump ... | head -1``: once the reader is gone the command ends as Unix tools
    do (status 141, 128 + SIGPIPE), with nothing on stderr (no "Broken pipe", no traceback)."""
    import subprocess
    import sys

    from kafkalog.log import Log
    from kafkalog.records import Record

    with Log(tmp_path / "big-0") as log:
        for i in range(0, 20_000, 100):
            log.append_records([Record.of(b"v" * 50, key=b"k%d" % j) for j in range(i, i + 100)])
    segment = str(tmp_path / "big-0" / "00000000000000000000.log")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kafkalog", "dump", "--files", segment, "--print-data-log"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does after its line
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert first.startswith(b"Dumping ")
    assert err == b""
