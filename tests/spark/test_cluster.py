"""kafkalog on a real Spark cluster, not only in one local process (issue 12, section 4).

A standalone cluster on loopback (one master, two workers of one core each, started with the
wheel's ``bin/spark-class``: see ``tests/spark_cluster.py``) runs, in a driver process of its own,
batch reads with pushdown and with ``read_committed``, a streaming query with a checkpoint and
the writer, over a local data directory and over the same directory in an S3 bucket on loopback
(``tests/s3store.py``). Its answers must equal local mode's for the same queries (the shared
session of the suite), and the work must have run in two executors, each with its own JVM and
its own Python workers. Skipped only where no JVM can start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import cluster_queries
from provenance import FIXTURES
from pushdown_rows import set_pushdown
from spark_cluster import java_available, standalone_cluster

JAVA = "kafka-4.0-snapshot-javacode"

pytestmark = pytest.mark.skipif(not java_available(), reason="no JVM on this machine")


def test_standalone_cluster_gives_local_modes_answers(
    spark: Any, s3_store: Any, tmp_path: Path
) -> None:
    local_dir = str(FIXTURES / JAVA)
    s3_uri = s3_store.uri(JAVA)
    work = tmp_path / "work"
    work.mkdir()
    out = tmp_path / "cluster.json"
    began = time.monotonic()
    local_work = tmp_path / "local-work"
    local_work.mkdir()
    driver_log = tmp_path / "driver.log"  # a file, not a pipe: nothing reads it while it runs
    # the driver starts as soon as the master is ALIVE, while the workers' JVMs start beside its own
    with (
        standalone_cluster(tmp_path / "cluster", wait_for_workers=False) as cluster,
        open(driver_log, "w") as log,
    ):
        driver = subprocess.Popen(
            [
                sys.executable,
                str(Path(cluster_queries.__file__)),
                cluster.url,
                local_dir,
                s3_uri,
                str(work),
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        )
        try:
            # local mode's answers meanwhile (both sides mostly wait on their JVMs)
            try:
                expected = cluster_queries.answers(spark, local_dir, s3_uri, str(local_work))
            finally:
                set_pushdown(spark, False)  # as the other tests expect the shared session
            cluster.wait_for_workers()  # (the driver waits for their executors itself)
            driver.wait(timeout=400)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        assert driver.returncode == 0, driver_log.read_text()[-4000:] + cluster.log_tail()
        # the driver ends right after stop() unregistered the application: the master may list
        # it as completed a moment later
        deadline = time.monotonic() + 30
        while True:
            apps = cluster.state().get("completedapps", [])
            if any(a["name"] == "kafkalog-cluster-test" for a in apps):
                break
            assert time.monotonic() < deadline, apps
            time.sleep(0.2)
    print(f"\ncluster run: {time.monotonic() - began:.1f} s")
    got = json.loads(out.read_text())

    # the work ran on both workers: two executors, each with tasks, and Python workers forked
    # by two different daemons (one per executor JVM)
    assert got["path in use"] == "jvm"  # batch reads and the stream ran in the JVM source
    executors = got["executors"]
    assert len(executors) == 2, executors
    assert all(e["totalTasks"] > 0 for e in executors), executors
    assert len(got["python workers"]) >= 2
    assert len(got["python daemons"]) >= 2, got["python daemons"]

    for name, rows in expected.items():
        assert rows, f"{name}: local mode found nothing, the comparison would prove nothing"
        assert got[name] == rows, f"{name}: the cluster's rows differ from local mode's"
    # and the queries are the ones meant: pushdown kept the filter, read_committed dropped rows
    assert expected["pushed where, local"] == expected["pushed where, s3"]
    committed_offsets = {r[2] for r in expected["read_committed, local"]}
    uncommitted = spark.read.format("kafkalog").option("path", local_dir)
    everything = uncommitted.option("subscribe", cluster_queries.TXN_TOPIC).load().count()
    assert len(committed_offsets) < everything
    assert len(expected["write, local"]) == len(expected["stream, local"])
