"""A class archive for the Spark driver's JVM (Java's Class Data Sharing, JDK 17): the classes
a session loads, kept parsed and verified in a file the next JVM maps instead of loading them.

Why: a fresh process's first answers are mostly the JVM loading classes (Spark's planner and
code generator, streaming, Parquet's; ~1,100 on a stream's first micro-batch alone): issue 34's
"a stream's first micro-batch no slower than a later one plus 1 s". With the archive those
loads are a memory map; ``bench/first_stream.py`` measures it (``JVM, class archive``).

How a user gets it: :func:`driver_options` returns the builder conf
(``spark.driver.extraJavaOptions``) for a session about to start its JVM; the CLI's sessions
(``kafkalog job``, ``kafkalog query``) use it. The first session of a JDK and Spark install
dumps the archive when its JVM exits (``-XX:ArchiveClassesAtExit``, after the user's program
ended); every later one maps it (``-XX:SharedArchiveFile``). The archive lives in kafkalog's
cache dir (:func:`kafkalog.spark.jar.cache_dir`), one per key of the ``java`` PySpark starts
and the Spark jars it runs; other keys' archives are removed when a new one is dumped.

A stale archive cannot stop a JVM: the JVM checks the archive against itself and its class path
and, when they differ, runs without it (``-Xshare:auto``, the default), its own warning silenced
here. What the JVM does not forgive is a file that is no archive at all (a dump cut off: the
JVM writes the header, with its magic number, last): it then runs without even the JDK's own
archive, so such a file is never passed; it is dumped again once no JVM can still be writing it.
``KAFKALOG_CLASS_ARCHIVE=0`` turns all of it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from kafkalog.spark.jar import JarUnavailable, cache_dir, pyspark_jars

#: the conf the options go in (PySpark hands builder conf to ``spark-submit``: the JVM's start)
KEY = "spark.driver.extraJavaOptions"
#: the first 4 bytes of a finished dynamic archive, little-endian (HotSpot's
#: ``CDS_DYNAMIC_ARCHIVE_MAGIC``; the header is written after every region)
MAGIC = (0xF00BABA8).to_bytes(4, "little")
#: a file without the magic this old is a dump that died (a dump takes seconds)
ABANDONED_AFTER = 600.0
#: the JVM's warning when it refuses a stale archive would land in the user's output
QUIET = "-Xlog:cds*=off"


def java_executable() -> Path | None:
    """The ``java`` Spark's launcher runs (``$JAVA_HOME/bin/java``, else ``java`` on the PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).is_file():
        return None
    return Path(found).resolve()


def spark_home() -> Path | None:
    """The Spark PySpark's launcher runs: ``$SPARK_HOME``, else the installed PySpark's."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home)
    try:
        return pyspark_jars().parent
    except JarUnavailable:
        return None


def dump_would_start(conf: Mapping[str, str]) -> bool:
    """A JVM told to dump an archive refuses to start when a directory on its class path holds
    files (HotSpot: "Cannot have non-empty directory in paths"): dump only where the launcher's
    directories (Spark's conf dir, Hadoop's and YARN's) are absent or empty and nothing else
    joins the driver's class path. Mapping an archive never stops a JVM: it only dumps."""
    home = spark_home()
    if home is None or os.environ.get("SPARK_DIST_CLASSPATH") or os.environ.get("SPARK_CLASSPATH"):
        return False
    if any(key.startswith("spark.driver.extraClassPath") for key in conf):
        return False
    dirs = [os.environ.get("SPARK_CONF_DIR") or str(home / "conf")]
    dirs += [os.environ[k] for k in ("HADOOP_CONF_DIR", "YARN_CONF_DIR") if os.environ.get(k)]
    for d in dirs:
        try:
            if any(Path(d).iterdir()):
                return False
        except NotADirectoryError:
            return False
        except OSError:
            continue  # absent: not on the class path's list of files
    return True


def archive_path() -> Path | None:
    """Where the archive of this JDK and these Spark jars lives; ``None`` without a JDK."""
    java = java_executable()
    home = spark_home()
    if java is None or home is None or not (home / "jars").is_dir():
        return None
    jars = home / "jars"
    h = hashlib.sha256()
    for path in [java, *_jvm_libraries(java)]:
        stat = path.stat()
        h.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    h.update(f"{jars}\0".encode())
    for name in sorted(os.listdir(jars)):
        h.update(f"{name}\0{(jars / name).stat().st_size}\0".encode())
    return cache_dir() / "class-archive" / f"driver-{h.hexdigest()[:16]}.jsa"


def _jvm_libraries(java: Path) -> list[Path]:
    """The JVM itself (``lib/server/libjvm.so``): a JDK updated in place keeps its ``java``."""
    home = java.parent.parent
    return [p for p in (home / "lib" / "server" / "libjvm.so",) if p.is_file()]


def is_finished(path: Path) -> bool:
    """``path`` holds a whole archive (its header, written last, is there)."""
    try:
        with path.open("rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def java_options(conf: Mapping[str, str] | None = None, now: float | None = None) -> str:
    """The JVM options for the next driver (its builder ``conf``): map the archive, dump it
    at exit, or nothing (off, no JDK, a class path a dump cannot start with, or another JVM is
    dumping it now)."""
    if os.environ.get("KAFKALOG_CLASS_ARCHIVE", "1") == "0":
        return ""
    path = archive_path()
    if path is None:
        return ""
    if is_finished(path):
        return f"-XX:SharedArchiveFile={path} {QUIET}"
    if path.exists():
        age = (time.time() if now is None else now) - path.stat().st_mtime
        if age < ABANDONED_AFTER:
            return ""
        path.unlink(missing_ok=True)
    if not dump_would_start(conf or {}):
        return ""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return ""
    if not os.access(path.parent, os.W_OK):
        return ""
    for old in path.parent.glob("driver-*.jsa"):
        if old != path:
            old.unlink(missing_ok=True)
    return f"-XX:ArchiveClassesAtExit={path} {QUIET}"


def driver_options(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """``conf`` (builder options) with the class archive's JVM options added to the driver's
    (after any the user gave). Only a session that starts a JVM uses them: call it before
    ``getOrCreate()`` of the process's first session.

    ```python
    # needs: kafkalog[spark]
    from pyspark.sql import SparkSession

    from kafkalog.spark.class_archive import driver_options

    builder = SparkSession.builder.master("local[2]")
    for key, value in driver_options({"spark.ui.enabled": "false"}).items():
        builder = builder.config(key, value)
    ```
    """
    out = dict(conf or {})
    options = java_options(out)
    if options:
        out[KEY] = f"{out[KEY]} {options}" if out.get(KEY) else options
    return out
