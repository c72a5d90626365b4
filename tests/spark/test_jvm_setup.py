"""How the JVM source gets there: the jar built from the repo's Java sources, carried by a
wheel, put in front of ``format("kafkalog")`` by ``register``, and, with no JDK and no jar, the
Python source serving every read with one INFO line saying why."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from provenance import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q"]


def test_register_puts_the_jvm_source_in_front(spark: Any) -> None:
    """The suite's session (built the usual way, then ``register``) reads batches and streams
    in the JVM: Spark's plan names the JVM scan, and pruned columns and pushed filters."""
    import kafkalog.spark
    from kafkalog.spark.jar import find_jar, jar_name

    assert kafkalog.spark.path_in_use(spark) == "jvm"  # as docs/spark.md names it
    assert find_jar(build=False).name == jar_name()
    df = spark.read.format("kafkalog").option("path", str(FIXTURES / "kafka-0.9.0.1-broker"))
    df.load().createOrReplaceTempView("jvm_setup_probe")
    plan = spark.sql("EXPLAIN SELECT value FROM jvm_setup_probe WHERE offset >= 3").first()[0]
    assert "kafkalog (JVM)" in plan and "columns=value" in plan and "filters=1" in plan
    broker = str(FIXTURES / "kafka-0.9.0.1-broker")  # load() checks the path (issue 34)
    stream = spark.readStream.format("kafkalog").option("path", broker).load()
    assert stream.isStreaming and "value" in stream.columns


def test_the_warmup_runs_the_decoders_first_task_in_the_executor(
    spark: Any, monkeypatch: Any
) -> None:
    """The warm-up (``spark.kafkalog.jvm.warmup``: off by default, so the suite's ``register``
    ran none) in the background runs one task of Spark's own in the local executor: the
    executor's copy of the jar decodes ``FirstTask``'s own segment (1,400 rows: its commit
    marker is not a row; "already" where this class loader ran it), once per class loader and
    once per application; ``first_task`` (``true``: inside ``register``) runs none after it."""
    from kafkalog.spark import jvm_path
    from kafkalog.spark.jar import find_jar

    assert spark.conf.get(jvm_path.WARMUP_STATE_CONF, None) is None  # off by default
    monkeypatch.setattr(jvm_path, "_first_tasks", set())
    jar = str(find_jar(build=False))
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup(None))
    try:
        thread = jvm_path.first_task_in_background(spark, jar)
        assert thread is not None and thread.daemon
        thread.join(timeout=300)
        state = _warmup_state(spark)
        assert re.fullmatch(r"done \d+ \((read 1400 rows in \d+ ms|already)\)", state), state
        assert len(set(tracker.getJobIdsForGroup(None)) - jobs) == 1
        jobs = set(tracker.getJobIdsForGroup(None))
        jvm_path.first_task(spark, jar)  # once per application: no job
        assert jvm_path.first_task_in_background(spark, jar) is None
        assert set(tracker.getJobIdsForGroup(None)) == jobs
        again = spark.range(1, numPartitions=1).selectExpr(
            "reflect('kafkalog.jvm.FirstTask', 'run')"
        )
        assert again.first()[0] == "already"  # once per class loader
    finally:
        spark.conf.unset(jvm_path.WARMUP_STATE_CONF)


def test_the_warmup_inside_register_runs_one_job(spark: Any, monkeypatch: Any) -> None:
    """``first_task`` (``spark.kafkalog.jvm.warmup=true``) runs its one job on the calling
    thread and has its state when it returns."""
    from kafkalog.spark import jvm_path
    from kafkalog.spark.jar import find_jar

    monkeypatch.setattr(jvm_path, "_first_tasks", set())
    jar = str(find_jar(build=False))
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup(None))
    try:
        jvm_path.first_task(spark, jar)
        state = spark.conf.get(jvm_path.WARMUP_STATE_CONF)
        assert re.fullmatch(r"done \d+ \((read 1400 rows in \d+ ms|already)\)", state), state
        assert len(set(tracker.getJobIdsForGroup(None)) - jobs) == 1
    finally:
        spark.conf.unset(jvm_path.WARMUP_STATE_CONF)


#: the JVM system properties ``StreamWarmup.java`` keeps (one application per JVM)
STREAM_WARMUP_APPLICATION = "kafkalog.jvm.warmup.stream.application"
STREAM_WARMUP_STATE = "kafkalog.jvm.warmup.stream.state"


def _system(spark: Any, method: str, key: str) -> Any:
    """``System.METHOD(key)`` in this local session's JVM (the executor's is the driver's);
    ``None`` for null (``java_method`` answers the string "null")."""
    value = spark.sql(f"SELECT java_method('java.lang.System', '{method}', '{key}')").first()[0]
    return None if value in (None, "null") else value


def _settled_stream_warmup(spark: Any, within: float = 300.0) -> str | None:
    """The stream warm-up's state once none is running (``None``: none ran)."""
    deadline = time.monotonic() + within
    while (state := _system(spark, "getProperty", STREAM_WARMUP_STATE)) == "running":
        assert time.monotonic() < deadline, "the warm-up a stream started never ended"
        time.sleep(0.1)
    return None if state is None else str(state)


def test_a_streams_start_runs_the_warmup_once_per_application(spark: Any) -> None:
    """By default (``spark.kafkalog.jvm.warmup`` unset: ``stream``) the JVM source starts its
    first task when a stream starts (``StreamWarmup.java``: a JVM thread of its own, a job in
    the stream's job group, beside its first micro-batch, after ``start()`` returned), once per
    application: never with ``false``, not again for the next stream. Every stream's rows are
    the batch read's."""
    from kafkalog.spark import jvm_path

    broker = str(FIXTURES / "kafka-0.9.0.1-broker")
    expected = spark.read.format("kafkalog").option("path", broker).load().count()
    tracker = spark.sparkContext.statusTracker()
    _settled_stream_warmup(spark)  # an earlier test's stream may have started one
    for key in (STREAM_WARMUP_APPLICATION, STREAM_WARMUP_STATE):  # as in a new application
        _system(spark, "clearProperty", key)

    def stream(name: str, until_warm: bool) -> tuple[int, int, int]:
        """A stream read whole into a memory table (kept running, with ``until_warm``, until
        the warm-up it started ended: the query's end would cancel its job group): its rows,
        its jobs and its micro-batches (each one job of the memory sink's)."""
        query = (
            spark.readStream.format("kafkalog")
            .option("path", broker)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "200")
            .load()
            .writeStream.format("memory")
            .queryName(name)
            .start()
        )
        try:
            query.processAllAvailable()
            if until_warm:
                _settled_stream_warmup(spark)
        finally:
            query.stop()
        batches = sum(1 for p in query.recentProgress if "addBatch" in p["durationMs"])
        jobs = len(tracker.getJobIdsForGroup(str(query.runId)))
        return spark.table(name).count(), jobs, batches

    try:
        spark.conf.set(jvm_path.WARMUP_CONF, "false")
        rows, jobs, batches = stream("warmup_off", until_warm=False)
        assert (rows, jobs) == (expected, batches) and batches > 1
        assert _system(spark, "getProperty", STREAM_WARMUP_STATE) is None
        spark.conf.unset(jvm_path.WARMUP_CONF)
        rows, jobs, batches = stream("warmup_default", until_warm=True)
        state = _system(spark, "getProperty", STREAM_WARMUP_STATE)
        assert re.fullmatch(r"done \d+ \((read 1400 rows in \d+ ms|already)\)", state), state
        assert (rows, jobs) == (expected, batches + 1)  # its job is in the stream's group
        app = spark.sparkContext.applicationId
        assert _system(spark, "getProperty", STREAM_WARMUP_APPLICATION) == app
        rows, jobs, batches = stream("warmup_again", until_warm=False)
        assert (rows, jobs) == (expected, batches)  # no second warm-up
        assert _system(spark, "getProperty", STREAM_WARMUP_STATE) == state
    finally:
        spark.conf.unset(jvm_path.WARMUP_CONF)
        for name in ("warmup_off", "warmup_default", "warmup_again"):
            spark.catalog.dropTempView(name)


def _warmup_state(spark: Any, within: float = 300.0) -> str:
    """The warm-up's state once the background task is done (it sets it last)."""
    from kafkalog.spark import jvm_path

    deadline = time.monotonic() + within
    while (state := spark.conf.get(jvm_path.WARMUP_STATE_CONF, None)) is None:
        assert time.monotonic() < deadline, "the warm-up register() started never ended"
        time.sleep(0.05)
    return str(state)


def test_the_warmup_runs_no_job_where_executors_are_other_jvms() -> None:
    """Not a local session: nothing asked of Spark but its master (one task would not reach
    every executor)."""
    from kafkalog.spark import jvm_path

    class Context:
        master = "spark://elsewhere:7077"

        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"no job expected ({name})")

    class Session:
        sparkContext = Context()

        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"nothing else expected ({name})")

    jvm_path.first_task(Session(), "some.jar")
    assert jvm_path.first_task_in_background(Session(), "some.jar") is None


def test_a_warmup_that_cannot_start_is_only_said(monkeypatch: Any) -> None:
    """The background warm-up whose job cannot even be made (here: Spark refuses it, as on a
    thread that does not see the jar) leaves ``failed: ...`` in its state and starts no thread;
    ``register`` goes on."""
    from kafkalog.spark import jvm_path

    monkeypatch.setattr(jvm_path, "_first_tasks", set())
    confs: dict[str, str] = {}

    class Conf:
        def set(self, key: str, value: str) -> None:
            confs[key] = value

    class Context:
        master = "local[2]"
        applicationId = "local-test"

    class Session:
        sparkContext = Context()
        conf = Conf()

        def range(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("class kafkalog.jvm.FirstTask not found\nmore lines")

    assert jvm_path.first_task_in_background(Session(), "some.jar") is None
    state = confs[jvm_path.WARMUP_STATE_CONF]
    assert state == "failed: class kafkalog.jvm.FirstTask not found", state


def test_the_first_plan_compiles_on_a_thread_of_its_own_and_runs_no_job(
    spark: Any, monkeypatch: Any
) -> None:
    """``first_plan_in_background`` (``spark.kafkalog.jvm.warmup.compile``) plans and compiles
    a one-row ``range`` on a daemon thread: Spark runs no job for it (it reads nothing, the
    user's or other), it says ``done <ms>``, once per application."""
    from kafkalog.spark import jvm_path

    monkeypatch.setattr(jvm_path, "_first_plans", set())
    tracker = spark.sparkContext.statusTracker()
    jobs = set(tracker.getJobIdsForGroup(None))
    try:
        spark.conf.unset(jvm_path.PLAN_WARMUP_STATE_CONF)
        thread = jvm_path.first_plan_in_background(spark)
        assert thread is not None and thread.daemon
        thread.join(timeout=300)
        state = spark.conf.get(jvm_path.PLAN_WARMUP_STATE_CONF, None)
        assert state is not None and re.fullmatch(r"done \d+", state), state
        assert set(tracker.getJobIdsForGroup(None)) == jobs  # planned and compiled, not run
        assert jvm_path.first_plan_in_background(spark) is None  # once per application
    finally:
        spark.conf.unset(jvm_path.PLAN_WARMUP_STATE_CONF)


def test_register_starts_the_first_plan_only_when_asked(spark: Any, monkeypatch: Any) -> None:
    """``register`` on the JVM path starts the first plan with
    ``spark.kafkalog.jvm.warmup.compile`` ``true`` or ``early`` (opt-in), never by default nor
    with ``spark.kafkalog.jvm.warmup=false``."""
    import kafkalog.spark
    from kafkalog.spark import jvm_path

    started: list[Any] = []
    monkeypatch.setattr(jvm_path, "first_plan_in_background", started.append)
    try:
        kafkalog.spark.register(spark)
        assert started == []
        for value in ("true", "early"):
            spark.conf.set(jvm_path.PLAN_WARMUP_CONF, value)
            kafkalog.spark.register(spark)
            assert started == [spark], value
            started.clear()
        spark.conf.set(jvm_path.WARMUP_CONF, "false")
        kafkalog.spark.register(spark)
        assert started == []
    finally:
        spark.conf.unset(jvm_path.WARMUP_CONF)
        spark.conf.unset(jvm_path.PLAN_WARMUP_CONF)


def test_a_first_plan_that_fails_is_only_said(monkeypatch: Any) -> None:
    """A first plan Spark refuses leaves ``failed: <its first line>`` in its state; nothing
    is raised."""
    from kafkalog.spark import jvm_path

    monkeypatch.setattr(jvm_path, "_first_plans", set())
    confs: dict[str, str] = {}

    class Conf:
        def get(self, key: str, default: Any = None) -> Any:
            return confs.get(key, default)

        def set(self, key: str, value: str) -> None:
            confs[key] = value

    class Context:
        applicationId = "local-test"

    class Session:
        sparkContext = Context()
        conf = Conf()

        def range(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("no planning here\nmore lines")

    thread = jvm_path.first_plan_in_background(Session())
    assert thread is not None
    thread.join(timeout=60)
    assert confs[jvm_path.PLAN_WARMUP_STATE_CONF] == "failed: no planning here"


def test_the_jar_is_named_by_its_sources(tmp_path: Path, monkeypatch: Any) -> None:
    """A changed source is a new jar (a stale one is never used), built by javac into the
    cache; it registers the source with Spark's service loader."""
    from kafkalog.spark import jar

    monkeypatch.setenv("KAFKALOG_CACHE_DIR", str(tmp_path))
    copy = tmp_path / "jvm"
    import shutil

    shutil.copytree(jar.JAVA_ROOT, copy, ignore=shutil.ignore_patterns("*.jar"))
    monkeypatch.setattr(jar, "JAVA_ROOT", copy)
    first = jar.jar_name()
    built = jar.find_jar()
    assert built == tmp_path / first and built.is_file()
    with zipfile.ZipFile(built) as z:
        assert z.read(jar.SERVICE).decode().strip() == jar.PROVIDER
        assert "kafkalog/jvm/KafkaLogSource.class" in z.namelist()
    source = next(copy.rglob("Rows.java"))
    source.write_text(source.read_text() + "\n// changed\n")
    assert jar.jar_name() != first


def test_a_wheel_carries_the_jar(tmp_path: Path) -> None:
    out = tmp_path / "wheel"
    done = subprocess.run(
        [*PIP_WHEEL, "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KAFKALOG_REQUIRE_JAR": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    from kafkalog.spark.jar import jar_name

    (wheel,) = out.glob("kafkalog-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert f"kafkalog/spark/jvm/{jar_name()}" in names
    assert "kafkalog/spark/jvm/kafkalog/jvm/SplitReader.java" in names


def test_without_a_jdk_or_jar_the_python_source_serves(tmp_path: Path) -> None:
    """No javac, an empty cache: ``register`` says once, at INFO, why and how to get the fast
    path, and the suite's Spark reads of the fixtures pass on the Python source (a subset of
    them, ``_fallback_suite``, run by a pytest inside the probe's own driver, after the probe:
    one JVM, whose session the suite's ``spark_session`` fixture then takes and registers
    again; the differential test runs that source on every shape, kind and fixture
    partition)."""
    fixture = FIXTURES / "kafka-0.9.0.1-broker"
    suite = _fallback_suite()
    assert len(suite) >= 10, suite
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"""
import logging, sys
root = logging.getLogger()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
from pyspark.sql import SparkSession
import kafkalog.spark
from kafkalog.spark.source import path_in_use
s = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
kafkalog.spark.register(s)
kafkalog.spark.register(s)
n = s.read.format("kafkalog").option("path", {str(fixture)!r}).load().count()
print("PATH", path_in_use(s), n, flush=True)
# the suite's reads in this driver, logging as pytest's own runs leave it
for handler in list(root.handlers):
    root.removeHandler(handler)
root.setLevel(logging.WARNING)
import pytest
sys.exit(pytest.main(["-q", "-n", "0", *sys.argv[1:]]))
"""
    )
    env = {
        **os.environ,
        "KAFKALOG_JAVAC": str(tmp_path / "no-javac"),
        "KAFKALOG_CACHE_DIR": str(tmp_path / "cache"),
        "KAFKALOG_FIXTURES": str(FIXTURES),
    }
    done = subprocess.run(
        [sys.executable, str(probe), *suite],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        cwd=ROOT,
    )
    lines = done.stdout.splitlines()
    infos = [line for line in lines if "Python data source serves" in line]
    assert len(infos) == 1 and infos[0].startswith("INFO ") and "JDK" in infos[0], done.stdout
    assert "PATH python 700" in lines, done.stdout[-4000:] + done.stderr[-3000:]
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert f"{len(suite)} passed" in done.stdout and "skipped" not in done.stdout, done.stdout
    cache = tmp_path / "cache"  # no jar built, nothing cached
    assert not cache.exists() or not list(cache.iterdir())


READS = "tests/spark/test_read_fixtures.py"


def _features(directory: Path) -> set[Any]:
    """What a read of this partition meets: each (magic, codec) of its batches, transactions
    and control batches, headers, null keys and values, several segments."""
    from kafkalog.log import Log

    found: set[Any] = {"segments"} if len(list(directory.glob("*.log"))) > 1 else set()
    log = Log(directory, writable=False)
    try:
        for batch in log.batches():
            found.add((batch.magic, batch.compression.label))
            found |= {"control"} if batch.is_control else set()
            found |= {"transactional"} if batch.is_transactional else set()
            for record in batch.records():
                found |= {"headers"} if record.headers else set()
                found |= {"null key"} if record.key is None else set()
                found |= {"null value"} if record.value is None else set()
    finally:
        log.close()
    return found


def _fallback_suite() -> list[str]:
    """The reads of ``READS`` the fallback runs: every test of options and semantics, and of the
    per-partition reads a subset meeting every feature (``_features``) some fixture partition
    has, chosen greedily (the most features not met yet first): 11 of 58 partitions (16 taken
    in order). Each partition's full read through the Python source equals the JVM source's,
    itself checked against a brute force, in
    tests/test_read_path_differential.py::test_jvm_read_kinds_on_fixtures (the same source
    code, registered as ``kafkalog_python``); this run proves the fallback puts it behind
    ``format("kafkalog")`` and serves the suite's reads."""
    from provenance import fixture_partitions

    out = [f"{READS}::{name}" for name in _OTHER_READS]
    found = {directory: _features(directory) for directory in fixture_partitions()}
    wanted = set().union(*found.values())
    seen: set[Any] = set()
    while seen != wanted:  # greedy: the partition meeting the most features not met yet
        directory = max(found, key=lambda d: len(found[d] - seen))  # the first of equals
        seen |= found.pop(directory)
        label = directory.relative_to(FIXTURES).as_posix()
        out.append(f"{READS}::test_fixture_partition_as_dataframe[{label}]")
    return out


#: the tests of ``READS`` besides the per-partition reads (a test added there and not here is
#: caught by ``test_the_fallback_runs_every_other_read``)
_OTHER_READS = (
    "test_option_semantics",
    "test_option_errors_name_the_option",
    "test_fail_on_data_loss_both_ways",
    "test_read_committed_drops_aborted_transactions",
    "test_splits_by_bytes_and_min_partitions",
)


def test_the_fallback_runs_every_other_read() -> None:
    import ast

    tree = ast.parse((ROOT / READS).read_text())
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    tests = {n for n in tests if n.startswith("test_")}
    assert tests == {*_OTHER_READS, "test_fixture_partition_as_dataframe"}


def test_the_info_line_is_logged_once(caplog: Any, monkeypatch: Any, tmp_path: Path) -> None:
    from kafkalog.spark import jvm_path

    monkeypatch.setenv("KAFKALOG_JAVAC", str(tmp_path / "no-javac"))
    monkeypatch.setenv("KAFKALOG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(jvm_path, "_said", set())

    class Conf:
        def get(self, key: str, default: str) -> str:
            return default

    class Session:
        conf = Conf()

    with caplog.at_level(logging.INFO, logger="kafkalog.spark"):
        assert jvm_path.use_jvm(Session()) == "python"
        assert jvm_path.use_jvm(Session()) == "python"
    lines = [r for r in caplog.records if "Python data source serves" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
