"""The JVM path's Python readers (``PythonReaders.java``, ``jvm_bridge.serve_reads``): the
splits the Java decoder hands to Python (a remote store's every split) are served by a few
long-lived reader processes, at most one per task running at once, not a process per split;
a reader killed between splits is replaced and the rows stay exact; one killed mid-split fails
the query naming the split and byte, never a short answer; none outlives its session's end or
its JVM's. Watched from outside in a driver of its own (``readers_probe.py``), through the
trace every reader writes (``jvm_bridge.TRACE_ENV``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record
from kafkalog.spark.jvm_bridge import TRACE_ENV
from provenance import FIXTURES

JAVA = "kafka-4.0-snapshot-javacode"
#: local[2]: two tasks at once, so two readers at most
SLOTS = 2


def _big_remote(s3_store: Any, tmp_path: Path) -> str:
    """One partition of one 40 MB segment, in the store: a split its reader answers in several
    batches of rows (16 MB of segment bytes each)."""
    data = tmp_path / "big"
    with Log(data / "big-0", TopicConfig()) as log:
        for b in range(100):
            log.append_records(
                [
                    Record.of(bytes([b % 251]) * 4000, b"k%d" % i, 1_700_000_000_000)
                    for i in range(100)
                ]
            )
    relative = f"readers-big-{os.getpid()}"
    for path in sorted(p for p in data.rglob("*") if p.is_file()):
        key = f"fixtures/{relative}/{path.relative_to(data).as_posix()}"
        s3_store.client.put_object(Bucket="kafkalog-fixtures", Key=key, Body=path.read_bytes())
    return str(s3_store.uri(relative))


def test_readers_are_kept_replaced_and_end_with_the_jvm(s3_store: Any, tmp_path: Path) -> None:
    big = _big_remote(s3_store, tmp_path)
    trace = tmp_path / "trace"
    probe = Path(__file__).with_name("readers_probe.py")
    env = {**os.environ, TRACE_ENV: str(trace), "PYSPARK_PYTHON": sys.executable}
    args = [str(trace), str(FIXTURES / JAVA), s3_store.uri(JAVA), big]
    done = subprocess.run(
        [sys.executable, str(probe), *args], capture_output=True, text=True, timeout=600, env=env
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("REPORT ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-5000:]
    report = json.loads(lines[0].removeprefix("REPORT "))
    print(json.dumps(report, indent=1))  # shown when an assertion below fails

    first = report["first"]
    assert first["equal"] and first["rows"] > 0
    assert first["splits"] >= 8, first  # 24 segments, each read by a Python reader
    assert 1 <= len(first["started"]) <= SLOTS, first
    assert set(first["pids"]) <= set(first["started"])

    assert report["killed_left"] == []
    after = report["after_kill"]
    assert after["equal"] and after["rows"] == first["rows"]
    assert 1 <= len(after["started"]) <= SLOTS, after
    assert not set(after["pids"]) & set(first["pids"]), "a killed reader was asked again"

    mid = report["mid_split"]
    assert mid["shot"] is not None, "no read of the big split was seen"
    assert not mid["finished_before_kill"], mid
    assert mid["answer"] is None, f"a query whose reader was killed answered {mid['answer']}"
    _, pid, position, segment = mid["shot"]
    failure = mid["failure"]
    assert f"the Python reader (pid {pid}) reading " in failure, failure
    said = f"{segment.replace('%20', ' ')} from byte {position} ended before the end of the split"
    assert said in failure, failure
    # killed after writing a batch: those rows reached Spark, the query failed all the same
    assert re.search(r"after [1-9][0-9]* of its rows \(killed by signal 9", failure), failure
    assert segment.endswith("/big-0/00000000000000000000.log"), segment

    again = report["after_mid_split"]
    assert again["equal"] and pid not in map(str, again["pids"]), again

    assert report["alive_before_stop"], report
    assert report["left_after_stop"] == [], "readers outlived SparkSession.stop()"
    assert report["new_session_rows"] == first["rows"]
    assert report["readers_before_jvm_kill"] and len(report["jvms"]) == 1, report
    assert report["left_after_jvm_kill"] == [], "readers outlived their killed JVM"


def _answer(stdout: Any) -> tuple[list[int], dict[str, Any]]:
    """One answer of a reader: the offsets of its Arrow stream's rows, and its trailer."""
    import struct

    import pyarrow as pa

    reader = pa.ipc.open_stream(stdout)
    offsets = [o for b in reader for o in b.column("offset").to_pylist()]
    (n,) = struct.unpack(">I", stdout.read(4))
    return offsets, json.loads(stdout.read(n))


def test_one_reader_answers_split_after_split(tmp_path: Path) -> None:
    """``jvm_bridge reader`` as the JVM drives it, on its pipes: several requests in one
    process, each answered by its rows and a trailer; a damaged split's trailer carries the
    Python source's error naming file and byte, a lost one's (failOnDataLoss=false) the warning,
    and the process goes on to the next request; it ends when its stdin closes."""
    from kafkalog.spark.jvm_bridge import _split_json
    from kafkalog.spark.options import parse_read_options
    from kafkalog.spark.plan import plan_read

    config = TopicConfig(segment_bytes=1500, index_interval_bytes=256)
    with Log(tmp_path / "data" / "t-0", config) as log:
        for i in range(60):
            log.append_records([Record.of(b"v%03d" % i, b"k", 1_700_000_000_000 + i)])
    opts = parse_read_options({"path": str(tmp_path / "data")})
    splits, _ = plan_read(opts)
    assert len(splits) >= 3
    damaged, lost = splits[1], splits[2]
    with open(damaged.segment, "r+b") as f:  # a record's byte: the batch CRC fails
        f.seek(damaged.start_position + 70)
        byte = f.read(1)
        f.seek(damaged.start_position + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.unlink(lost.segment)

    def request(split: Any, fail: bool) -> bytes:
        req = {"split": _split_json(split), "includeHeaders": False, "failOnDataLoss": fail}
        return json.dumps({**req, "location": str(tmp_path / "data"), "aborted": []}).encode()

    env = {**os.environ, TRACE_ENV: str(tmp_path / "trace")}
    process = subprocess.Popen(
        [sys.executable, "-m", "kafkalog.spark.jvm_bridge", "reader"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    try:
        answers = []
        for split, fail in ((splits[0], True), (damaged, True), (lost, False), (splits[0], True)):
            process.stdin.write(request(split, fail) + b"\n")
            process.stdin.flush()
            answers.append(_answer(process.stdout))
        process.stdin.close()
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()
    first = list(range(splits[0].start_offset, splits[0].end_offset))
    assert answers[0] == (first, {"error": None, "lines": []})
    error = answers[1][1]["error"]
    assert error.startswith(f"DamagedLogError: {damaged.segment} at byte "), error
    assert "record batch CRC mismatch" in error, error
    offsets, trailer = answers[2]
    assert offsets == [] and trailer["error"] is None
    assert len(trailer["lines"]) == 1 and trailer["lines"][0].startswith("WARNING kafkalog")
    assert "t-0: offsets" in trailer["lines"][0] and "was deleted" in trailer["lines"][0]
    assert answers[3] == answers[0]  # the same process, after an error and a warning
    served = (tmp_path / "trace").read_text().count("reader_serving:")
    assert served == 1
