"""Putting the JVM source (``kafkalog.jvm.KafkaLogSource``) in front of a session's
``format("kafkalog")``, or saying once why the Python source serves.

Spark 4 looks a short name up among the JVM's ``DataSourceRegister`` services first, on the
calling thread's context class loader, and only then among Python data sources; it refuses to
register a Python source under a name a JVM service already has. So: the Python source is
registered first (as ``kafkalog``, for threads and sessions without the jar, and always as
``kafkalog_python``, where the JVM source hands writes), then ``ADD JAR`` puts the jar on the
session's class loader, which Spark installs on the calling thread and ships to the executors.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import kafkalog
from kafkalog.spark.jar import JarUnavailable, find_jar

logger = logging.getLogger("kafkalog.spark")

#: the confs the JVM source starts its planner with (Bridge.java)
PYTHON_CONF = "spark.kafkalog.python"
PYTHONPATH_CONF = "spark.kafkalog.pythonpath"
#: set to "python" in a session (or KAFKALOG_JVM=0 in the environment): no JVM path
PATH_CONF = "spark.kafkalog.path"

_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        logger.info(message)


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (its classes live in ``pyspark.sql.connect``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def use_jvm(spark: Any) -> str:
    """Add the jar to ``spark`` (building it on first use): ``"jvm"`` when batch reads and
    streams of ``format("kafkalog")`` now run in the JVM on this thread, else ``"python"``."""
    if os.environ.get("KAFKALOG_JVM", "1") == "0" or spark.conf.get(PATH_CONF, "jvm") == "python":
        return "python"
    if is_connect(spark):
        _say_once(
            "kafkalog: a Spark Connect session: format('kafkalog') reads through the Python "
            "source; for the JVM path put kafkalog's jar (python -m kafkalog.spark.jar) in the "
            "server's spark.jars"
        )
        return "python"
    try:
        jar = find_jar()
    except JarUnavailable as why:
        _say_once(
            f"kafkalog: the Python data source serves format('kafkalog') ({why}); for the "
            "faster JVM path install a JDK 17+ (javac) and call kafkalog.spark.register again"
        )
        return "python"
    spark.conf.set(PYTHON_CONF, sys.executable)
    spark.conf.set(PYTHONPATH_CONF, os.path.dirname(os.path.dirname(kafkalog.__file__)))
    spark.sql(f"ADD JAR '{jar}'")
    return "jvm"
