"""The queries the cluster test runs on a standalone cluster and again in local mode.

Each returns plain, JSON-ready rows (bytes as hex, timestamps as epoch microseconds), sorted, so
that the cluster's answers (computed in a child process) and local mode's compare exactly.
Also run as a script: ``python cluster_queries.py MASTER LOCAL_DIR S3_URI WORK OUT.json`` starts
a SparkSession on ``MASTER`` and writes every answer, plus what the driver's monitoring API says
of the executors, to ``OUT.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

TOPIC = "v2-none"  # in kafka-4.0-snapshot-javacode: records written by Kafka's Java client
TXN_TOPIC = "v2-txn"  # the same, with committed and aborted transactions
T0 = 1700000000000
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def _plain(row: Any) -> list[Any]:
    out: list[Any] = []
    for v in row:
        if isinstance(v, bytes | bytearray):
            out.append(bytes(v).hex())
        elif hasattr(v, "timestamp"):
            out.append(round(v.timestamp() * 1_000_000))
        else:
            out.append(v)
    return out


def _rows(df: Any) -> list[list[Any]]:
    cols = ["topic", "partition", "offset", "timestamp", "key", "value"]
    return sorted(_plain(r) for r in df.select(*cols).collect())


def pushed_where(spark: Any, path: str) -> list[list[Any]]:
    """A timestamp and offset filter pushed down to the indexes."""
    spark.conf.set(PUSHDOWN, "true")
    import kafkalog.spark

    kafkalog.spark.register(spark)
    df = spark.read.format("kafkalog").option("path", path).option("subscribe", TOPIC).load()
    where = f"timestamp >= timestamp_millis({T0 + 1002}) and offset < 100"
    return _rows(df.where(where))


def read_committed(spark: Any, path: str) -> list[list[Any]]:
    df = (
        spark.read.format("kafkalog")
        .option("path", path)
        .option("subscribe", TXN_TOPIC)
        .option("isolationLevel", "read_committed")
        .load()
    )
    return _rows(df)


def stream_to_parquet(spark: Any, path: str, work: str, name: str) -> list[list[Any]]:
    """A streaming query with a checkpoint, every record available now, into Parquet."""
    out = os.path.join(work, f"{name}-out")
    query = (
        spark.readStream.format("kafkalog")
        .option("path", path)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "60")  # two micro-batches (112 records)
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", os.path.join(work, f"{name}-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return _rows(spark.read.parquet(out))


def write_and_read_back(spark: Any, path: str, work: str, name: str) -> list[list[Any]]:
    """The writer: a topic's rows written as a new topic's segments, then read back."""
    target = os.path.join(work, f"{name}-written")
    source = spark.read.format("kafkalog").option("path", path).option("subscribe", TOPIC).load()
    (
        source.select("key", "value", "timestamp", "partition")
        .write.format("kafkalog")
        .mode("append")
        .option("path", target)
        .option("topic", "copy")
        .option("numPartitions", "1")
        .save()
    )
    back = spark.read.format("kafkalog").option("path", target).load()
    return _rows(back)


def answers(spark: Any, local: str, s3: str, work: str) -> dict[str, Any]:
    return {
        "pushed where, local": pushed_where(spark, local),
        "pushed where, s3": pushed_where(spark, s3),
        "read_committed, local": read_committed(spark, local),
        "read_committed, s3": read_committed(spark, s3),
        "stream, local": stream_to_parquet(spark, local, work, "stream-local"),
        "stream, s3": stream_to_parquet(spark, s3, work, "stream-s3"),
        "write, local": write_and_read_back(spark, local, work, "write-local"),
    }


def executors(spark: Any, timeout: float = 120.0) -> list[dict[str, Any]]:
    """The executors of this application, from the driver's REST monitoring API (asked again
    while it does not answer: on a loaded machine one request timed out after 10 s)."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/allexecutors"
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                found: list[dict[str, Any]] = json.load(r)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    return [
        {"id": e["id"], "hostPort": e["hostPort"], "totalTasks": e["totalTasks"]}
        for e in found
        if e["id"] != "driver"
    ]


def wait_for_executors(spark: Any, count: int, timeout: float = 120.0) -> None:
    """Until ``count`` executors registered: the driver starts while the workers still start
    (``tests/spark_cluster.py``), and the work must be spread over every worker's executor."""
    deadline = time.monotonic() + timeout
    while len(found := executors(spark)) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{count} executors did not register in {timeout} s: {found}")
        time.sleep(0.2)


def main() -> None:
    master, local, s3, work, out = sys.argv[1:6]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import kafkalog.spark

    here = Path(__file__).resolve().parent
    python_path = os.pathsep.join([str(here.parent / "src"), str(here)])
    spark = (
        SparkSession.builder.master(master)
        .appName("kafkalog-cluster-test")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "768m")
        .config("spark.cores.max", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.port", "0")
        .config("spark.executorEnv.PYTHONPATH", python_path)
        .config("spark.pyspark.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        kafkalog.spark.register(spark)
        from kafkalog.spark.source import path_in_use

        wait_for_executors(spark, 2)
        result = answers(spark, local, s3, work)
        result["path in use"] = path_in_use(spark)  # the JVM source (issue 31)
        # a job of many small tasks: which Python worker processes ran them
        pids = (
            spark.sparkContext.parallelize(range(64), 16)
            .map(lambda _: (os.getpid(), os.getppid()))
            .distinct()
            .collect()
        )
        result["python workers"] = sorted({p for p, _ in pids})
        result["python daemons"] = sorted({parent for _, parent in pids})
        result["executors"] = executors(spark)
    finally:
        spark.stop()
    with open(out, "w") as f:
        json.dump(result, f)
    # the answers are written and the application ended (``stop`` unregistered it from the
    # master); the interpreter's own teardown after a cluster session took some 20 s of the test
    # (finalizers of Py4J objects talking to a JVM that is shutting down)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
