"""The local SparkSession the Spark commands (``job``, ``query``) run on, with the kafkalog
source registered: Spark's Python workers must run this interpreter (the one kafkalog is
installed in), times print in UTC like every other kafkalog output, and Spark's own logging
stays out of the command's; the driver's JVM maps kafkalog's class archive
(``kafkalog.spark.class_archive``: the first command's JVM dumps it when it exits)."""

from __future__ import annotations

import os
import sys
from typing import Any


def local_session(app: str, master: str = "local[2]", **conf: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafkalog.spark
    from kafkalog.spark.class_archive import driver_options

    builder = SparkSession.builder.master(master).appName(app)
    for key, value in driver_options({"spark.sql.session.timeZone": "UTC", **conf}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(spark)
    return spark
