"""Errors that need the directory, at ``load()`` (issue 34 §3): a missing path, a file, a
directory holding no Kafka partitions, an unknown topic or partition, an offsets JSON that
leaves out a partition read. Each is refused by ``load()`` -- batch and stream alike, before any
action -- with one line in the user's terms behind at most one frame of traceback; an unknown
topic is not called data loss. The same checks run without Spark (``plan.check_at_load``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kafkalog.spark.options import OptionError, parse_read_options
from kafkalog.spark.plan import DataLossError, UnknownPartitionError, check_at_load
from provenance import FIXTURES

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("load")
    (root / "empty").mkdir()
    other = root / "not-kafka"
    (other / "docs").mkdir(parents=True)
    (other / "README.txt").write_text("hello\n")
    # Strimzi's layout, pointed at one level too high: data-0 reads as topic data, partition 0
    above = root / "kafka"
    shutil.copytree(
        FIXTURES / "real-kafka2.8.0-zk-snappy-seanorth", above / "data-0" / "kafka-log0"
    )
    return {
        "empty": root / "empty",
        "not-kafka": other,
        "missing": root / "missing",
        "above": above,
    }


# (case, options but the path, where: a key of ``places`` or "java", what the message says)
CASES: list[tuple[str, dict[str, str], str, str]] = [
    ("missing path", {}, "missing", "': no such directory"),
    ("a file", {}, "file", "' is a file, not a directory; expected a Kafka data directory"),
    ("empty directory", {}, "empty", "' holds no Kafka partitions; expected a Kafka data"),
    ("not Kafka", {}, "not-kafka", "' holds no Kafka partitions; expected a Kafka data"),
    ("above a data directory", {}, "above", "kafka is above a data directory: point at "),
    ("unknown topic", {"subscribe": "v2-none,nope"}, "java", "option subscribe: no topic nope"),
    ("empty, subscribed", {"subscribe": "t"}, "empty", "option subscribe: no topic t in"),
    ("unknown partition", {"assign": '{"v2-none": [7]}'}, "java", "no partition v2-none-7"),
    (
        "offsets JSON short",
        {"subscribe": "v2-none,v2-gzip", "startingOffsets": '{"v2-none": {"0": 5}}'},
        "java",
        "option startingOffsets must give every partition read",
    ),
]


def _path(places: dict[str, Path], where: str) -> str:
    if where == "java":
        return str(JAVA)
    if where == "file":
        return str(JAVA / "v2-none-0" / "00000000000000000000.log")
    return str(places[where])


def _refusal(options: dict[str, str]) -> OptionError:
    with pytest.raises(OptionError) as caught:
        check_at_load(parse_read_options(options, streaming=None))
    return caught.value


@pytest.mark.parametrize(("case", "options", "where", "said"), CASES, ids=[c[0] for c in CASES])
def test_the_planner_refuses_at_load(
    places: dict[str, Path], case: str, options: dict[str, str], where: str, said: str
) -> None:
    problem = _refusal({"path": _path(places, where), **options})
    assert said in str(problem), case
    if where == "above":  # the data directory to give instead
        assert str(problem).endswith(f"point at {places['above'] / 'data-0' / 'kafka-log0'}")
    assert not isinstance(problem, DataLossError)
    if "topic" in case or "partition" in case:
        assert isinstance(problem, UnknownPartitionError)
        assert "its topics: " in str(problem) or "its partitions: " in str(problem)


def test_what_is_there_is_named() -> None:
    problem = str(_refusal({"path": str(JAVA), "subscribe": "nope"}))
    assert "v2-none" in problem and "v0-gzip" in problem  # its topics, listed
    problem = str(_refusal({"path": str(JAVA), "assign": '{"v2-none": [7]}'}))
    assert problem.endswith("(its partitions: 0; failOnDataLoss=false reads the others)")


def test_fail_on_data_loss_false_loads_and_reads_what_is_there() -> None:
    """A stream may wait for a topic to be created: with failOnDataLoss=false an unknown topic
    or partition loads (planning warns of it, tests/spark/test_option_semantics.py)."""
    for named in ({"subscribe": "v2-none,nope"}, {"assign": '{"v2-none": [0, 7]}'}):
        opts = parse_read_options({"path": str(JAVA), "failOnDataLoss": "false", **named})
        check_at_load(opts)


@pytest.mark.parametrize("kind", ["read", "readStream"])
@pytest.mark.parametrize(("case", "options", "where", "said"), CASES, ids=[c[0] for c in CASES])
def test_load_refuses_with_one_line(
    spark: Any,
    places: dict[str, Path],
    kind: str,
    case: str,
    options: dict[str, str],
    where: str,
    said: str,
) -> None:
    from pyspark.errors import PySparkException

    path = _path(places, where)
    problem = _refusal({"path": path, **options})
    kind_of = type(problem)
    last_line = f"{kind_of.__module__}.{kind_of.__name__}: {problem}"
    for fmt in ("kafkalog_python", "kafkalog"):  # the Python source, then the JVM source
        reader = getattr(spark, kind).format(fmt).option("path", path)
        for key, value in options.items():
            reader = reader.option(key, value)
        with pytest.raises(PySparkException) as caught:
            reader.load()  # no action: load() alone
        if fmt == "kafkalog_python":  # PySpark's PYTHON_DATA_SOURCE_ERROR, its msg parameter
            worker = str(caught.value.getMessageParameters()["msg"]).strip().splitlines()
            assert worker[-1] == last_line, case
            assert len([line for line in worker if line.startswith("  File ")]) <= 1, worker
        else:  # the JVM source says the Python source's last line, with no Python traceback
            said = str(caught.value)
            assert last_line in said, (case, said)
            assert "  File " not in said, said


def test_a_good_read_still_loads_and_reads(spark: Any) -> None:
    offsets = json.dumps({"v2-none": {"0": 5}})
    df = (
        spark.read.format("kafkalog")
        .option("path", str(JAVA))
        .option("subscribe", "v2-none")
        .option("startingOffsets", offsets)
        .load()
    )
    assert df.count() == 107
