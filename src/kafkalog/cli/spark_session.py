"""The local SparkSession the Spark commands (``job``, ``query``) run on, with the kafkalog
source registered: Spark's Python workers must run this interpreter (the one kafkalog is
installed in), times print in UTC like every other kafkalog output, and Spark's own logging
stays out of the command's; the driver's JVM maps kafkalog's class archive
(``kafkalog.spark.class_archive``: the first command's JVM dumps it when it exits)."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

from kafkalog.errors import KafkalogError

#: what to do without Java, said by every Spark command
GET_JAVA = (
    "install a Java 17 or later (e.g. apt-get install openjdk-17-jdk-headless) and put it on "
    "PATH or in JAVA_HOME"
)


def java_missing() -> str:
    """Why Spark's launcher would find no ``java``, as it looks for one (``bin/spark-class``:
    ``$JAVA_HOME/bin/java``, else ``java`` on PATH), or "" when it finds one. Why: without
    it PySpark fails with "[JAVA_GATEWAY_EXITED] Java gateway process exited before sending
    its port number", which the command reported as an internal error of kafkalog's."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            return f"JAVA_HOME={home} holds no bin/java (unset it or point it at a Java home)"
        return ""
    if shutil.which("java") is None:
        return "no java on PATH and JAVA_HOME is not set"
    return ""


def local_session(app: str, master: str = "local[2]", **conf: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import kafkalog.spark
    from kafkalog.spark.class_archive import driver_options

    command = app.replace("kafkalog-", "kafkalog ", 1)
    missing = java_missing()
    if missing:
        raise KafkalogError(
            f"{command} runs on local Spark, which needs Java: {missing}; {GET_JAVA}"
        )
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in driver_options({"spark.sql.session.timeZone": "UTC", **conf}).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as e:  # PySpark's launcher: a java too old, a JVM that cannot start
        if "JAVA_GATEWAY_EXITED" not in str(e):
            raise
        raise KafkalogError(
            f"{command}: Spark's JVM did not start ({e}); Spark's own lines above say "
            f"why (a Java older than 17 among them); {GET_JAVA}"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    kafkalog.spark.register(spark)
    return spark
