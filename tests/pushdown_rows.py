"""Reading rows with Spark's filter pushdown on or off: what the pushdown tests compare."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CONF = "spark.sql.python.filterPushdown.enabled"


def set_pushdown(spark: Any, enabled: bool) -> None:
    """Switch Spark's filter pushdown, and register kafkalog again: the source learns the
    setting when registered (PySpark does not tell a data source)."""
    import kafkalog.spark

    spark.conf.set(CONF, "true" if enabled else "false")
    kafkalog.spark.register(spark, pushdown=enabled)


def rows_where(spark: Any, path: Path, where: str, enabled: bool, **options: str) -> list[Any]:
    """(topic, partition, offset, timestamp) of the rows ``where`` keeps, sorted, read with
    pushdown ``enabled`` or not."""
    set_pushdown(spark, enabled)
    reader = spark.read.format("kafkalog").option("path", str(path))
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load().where(where)
    return sorted((r.topic, r.partition, r.offset, r.timestamp) for r in df.collect())
