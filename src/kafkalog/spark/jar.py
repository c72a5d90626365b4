"""The kafkalog jar (the JVM source): found, or built from the Java sources in this package.

The jar is named by a hash of its sources, so a changed source is a new jar. It is looked for in
this package (a wheel carries it, built by the setuptools hook in ``setup.py``), then in the
user's cache (``$KAFKALOG_CACHE_DIR``, else ``$XDG_CACHE_HOME/kafkalog``, else
``~/.cache/kafkalog``); when missing there, it is compiled with ``javac`` (``$KAFKALOG_JAVAC``,
else ``$JAVA_HOME/bin/javac``, else ``javac`` on the PATH) against the installed PySpark's jars,
once, into the cache: a few seconds on first use.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

JAVA_ROOT = Path(__file__).resolve().parent / "jvm"
SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"
PROVIDER = "kafkalog.jvm.KafkaLogSource"


class JarUnavailable(Exception):
    """Why there is no jar (no JDK, a failed compile): said once, the Python source serves."""


def java_sources() -> list[Path]:
    return sorted(JAVA_ROOT.rglob("*.java"))


def source_hash() -> str:
    h = hashlib.sha256()
    for path in java_sources():
        h.update(path.relative_to(JAVA_ROOT).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def jar_name() -> str:
    return f"kafkalog-spark-{source_hash()}.jar"


def cache_dir() -> Path:
    explicit = os.environ.get("KAFKALOG_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkalog"


def pyspark_jars() -> Path:
    """The jars the source compiles against: the installed PySpark's, else ``$SPARK_HOME``'s
    (a wheel built in an isolated build environment, where PySpark is not installed)."""
    try:
        import pyspark
    except ImportError:
        home = os.environ.get("SPARK_HOME")
        if home and (Path(home) / "jars").is_dir():
            return Path(home) / "jars"
        raise JarUnavailable("no PySpark to compile against (nor SPARK_HOME)") from None
    return Path(pyspark.__file__).resolve().parent / "jars"


def javac() -> str | None:
    explicit = os.environ.get("KAFKALOG_JAVAC")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def find_jar(*, build: bool = True) -> Path:
    """The jar of these sources: packaged, cached, or (``build``) compiled now into the cache;
    :class:`JarUnavailable` saying why not."""
    name = jar_name()
    for place in (JAVA_ROOT / name, cache_dir() / name):
        if place.is_file():
            return place
    if not build:
        raise JarUnavailable(f"no {name} in {JAVA_ROOT} or {cache_dir()}")
    return build_jar(cache_dir() / name)


def build_jar(target: Path) -> Path:
    """Compile the sources with javac and write the jar at ``target`` (atomically: concurrent
    builders each write their own file and the last rename wins, all of them equal)."""
    compiler = javac()
    if compiler is None:
        raise JarUnavailable("no JDK (javac) found; set JAVA_HOME to a JDK 17 or later")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kafkalog-jar-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [
            compiler,
            "-nowarn",
            "-encoding",
            "UTF-8",
            "--release",
            "17",
            "-d",
            str(classes),
            "-cp",
            str(pyspark_jars() / "*"),
            *map(str, java_sources()),
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        except OSError as problem:
            raise JarUnavailable(f"javac could not run ({problem})") from None
        if done.returncode != 0:
            raise JarUnavailable(f"javac failed: {done.stderr.strip()[-2000:]}")
        partial = Path(tempfile.mkstemp(prefix=target.name, suffix=".part", dir=target.parent)[1])
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            jar.writestr(SERVICE, PROVIDER + "\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        partial.chmod(0o644)
        os.replace(partial, target)
    return target


def main() -> int:
    """``python -m kafkalog.spark.jar``: build (or find) the jar and print its path, to put in
    a cluster's or a Spark Connect server's ``spark.jars``."""
    import sys

    try:
        print(find_jar())
    except JarUnavailable as why:
        print(f"kafkalog: no jar: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover - python -m kafkalog.spark.jar
    raise SystemExit(main())
