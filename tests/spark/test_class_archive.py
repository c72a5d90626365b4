"""The driver JVM's class archive (``kafkalog.spark.class_archive``): dumped by the first JVM of
a JDK and Spark install, mapped by the later ones, and never a reason for a JVM not to start or
to start worse (a stale archive, one from another JDK or class path, a dump cut off)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kafkalog.spark import class_archive
from kafkalog.spark.class_archive import (
    ABANDONED_AFTER,
    KEY,
    archive_path,
    driver_options,
    is_finished,
    java_executable,
    java_options,
)


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: Any) -> Path:
    monkeypatch.setenv("KAFKALOG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("KAFKALOG_CLASS_ARCHIVE", raising=False)
    return tmp_path / "cache"


def _java(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    java = java_executable()
    assert java is not None  # the Spark tests run where there is a JDK
    return subprocess.run(
        [str(java), *args], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def _options(text: str) -> list[str]:
    return text.split()


def _hello_jars(tmp_path: Path, *names: str) -> None:
    """Jars holding a class ``Hello`` that prints ``hi`` (an archive records the class path
    of the classes it holds: a JVM running only ``-version`` loads none)."""
    build = tmp_path / "hello-build"
    build.mkdir()
    (build / "Hello.java").write_text(
        'public class Hello { public static void main(String[] a) { System.out.println("hi"); } }'
    )
    java = java_executable()
    assert java is not None
    subprocess.run(
        [str(java.parent / "javac"), "-d", str(build), str(build / "Hello.java")], check=True
    )
    for name in names:
        with zipfile.ZipFile(tmp_path / name, "w") as jar:
            jar.write(build / "Hello.class", "Hello.class")


def test_first_jvm_dumps_later_ones_map_it(cache: Path) -> None:
    """No archive: the JVM is told to dump one at exit, at the key's path; once a JVM has
    dumped it, the next is told to map it, and that JVM maps it (the JVM says which archive
    it maps when asked: ``-Xlog:cds``), with nothing of the CDS logging in its output."""
    path = archive_path()
    assert path is not None and path.parent.parent == cache
    first = java_options()
    assert first == f"-XX:ArchiveClassesAtExit={path} -Xlog:cds*=off"
    dump = _java(*_options(first), "-version")
    assert dump.returncode == 0, dump.stderr
    assert is_finished(path)
    second = java_options()
    assert second == f"-XX:SharedArchiveFile={path} -Xlog:cds*=off"
    quiet = _java(*_options(second), "-version")
    assert quiet.returncode == 0 and "cds" not in quiet.stdout + quiet.stderr
    told = _java(f"-XX:SharedArchiveFile={path}", "-Xlog:cds=info", "-version")
    assert f"Opened archive {path}" in told.stdout or str(path) in told.stdout, told.stdout


def test_a_stale_archive_starts_the_jvm_with_the_jdks_own(cache: Path, tmp_path: Path) -> None:
    """An archive of another class path (what a changed Spark install leaves): the JVM
    refuses it, starts, keeps the JDK's own archive (``sharing``) and its refusal stays out of
    the output."""
    path = archive_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    _hello_jars(tmp_path, "a.jar", "b.jar")
    dumped = _java(f"-XX:ArchiveClassesAtExit={path}", "-cp", str(tmp_path / "a.jar"), "Hello")
    assert dumped.returncode == 0 and is_finished(path), dumped.stderr
    options = java_options()
    assert "SharedArchiveFile" in options
    run = _java(*_options(options), "-cp", str(tmp_path / "b.jar"), "Hello")
    assert run.returncode == 0 and run.stdout == "hi\n", run.stdout
    version = _java(*_options(options), "-cp", str(tmp_path / "b.jar"), "-version")
    assert "sharing" in version.stderr and "Unable to use shared archive" not in version.stdout
    loud = _java(f"-XX:SharedArchiveFile={path}", "-cp", str(tmp_path / "b.jar"), "Hello")
    assert "Unable to use shared archive" in loud.stdout  # what QUIET keeps out


def test_a_dump_cut_off_is_never_passed(cache: Path) -> None:
    """A file without the archive's header (the JVM writes it last): passing it would make
    the JVM drop the JDK's own archive too (no ``sharing``), so it is never passed; while a
    JVM may still be writing it, nothing is; once abandoned, it is dumped again."""
    path = archive_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(1 << 16))
    assert not is_finished(path)
    assert java_options() == ""  # a JVM may be dumping it now
    worse = _java(f"-XX:SharedArchiveFile={path}", "-version")
    assert worse.returncode == 0 and "sharing" not in worse.stderr  # why it is never passed
    later = time.time() + ABANDONED_AFTER + 1
    assert java_options(now=later).startswith("-XX:ArchiveClassesAtExit=")
    assert not path.exists()


def test_other_keys_archives_go_when_a_new_one_is_dumped(cache: Path) -> None:
    path = archive_path()
    assert path is not None
    path.parent.mkdir(parents=True)
    old = path.parent / "driver-0000000000000000.jsa"
    old.write_bytes(class_archive.MAGIC + bytes(16))
    keep = path.parent / "notes.txt"
    keep.write_text("not ours to remove")
    assert "ArchiveClassesAtExit" in java_options()
    assert not old.exists() and keep.exists()


def test_the_key_follows_the_jdk_and_the_spark_jars(cache: Path, monkeypatch: Any) -> None:
    """Another ``java`` or another set of Spark jars is another archive; no JDK, no options."""
    path = archive_path()
    java = java_executable()
    assert path is not None and java is not None
    monkeypatch.setenv("JAVA_HOME", str(java.parent.parent))
    assert archive_path() == path
    fake = cache.parent / "jdk"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "java").write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(fake))
    other = archive_path()
    assert other is not None and other != path
    monkeypatch.setenv("JAVA_HOME", str(cache.parent / "nowhere"))
    assert archive_path() is None and java_options() == ""


def test_off_and_the_users_own_options(cache: Path, monkeypatch: Any) -> None:
    mine = {KEY: "-Dmine=1", "spark.ui.enabled": "false"}
    merged = driver_options(mine)
    assert merged[KEY].startswith("-Dmine=1 -XX:ArchiveClassesAtExit=")
    assert merged["spark.ui.enabled"] == "false" and mine[KEY] == "-Dmine=1"
    monkeypatch.setenv("KAFKALOG_CLASS_ARCHIVE", "0")
    assert driver_options(mine) == mine and java_options() == ""


SESSION = """
import sys
from pyspark.sql import SparkSession
from kafkalog.spark.class_archive import KEY, driver_options
builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
log = {KEY: f"-Xlog:class+load=info:file={sys.argv[1]}"} if len(sys.argv) > 1 else {}
for key, value in driver_options(log).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
print("ROWS", spark.range(5).count())
spark.stop()
"""


def test_a_spark_session_dumps_then_maps_it(cache: Path) -> None:
    """Through PySpark: the first session's JVM dumps the archive after the program ended;
    the second session answers with Spark's classes from it (the JVM's class-load log names
    the archive each class came from), its output free of CDS lines."""
    path = archive_path()
    assert path is not None
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    first = subprocess.run(
        [sys.executable, "-c", SESSION], capture_output=True, text=True, env=env, timeout=600
    )
    assert first.returncode == 0 and "ROWS 5" in first.stdout, first.stderr[-2000:]
    deadline = time.time() + 300
    while not is_finished(path) and time.time() < deadline:
        time.sleep(0.5)
    assert is_finished(path)
    assert "SharedArchiveFile" in java_options()
    loads = cache.parent / "class-load.log"
    second = subprocess.run(
        [sys.executable, "-c", SESSION, str(loads)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert second.returncode == 0 and second.stdout.split() == ["ROWS", "5"], second.stdout
    spark_classes = [
        line for line in loads.read_text().splitlines() if " org.apache.spark." in line
    ]
    mapped = [line for line in spark_classes if "shared objects file (top)" in line]
    # the rest: classes Spark generates or defines at run time (lambdas, proxies), never archived
    assert len(mapped) > 0.5 * len(spark_classes) > 1000, (len(mapped), len(spark_classes))


def test_no_dump_where_a_class_path_directory_holds_files(
    cache: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    """A dumping JVM with a non-empty directory on its class path fails its dump at exit, with
    an error in the program's output (shown here); Spark's launcher puts its conf dir (and
    Hadoop's, YARN's) there: with files in one, or the user's own driver class path, nothing is
    dumped (a finished archive is still mapped)."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.ui.enabled false\n")
    _hello_jars(tmp_path, "hello.jar")
    cp = f"{conf}:{tmp_path / 'hello.jar'}"
    refused = _java(f"-XX:ArchiveClassesAtExit={tmp_path / 'x.jsa'}", "-cp", cp, "Hello")
    assert "non-empty directory" in refused.stdout + refused.stderr
    assert not is_finished(tmp_path / "x.jsa")
    assert java_options().startswith("-XX:ArchiveClassesAtExit=")
    assert java_options({"spark.driver.extraClassPath": "/x.jar"}) == ""
    for variable in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        monkeypatch.setenv(variable, str(conf))
        assert java_options() == "", variable
        monkeypatch.delenv(variable)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "absent"))
    assert java_options().startswith("-XX:ArchiveClassesAtExit=")
    path = archive_path()
    assert path is not None
    path.write_bytes(class_archive.MAGIC + bytes(16))
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    assert java_options() == f"-XX:SharedArchiveFile={path} -Xlog:cds*=off"
