"""The setuptools hook that puts the kafkalog jar (the JVM Spark source) into a wheel.

Everything else is in pyproject.toml. A wheel built where PySpark and a JDK are (for example
``pip wheel --no-build-isolation .``) carries ``kafkalog/spark/jvm/kafkalog-spark-<hash>.jar``,
compiled by ``javac`` from the Java sources beside it; built elsewhere it carries the sources
only, and the jar is compiled on first use (kafkalog.spark.jar). Editable installs build nothing.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithJar(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        # jar.py alone (importing the kafkalog.spark package would need PySpark here)
        spec = importlib.util.spec_from_file_location(
            "kafkalog_jar_build", HERE / "src" / "kafkalog" / "spark" / "jar.py"
        )
        assert spec is not None and spec.loader is not None
        jar = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(jar)
        target = Path(self.build_lib) / "kafkalog" / "spark" / "jvm" / jar.jar_name()
        try:
            jar.build_jar(target)
        except (jar.JarUnavailable, ImportError) as why:
            if os.environ.get("KAFKALOG_REQUIRE_JAR") == "1":
                raise
            print(f"kafkalog: the wheel carries no jar ({why})", file=sys.stderr)


setup(cmdclass={"build_py": BuildPyWithJar})
