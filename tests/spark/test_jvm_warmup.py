"""The JVM source's background warm-up (``Warmup.java``, issue 34 §4), on with
``spark.kafkalog.jvm.warmup=true``: it starts at the source's first look-up without holding it
up, a query running meanwhile gets exact rows, it runs no Spark job and leaves no file behind;
by default (and with ``false``) it does not run. What it saves or costs is the bench's to show
(``bench_spark.py --first-stream``), not a test's.

Each case runs in a driver of its own: the warm-up is decided (and run) once per JVM, at its
first look-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from provenance import FIXTURES

SNAPPY = FIXTURES / "real-kafka2.8.0-zk-snappy-seanorth"
BROKER = FIXTURES / "kafka-0.9.0.1-broker"
#: where the JVM source leaves the warm-up's state (kafkalog.jvm.Warmup)
STATE_CONF = "spark.kafkalog.jvm.warmup.state"

_DRIVER = r"""
import glob, json, os, sys, time
from pyspark.sql import SparkSession
import kafkalog.spark

tmp, gate, warmup, paths = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
STATE = "spark.kafkalog.jvm.warmup.state"
builder = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.extraJavaOptions", "-Djava.io.tmpdir=" + tmp)
    .config("spark.kafkalog.jvm.warmup.gate", gate)
)
if warmup != "default":
    builder = builder.config("spark.kafkalog.jvm.warmup", warmup)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
out = {}
kafkalog.spark.register(spark)
out["after_register"] = spark.conf.get(STATE, None)


def files():
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(tmp, "kafkalog-warmup-*")))


def rows(source):
    spark.sparkContext.setJobGroup("test", "the test's own queries")
    got = []
    for path in paths:
        df = spark.read.format(source).option("path", path).load()
        cols = ["topic", "partition", "offset", "key", "value", "timestamp"]
        got += [[str(v) for v in r] for r in df.select(*cols).collect()]
    spark.sparkContext.setJobGroup("other", "")
    return sorted(got)


start = time.monotonic()
spark.read.format("kafkalog").option("path", paths[0]).load()  # the first look-up
out["load_seconds"] = time.monotonic() - start
out["after_load"] = spark.conf.get(STATE, None)
deadline = time.monotonic() + 60
while not files() and out["after_load"] == "running" and time.monotonic() < deadline:
    time.sleep(0.05)  # the warm-up writes its segment, then waits for the gate
out["files_while_held"] = files()
out["state_while_held"] = spark.conf.get(STATE, None)
out["jobs_while_held"] = list(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
out["rows_while_held"] = rows("kafkalog")
if out["after_load"] == "off":  # nothing to wait for
    out["state_at_end"], out["files_at_end"] = spark.conf.get(STATE, None), files()
    spark.stop()
    print(json.dumps(out))
    sys.exit(0)
open(gate, "w").close()
out["rows_while_running"] = rows("kafkalog")  # the warm-up's later rounds, meanwhile
deadline = time.monotonic() + 120
while spark.conf.get(STATE, None) == "running" and time.monotonic() < deadline:
    time.sleep(0.05)
out["state_at_end"] = spark.conf.get(STATE, None)
out["files_at_end"] = files()
out["jobs_outside_the_test"] = list(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
out["test_jobs"] = len(spark.sparkContext.statusTracker().getJobIdsForGroup("test"))
out["python_rows"] = rows("kafkalog_python")
spark.stop()
print(json.dumps(out))
"""


def _drive(tmp_path: Path, warmup: str) -> dict[str, Any]:
    tmp = tmp_path / "jvm-tmp"
    tmp.mkdir()
    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    paths = json.dumps([str(SNAPPY), str(BROKER)])
    done = subprocess.run(
        [sys.executable, str(script), str(tmp), str(tmp_path / "gate"), warmup, paths],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def test_the_warmup_runs_beside_the_first_query_and_leaves_nothing(tmp_path: Path) -> None:
    """``register`` starts nothing; the first look-up starts the warm-up and returns while it
    runs (here held at its gate, its segment written); queries meanwhile and right after the
    gate opens get the Python source's rows exactly; it ends ``done`` with no job of its own in
    Spark's status tracker and its file gone."""
    out = _drive(tmp_path, "true")
    assert out["after_register"] is None
    assert out["after_load"] == "running"  # load() returned while the warm-up runs
    assert out["state_while_held"] == "running"
    assert len(out["files_while_held"]) == 1  # its segment, in the JVM's temporary directory
    assert out["jobs_while_held"] == []
    assert out["rows_while_held"] == out["python_rows"]
    assert out["rows_while_running"] == out["python_rows"]
    assert len(out["python_rows"]) > 700
    assert out["state_at_end"].startswith("done "), out["state_at_end"]
    assert out["files_at_end"] == []
    assert out["jobs_outside_the_test"] == [] and out["test_jobs"] >= 4


def test_the_warmup_is_off_unless_asked_for(spark: Any) -> None:
    """Without the conf (the suite's shared session never sets it): the source's first look-up
    in this JVM left the state ``off`` and started no warm-up thread (every other Spark test of
    the suite reads as ever beside it)."""
    spark.read.format("kafkalog").option("path", str(SNAPPY)).load().limit(1).collect()
    assert spark.conf.get(STATE_CONF, None) == "off"
