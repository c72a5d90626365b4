"""``kafkalog query``: SQL over a data directory, each topic a view, ``kafka`` all of them; the
answers checked against the partitions read directly."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest

from clirun import kafkalog
from kafkalog.cli.main import main
from kafkalog.cli.query import run
from kafkalog.errors import KafkalogError
from kafkalog.log import Log, LogDir, TopicConfig
from kafkalog.records import Record
from kafkalog.spark import register

T0 = 1_767_268_800_000  # 2026-01-01T12:00:00Z
CONF = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("query") / "data"
    with LogDir(root, writable=True) as logdir:
        for topic, partitions, count in [("web-clicks", 2, 300), ("orders", 1, 50)]:
            for p in range(partitions):
                log = logdir.log(topic, p, create=True, config=TopicConfig(segment_bytes=4000))
                for i in range(count):
                    log.append_records(
                        [
                            Record.of(
                                f"{topic}:{p}:{i}".encode(),
                                key=b"k%d" % (i % 3),
                                timestamp=T0 + 1000 * i,
                                headers=[("h", b"\xff" if i == 7 else b"x")],
                            )
                        ]
                    )
    return root


def _query(spark: Any, data: Path, sql: str, *options: str, **kw: Any) -> str:
    """Runs the command in this process, on the tests' SparkSession (configs put back)."""
    before = spark.conf.get(CONF, None)
    out = io.StringIO()
    args = argparse.Namespace(
        path=str(data),
        sql=sql,
        option=list(options),
        format=kw.get("format", "table"),
        limit=kw.get("limit", 1000),
        master="local[2]",
    )
    try:
        assert run(args, out) == 0
    finally:
        if before is None:
            spark.conf.unset(CONF)
        else:
            spark.conf.set(CONF, before)
        register(spark)  # the source as the setting put back wants it
    return out.getvalue()


def test_every_topic_is_a_view_and_kafka_is_all(spark: Any, data: Path) -> None:
    text = _query(
        spark,
        data,
        "select topic, partition, count(*) as n, max(offset) as last from kafka "
        "group by topic, partition order by topic, partition",
    )
    lines = text.splitlines()
    assert lines[0].split() == ["topic", "partition", "n", "last"]
    assert [line.split() for line in lines[2:]] == [
        ["orders", "0", "50", "49"],
        ["web-clicks", "0", "300", "299"],
        ["web-clicks", "1", "300", "299"],
    ]
    text = _query(spark, data, "select count(*) as n from `web-clicks` where partition = 1")
    assert text.splitlines()[2].strip() == "300"


def test_time_window_jsonl_with_headers(spark: Any, data: Path) -> None:
    sql = (
        "select offset, key, value, timestamp, headers from orders "
        f"where timestamp >= timestamp_millis({T0 + 5000}) "
        f"and timestamp < timestamp_millis({T0 + 9000}) order by offset"
    )
    text = _query(spark, data, sql, "includeHeaders=true", format="jsonl")
    rows = [json.loads(line) for line in text.splitlines()]
    with Log(data / "orders-0", writable=False) as log:
        want = [r for r in log.records() if T0 + 5000 <= r.timestamp < T0 + 9000]
    assert [r["offset"] for r in rows] == [r.offset for r in want] == [5, 6, 7, 8]
    assert rows[0]["value"] == "orders:0:5" and rows[0]["key"] == "k2"
    assert rows[0]["timestamp"] == "2026-01-01T12:00:05.000+00:00"
    assert rows[2]["headers"] == [{"key": "h", "value": "base64:/w=="}]  # not UTF-8


def test_limit_and_csv(spark: Any, data: Path) -> None:
    text = _query(
        spark, data, "select offset, value from orders order by offset", format="csv", limit=3
    )
    assert text.splitlines() == ["offset,value", "0,orders:0:0", "1,orders:0:1", "2,orders:0:2"]


def test_errors_are_one_clear_line(spark: Any, data: Path) -> None:
    with pytest.raises(KafkalogError, match=r"query: .*no_such_table"):
        _query(spark, data, "select * from no_such_table")
    with pytest.raises(KafkalogError, match="option subscribe is not taken"):
        _query(spark, data, "select 1", "subscribe=orders")
    with pytest.raises(KafkalogError, match="option startingOffsets"):
        _query(spark, data, "select 1", "startingOffsets=bogus")
    with pytest.raises(KafkalogError, match="is not KEY=VALUE"):
        _query(spark, data, "select 1", "includeHeaders")


def test_the_command_as_a_user_runs_it(data: Path) -> None:
    """The entry point in a process of its own, starting its own Spark (the one run that pays
    for a JVM: the error path below runs the same ``main`` in this process)."""
    result = kafkalog("query", str(data), "select count(*) as n from kafka", "--format", "jsonl")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"n": 650}


def test_a_bad_query_exits_2_with_one_line(
    spark: Any, data: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """What the user sees of a query Spark refuses: exit status 2 and one ``kafkalog: error:``
    line, no traceback on the process's stderr (captured at the file descriptor, so the JVM's
    output counts too)."""
    before = spark.conf.get(CONF, None)
    try:
        code = main(["query", str(data), "select nonsense from orders"])
    finally:
        if before is None:
            spark.conf.unset(CONF)
        else:
            spark.conf.set(CONF, before)
        register(spark)
    stderr = capfd.readouterr().err
    assert code == 2 and "Traceback" not in stderr
    (line,) = [x for x in stderr.splitlines() if x.startswith("kafkalog: error:")]
    assert line.startswith("kafkalog: error: query: ") and "nonsense" in line


def test_a_mistyped_table_lists_the_tables_in_one_line(data: Path) -> None:
    """``from web_clicks`` for the topic ``web-clicks``: Spark's not-found message came after
    an 8 KB JSON line of its own logger (the Java stack), and did not say what the tables are."""
    result = kafkalog("query", str(data), "select count(*) from web_clicks")
    assert result.returncode == 2
    assert "SQLQueryContextLogger" not in result.stderr and "Py4J" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("kafkalog: error:")]
    assert line.startswith("kafkalog: error: query: [TABLE_OR_VIEW_NOT_FOUND] ")
    assert line.endswith("(the tables here: kafka, orders, `web-clicks`)")
