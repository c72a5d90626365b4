"""What each Python worker of a query imports (issue 26 §6): every call Spark makes into the
source runs in a worker that starts by importing the source's module, so ``load()`` (the schema)
must not pay for the log layer or numba, and planning must not pay for numba (its import and
first kernel cost a process more than a second: bench/RESULTS.md, time to the first answer).

Each case runs in a fresh interpreter, as a worker does."""

from __future__ import annotations

import json
import subprocess
import sys

from provenance import FIXTURES

JAVA = FIXTURES / "kafka-4.0-snapshot-javacode"

_PROBE = """
import json, sys
from pyspark.sql.types import LongType, StructField, StructType
from kafkalog.spark.source import KafkaLogPushdownSource
source = KafkaLogPushdownSource({"path": %(path)r, "subscribe": "v2-none"})
schema = source.schema()
after = {"schema": sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "kafkalog"))}
if %(plan)r:
    reader = source.reader(StructType([StructField("offset", LongType())]))
    after["tasks"] = len(reader.partitions())
    after["planned"] = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "kafkalog"))
    if %(read)r:
        rows = sum(b.num_rows for p in reader.partitions() for b in reader.read(p))
        after["rows"] = rows
        after["read"] = sorted(m for m in sys.modules if m.split(".")[0] in ("numba", "kafkalog"))
print(json.dumps(after))
"""


def _modules(plan: bool = False, read: bool = False) -> dict[str, object]:
    code = _PROBE % {"path": str(JAVA), "plan": plan, "read": read}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_schema_worker_imports_neither_the_log_nor_numba() -> None:
    loaded = _modules()["schema"]
    assert isinstance(loaded, list)
    assert "kafkalog.spark.options" in loaded  # the probe does see kafkalog's modules
    # load() lists the path's partitions (issue 34 §3): file names only, through the log
    # package's one light module (the package itself loads its names on first use)
    assert "kafkalog.log.layout" in loaded
    light = {"kafkalog.log", "kafkalog.log.layout"}
    heavy = ("numba", "kafkalog.log", "kafkalog.records")
    assert not [m for m in loaded if m.startswith(heavy) and m not in light]


def test_planning_does_not_load_numba_and_the_read_does() -> None:
    seen = _modules(plan=True, read=True)
    planned, read = seen["planned"], seen["read"]
    assert isinstance(planned, list) and isinstance(read, list)
    assert seen["tasks"] == 1 and seen["rows"] == 112
    assert "kafkalog.spark.plan" in planned and "kafkalog.log" in planned
    assert not [m for m in planned if m.startswith("numba")]
    assert "kafkalog.records.columnar" not in planned
    # the probe can tell: the task's decoder is numba's
    assert "numba" in read and "kafkalog.records.columnar" in read
