"""Shared test setup: the fixture tree beside the repository and a read-only guard for it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))

#: the CLI's sessions (``kafkalog job`` in a subprocess, each with a cache dir of its own) would
#: each dump a ~160 MB class archive from a JVM outliving its test: off for the suite, on in
#: tests/spark/test_class_archive.py, which proves it
os.environ.setdefault("KAFKALOG_CLASS_ARCHIVE", "0")


@pytest.fixture(scope="session")
def s3_store() -> Iterator[Any]:
    """The fixture tree in an S3 bucket on loopback (see tests/s3store.py)."""
    from provenance import FIXTURES
    from s3store import serve

    yield from serve(FIXTURES)


#: the JVM source's verified batch summaries of this test session: kept apart from the user's
#: cache directory, so what an earlier run verified (the fixtures keep their inodes) never makes a
#: test's read warm before the test itself warms it
SUMMARIES_CONF = "spark.kafkalog.batchSummaries.dir"
SUMMARIES_DIR = tempfile.mkdtemp(prefix="kafkalog-test-summaries-")


@pytest.fixture(scope="session")
def spark_session() -> Iterator[object]:
    """One local SparkSession for every test that needs Spark (starting one costs seconds)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafkalog.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("kafkalog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config(SUMMARIES_CONF, SUMMARIES_DIR)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(session)
    _REGISTERED.update(_restored_state(session))
    yield session
    session.stop()
    shutil.rmtree(SUMMARIES_DIR, ignore_errors=True)


#: the confs ``register`` sets (what it registered follows from the pushdown and the path it
#: records) and the ones the ``spark`` fixture puts back, as they were right after the session's
#: ``register``
_REGISTERED: dict[str, str | None] = {}


def _restored_state(session: Any) -> dict[str, str | None]:
    """What the ``spark`` fixture puts back: the confs ``register`` and the fixture set, and
    whether the planner ``register`` started still runs (``start_planner`` gives a new socket
    where it does not). A few conf reads: ``register`` itself costs tens of Py4J calls, which
    after each of some 430 tests added seconds to the suite."""
    from kafkalog.spark import jvm_path, source

    keys = (
        source.PUSHDOWN_CONF,
        source.PUSHDOWN_USED_CONF,  # pushdown=False registered the sources without pushdown
        source.PATH_USED_CONF,  # which source register put in front of format("kafkalog")
        jvm_path.PATH_CONF,
        jvm_path.PYTHON_CONF,
        jvm_path.PYTHONPATH_CONF,
        jvm_path.PLANNER_CONF,
        FALLBACK_CONF,
        SUMMARIES_CONF,
    )
    state = {key: session.conf.get(key, None) for key in keys}
    state["planner alive"] = str(jvm_path.start_planner() == state[jvm_path.PLANNER_CONF])
    return state


#: tests/test_read_path_differential turns the JVM source's Python reader of last resort off
FALLBACK_CONF = "spark.kafkalog.jvm.fallback"


@pytest.fixture()
def spark(spark_session: Any) -> Iterator[Any]:
    """The shared session, put back after the test as every test expects it: the kafkalog
    source registered as ``register`` leaves it by default (filter pushdown on), whatever a
    test switched. Registered again only where the test left anything ``register`` or this
    fixture sets otherwise (a test that registers a source named ``kafkalog`` or
    ``kafkalog_python`` itself must do so through ``kafkalog.spark.register``, which records
    what it registered)."""
    yield spark_session
    now = _restored_state(spark_session)
    changed = {key for key, value in now.items() if _REGISTERED.get(key) != value}
    spark_session.conf.unset(FALLBACK_CONF)
    spark_session.conf.set(SUMMARIES_CONF, SUMMARIES_DIR)  # tests/spark/test_batch_summaries
    if not changed - {FALLBACK_CONF, SUMMARIES_CONF}:  # nothing of register's
        return
    spark_session.conf.unset("spark.sql.python.filterPushdown.enabled")
    import kafkalog.spark
    from kafkalog.spark.jvm_path import PLANNER_CONF

    kafkalog.spark.register(spark_session)
    # a planner started anew (the old one gone) is the one later tests find
    _REGISTERED[PLANNER_CONF] = spark_session.conf.get(PLANNER_CONF, None)


#: modules holding a test of 15 s or more on two cores (``--durations``), run first, in this
#: order: with ``--dist worksteal`` (pyproject's addopts) the first worker starts on them while
#: the other takes the rest, and a worker that runs dry steals from the end of the other's
#: queue, so the run ends on short tests instead of one worker finishing a minute-long test
#: alone. Whole modules move, so their module-scoped fixtures are set up once per worker; a
#: stale entry only costs balance, never a test.
SLOW_FIRST = (
    "tests/spark/test_cluster.py",
    "tests/spark/test_jvm_setup.py",
    "tests/spark/test_python_readers.py",
    "tests/cli/test_job.py",
    "tests/cli/test_query.py",
    "tests/log/test_crash_producers.py",
    "tests/test_readme.py",
    "tests/spark/test_stream_restarts.py",
    "tests/server/test_serve_txn_crash.py",
    "tests/test_lint.py",
    "tests/log/test_crash.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of ``SLOW_FIRST`` first, the others after in collection order (stable, so
    every xdist worker collects the same order)."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    late = len(SLOW_FIRST)

    def key(item: pytest.Item) -> int:
        return rank.get(item.nodeid.split("::")[0], late)  # the path from the rootdir

    items.sort(key=key)
