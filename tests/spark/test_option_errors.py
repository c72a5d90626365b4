"""Option errors as a Spark user reads them (issue 26 §5): raised by ``load()``, for
``spark.read`` and ``spark.readStream`` alike, with kafkalog's whole message behind at most one
frame of traceback; the checks that depend on batch or stream at the first call that says which.

What PySpark allows (pyspark 4.3, checked here): ``load()`` runs the source's constructor and
``schema()`` in a Python worker, with the same options for a batch and a stream, and puts the
worker's formatted exception after Spark's ``[PYTHON_DATA_SOURCE_ERROR] ...:`` prefix.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog.spark.options import OptionError, parse_read_options
from provenance import FIXTURES

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"
HIDE = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"

# options wrong whatever the read, each refused by load()
BAD = [
    {"bogus": "1"},
    {"startingOffset": "earliest"},  # a typo of startingOffsets
    {"maxOffsetsPerTrigger": "x"},
    {"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"},
    {"maxTriggerDelay": "soon"},
    {"subscribe": "v2-none", "assign": '{"v2-none": [0]}'},
    {"startingOffsets": "{not json"},
    {"endingOffsets": "earliest"},
    {"includeHeaders": "maybe"},
    {"columns": "value,nope"},
    {"kafka.auto.offset.reset": "earliest"},
    {"failOnDataLoss": "perhaps"},
    {"path": ""},
]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("startingTimestmap", "startingTimestamp"),
        ("subcribe", "subscribe"),
        ("startingOffset", "startingOffsets"),
        ("failOnDataLos", "failOnDataLoss"),
        ("maxTriggerDelays", "maxTriggerDelay"),
    ],
)
def test_a_misspelt_option_is_named_with_the_one_meant(typed: str, meant: str) -> None:
    """Spark lower-cases option names before a Python source sees them: the message says the
    name as the docs spell it, and lists the known ones so."""
    message = _message({typed: "1"})
    assert message.startswith(
        f"unknown option {typed.lower()!r} for format kafkalog: did you mean {meant}? (known: "
    )
    assert "startingOffsetsByTimestampStrategy" in message
    assert "did you mean" not in _message({"bogus": "1"})


def _message(options: dict[str, str]) -> str:
    """kafkalog's own message for these options, from the parser itself."""
    with pytest.raises(OptionError) as caught:
        parse_read_options({"path": str(JAVA), **options}, streaming=None)
    return str(caught.value)


def _load(spark: Any, kind: str, options: dict[str, str], fmt: str = "kafkalog_python") -> Any:
    """``load()`` through the Python source (PySpark's presentation of its errors is what most
    tests here check), or with ``fmt="kafkalog"`` through the JVM source (the suite's session
    has its jar)."""
    reader = getattr(spark, kind).format(fmt).option("path", str(JAVA))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _python_part(error: Any) -> str:
    """What the Python worker said, after Spark's prefix (a documented PySparkException
    accessor: the PYTHON_DATA_SOURCE_ERROR's ``msg`` parameter)."""
    return str(error.getMessageParameters()["msg"])


@pytest.mark.parametrize("kind", ["read", "readStream"])
@pytest.mark.parametrize("options", BAD, ids=lambda o: ",".join(o))
def test_a_bad_option_is_refused_by_load_with_the_message_whole(
    spark: Any, kind: str, options: dict[str, str]
) -> None:
    from pyspark.errors import PySparkException

    message = _message(options)
    with pytest.raises(PySparkException) as caught:
        _load(spark, kind, options)
    said = _python_part(caught.value)
    lines = said.strip().splitlines()
    assert lines[-1] == f"kafkalog.spark.options.OptionError: {message}"
    # one frame at most, the source's own method: no walk through the option parser
    frames = [line for line in lines if line.startswith("  File ")]
    assert len(frames) <= 1, said
    assert "options.py" not in said


@pytest.mark.parametrize("kind", ["read", "readStream"])
@pytest.mark.parametrize("options", BAD, ids=lambda o: ",".join(o))
def test_the_jvm_source_refuses_a_bad_option_with_the_same_message(
    spark: Any, kind: str, options: dict[str, str]
) -> None:
    """The JVM source asks kafkalog's option parser at ``load()`` too: the same message, in the
    line a Python source's user reads last, and no Python traceback."""
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException) as caught:
        _load(spark, kind, options, "kafkalog")
    said = str(caught.value)
    assert f"kafkalog.spark.options.OptionError: {_message(options)}" in said
    assert "  File " not in said


def test_the_jvm_source_refuses_a_latest_start_when_it_plans(spark: Any) -> None:
    from pyspark.errors import PySparkException

    df = _load(spark, "read", {"startingOffsets": "latest"}, "kafkalog")  # no error yet
    with pytest.raises(PySparkException) as caught:
        df.count()
    assert (
        "kafkalog.spark.options.OptionError: option startingOffsets=latest is not allowed "
        "for batch queries"
    ) in str(caught.value)


def test_with_tracebacks_hidden_the_message_comes_first(spark: Any) -> None:
    """Spark's setting for Python errors without traceback leaves kafkalog's message as the
    first line of what the worker said, right after Spark's prefix."""
    from pyspark.errors import PySparkException

    spark.conf.set(HIDE, "true")
    try:
        for kind in ("read", "readStream"):
            with pytest.raises(PySparkException) as caught:
                _load(spark, kind, {"bogus": "1"})
            first = _python_part(caught.value).splitlines()[0]
            assert first == f"kafkalog.spark.options.OptionError: {_message({'bogus': '1'})}"
            assert str(caught.value).startswith(
                "[PYTHON_DATA_SOURCE_ERROR] Failed to create Python data source instance: "
                "kafkalog.spark.options.OptionError: unknown option 'bogus'"
            )
    finally:
        spark.conf.unset(HIDE)


def test_a_batch_refuses_a_latest_start_when_it_plans(spark: Any) -> None:
    """Spark does not tell ``load()`` whether it reads a batch or a stream, and a stream may
    start at ``latest``: a batch refuses it at its first action, with the message whole."""
    from pyspark.errors import PySparkException

    df = _load(spark, "read", {"startingOffsets": "latest"})  # no error yet
    with pytest.raises(PySparkException) as caught:
        df.count()
    lines = _python_part(caught.value).strip().splitlines()
    assert lines[-1] == (
        "kafkalog.spark.options.OptionError: option startingOffsets=latest is not allowed "
        "for batch queries"
    )
    assert len([line for line in lines if line.startswith("  File ")]) <= 1


def _run_stream(
    spark: Any, tmp_path: Path, options: dict[str, str], fmt: str = "kafkalog_python"
) -> Any:
    query = (
        _load(spark, "readStream", options, fmt)
        .selectExpr("offset")
        .writeStream.format("memory")
        .queryName(f"errors_{time.monotonic_ns()}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    return query


def test_a_stream_may_start_at_latest(spark: Any, tmp_path: Path) -> None:
    """``startingOffsets=latest`` (a stream's default, often written out) was refused by
    ``load()`` as if the read were a batch."""
    query = _run_stream(spark, tmp_path, {"subscribe": "v2-none", "startingOffsets": "latest"})
    assert query.exception() is None
    assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"v2-none": {"0": 112}}
    assert spark.table(query.name).count() == 0  # started at the end: the 112 records skipped


@pytest.mark.parametrize("fmt", ["kafkalog_python", "kafkalog"])
@pytest.mark.parametrize("option", ["endingOffsets", "endingTimestamp"])
def test_a_stream_refuses_an_end_with_kafkalogs_message(
    spark: Any, tmp_path: Path, option: str, fmt: str
) -> None:
    """A stream has no end; the query fails with kafkalog's message, not with PySpark's own
    UnboundLocalError (its stream runner stops a reader that ``streamReader()`` never
    returned when that raises)."""
    from pyspark.errors import StreamingQueryException

    value = "latest" if option == "endingOffsets" else "0"
    with pytest.raises(StreamingQueryException) as caught:
        _run_stream(spark, tmp_path, {"subscribe": "v2-none", option: value}, fmt)
    said = str(caught.value)
    assert (
        f"kafkalog.spark.options.OptionError: option {option} is not allowed for streaming "
        "queries: a stream has no end"
    ) in said
    assert "UnboundLocalError" not in said


def test_a_batch_warns_of_stream_only_options(caplog: pytest.LogCaptureFixture) -> None:
    """KafkaSourceProvider.validateBatchOptions: ignored in batch queries, with a warning; at
    ``load()`` (batch or stream not known yet) nothing is said."""
    given = {"path": str(JAVA), "maxOffsetsPerTrigger": "5", "maxTriggerDelay": "1m"}
    with caplog.at_level(logging.WARNING, logger="kafkalog.spark"):
        parse_read_options(given, streaming=None)
        parse_read_options(given, streaming=True)
        assert caplog.records == []
        parse_read_options(given, streaming=False)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "option maxOffsetsPerTrigger is ignored in batch queries",
        "option maxTriggerDelay is ignored in batch queries",
    ]


def test_the_retired_lateness_option_is_warned_about_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """maxTimestampLatenessMs once let an upper timestamp bound end a read early, and lost
    the rows later than it; batches are now skipped by their headers, exactly (issue 34 §2)."""
    with caplog.at_level(logging.WARNING, logger="kafkalog.spark"):
        opts = parse_read_options({"path": str(JAVA), "maxTimestampLatenessMs": "1000"})
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "maxTimestampLatenessMs is deprecated and ignored" in said[0]
    assert "no row is lost" in said[0]
    with pytest.raises(OptionError, match="maxTimestampLatenessMs"):
        parse_read_options({"path": str(JAVA), "maxTimestampLatenessMs": "soon"})
    assert opts.max_timestamp_lateness_ms == 1000  # parsed, used nowhere
