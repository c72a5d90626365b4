"""The Python half of the JVM source: its planner, and its reader of last resort.

The JVM source (``kafkalog-spark.jar``, Java sources in ``kafkalog/spark/jvm/``) decodes record
batches in Spark's executors, but it plans nothing itself: which partitions, offsets, segments
and byte ranges a query reads, where ``read_committed`` stops and which transactions were
aborted are the answers of this package's planner (:func:`kafkalog.spark.plan.plan_read`, the
option parser, the pushdown bounds, the stream reader), asked by the driver JVM through one
persistent subprocess per driver that runs :func:`serve`: one JSON request per line on stdin, one
JSON answer per line on stdout. So both sources refuse the same options with the same messages
and read the same rows.

A task that meets anything the Java decoder does not take as a plain, whole, valid batch (a bad
CRC, a length past the split, offsets out of order, a codec error, a segment cut or swapped since
planning, a remote URI) hands the rest of its split to :func:`read_one`, in one of the few
long-lived ``python -m kafkalog.spark.jvm_bridge reader`` processes each executor JVM keeps
(:func:`serve_reads`, one split after another): the Python reader reads it and streams Arrow IPC
back. Damage errors naming file and byte, and ``failOnDataLoss=false``'s skips and warnings, are
then the Python source's own.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

from kafkalog.errors import KafkalogError

#: the short name the Python source is registered under as well, for the JVM source to hand
#: writes to (and for anyone to read through Python on purpose)
PYTHON_NAME = "kafkalog_python"

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: how this module's processes write their log lines (on stderr, or in a reader's trailer)
_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


class _Collect(logging.Handler):
    """The planner's log records of one request, handed to the JVM to log as its own."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[list[str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append([record.levelname, record.getMessage()])


def _filter(spec: dict[str, Any]) -> Any:
    """A filter as PySpark hands one to a Python source, from the JVM's JSON of Spark's."""
    from pyspark.sql import datasource as ds

    def value(v: Any) -> Any:
        if isinstance(v, dict) and "micros" in v:
            return _EPOCH + dt.timedelta(microseconds=int(v["micros"]))
        return v

    kind = getattr(ds, spec["op"])
    attribute = (spec["attribute"],)
    if spec["op"] == "In":
        return kind(attribute, tuple(value(v) for v in spec["value"]))
    return kind(attribute, value(spec["value"]))


def _split_json(split: Any) -> dict[str, Any]:
    # the fields one level deep (dataclasses.asdict copies recursively: a tenth of a plan's time)
    out = {f.name: getattr(split, f.name) for f in dataclasses.fields(split)}
    out["identity"] = None if split.identity is None else list(split.identity)
    return out


def _tasks_json(parts: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "splits": [_split_json(s) for s in p.splits],
            "aborted": {d: [list(a) for a in r] for d, r in p.aborted.items()},
            "location": p.location,
            "failOnDataLoss": p.fail_on_data_loss,
        }
        for p in parts
    ]


class Planner:
    """What the driver JVM asks, answered with kafkalog's own planner."""

    def __init__(self) -> None:
        from kafkalog.spark.plan_memo import PartitionMemo

        self.streams: dict[str, Any] = {}
        #: partitions' plans kept while their files stay as they were (the request's ``memo``)
        self.memo = PartitionMemo()

    def schema(self, req: dict[str, Any]) -> dict[str, Any]:
        from kafkalog.spark.columns import full_schema
        from kafkalog.spark.options import parse_read_options
        from kafkalog.spark.selection import check_at_load

        opts = parse_read_options(req["options"], streaming=None)
        check_at_load(opts)  # the directory checked at load(), as the Python source's schema()
        return {
            "ddl": full_schema(opts.include_headers, opts.columns),
            "includeHeaders": opts.include_headers,
        }

    def columns(self, req: dict[str, Any]) -> dict[str, Any]:
        """A schema the user gave, checked as the Python source checks it."""
        from pyspark.sql.types import StructType

        from kafkalog.spark.columns import choose_columns
        from kafkalog.spark.options import parse_read_options

        opts = parse_read_options(req["options"], streaming=None)
        chosen = choose_columns(
            StructType.fromJson(json.loads(req["schema"])), opts.include_headers
        )
        return {"fields": [list(f) for f in chosen.fields]}

    def plan(self, req: dict[str, Any]) -> dict[str, Any]:
        from kafkalog.spark.partitions import pack
        from kafkalog.spark.plan import plan_read
        from kafkalog.spark.pushdown import bounds_from_filters

        opts = parse(req["options"], streaming=False)
        bounds = None
        if opts.pushdown and req.get("filters"):
            bounds = bounds_from_filters([_filter(f) for f in req["filters"]])
        memo = self.memo if req.get("memo", False) else None
        splits, aborted = plan_read(opts, bounds, memo, int(req.get("settleMs", 2000)))
        out: dict[str, Any] = {
            "tasks": _tasks_json(pack(splits, opts, aborted)),
            "includeHeaders": opts.include_headers,
            "statsDir": opts.stats_dir,
        }
        if bounds is not None:
            out["bounds"] = {
                "offsetLo": bounds.offset_lo,
                "offsetHi": bounds.offset_hi,
                "tsLo": bounds.ts_lo,
                "tsHi": bounds.ts_hi,
            }
        return out

    def stream_open(self, req: dict[str, Any]) -> dict[str, Any]:
        from kafkalog.spark.stream import KafkaLogStreamReader

        opts = parse(req["options"], streaming=True)
        reader = KafkaLogStreamReader(opts)
        if req.get("target") is not None:  # opened again on a new planner: AvailableNow's target
            reader.target = {(str(t), int(p)): int(last) for t, p, last in req["target"]}
        self.streams[req["id"]] = reader
        limit = opts.max_offsets_per_trigger
        return {"maxRows": limit, "includeHeaders": opts.include_headers}

    def stream(self, req: dict[str, Any]) -> dict[str, Any]:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        reader = self.streams.get(req["id"])
        method = req["method"]
        if reader is None:
            # not opened on this planner (the one it was opened on ended): the JVM opens it
            # here again and asks once more
            return {} if method == "stop" else {"unknownStream": True}
        if method == "ping":  # opened (stream_open answered the read limit)
            return {}
        if method == "initialOffset":
            return {"offset": reader.initialOffset()}
        if method == "prepareForTriggerAvailableNow":
            reader.prepareForTriggerAvailableNow()
            fixed = reader.target or {}
            return {"target": [[t, p, last] for (t, p), last in sorted(fixed.items())]}
        if method == "latestOffset":
            rows = req.get("maxRows")
            limit = ReadAllAvailable() if rows is None else ReadMaxRows(int(rows))
            return {"offset": reader.latestOffset(req["start"], limit)}
        if method == "partitions":
            parts = reader.partitions(req["start"], req["end"])
            return {
                "tasks": _tasks_json(list(parts)),
                "includeHeaders": reader.opts.include_headers,
            }
        if method == "stop":
            self.streams.pop(req["id"], None)
            return {}
        raise ValueError(f"unknown stream call {method!r}")

    def ping(self, req: dict[str, Any]) -> dict[str, Any]:
        return {}

    def answer(self, req: dict[str, Any]) -> dict[str, Any]:
        collect = _Collect()
        logger = logging.getLogger("kafkalog")
        logger.addHandler(collect)
        try:
            handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
                "schema": self.schema,
                "columns": self.columns,
                "plan": self.plan,
                "stream_open": self.stream_open,
                "stream": self.stream,
                "ping": self.ping,
            }
            out = handlers[req["op"]](req)
        except KafkalogError as problem:
            # the line a Python source's user reads last: "kafkalog.spark.options.OptionError: ..."
            kind = type(problem)
            said = f"{kind.__module__}.{kind.__qualname__}: {problem}"
            # an option or selection the user got wrong (OptionError and its subclasses, such
            # as an unknown topic) is the JVM's IllegalArgumentException, which PySpark shows
            # as its own exception; anything else is a kafkalog error (damage, data loss)
            from kafkalog.spark.options import OptionError

            user_error = isinstance(problem, OptionError)
            out = {"error": said, "kind": "OptionError" if user_error else kind.__name__}
        except Exception as problem:  # every failure goes back to the JVM, said
            out = {"error": f"{type(problem).__name__}: {problem}", "kind": "internal"}
        finally:
            logger.removeHandler(collect)
        out["log"] = collect.lines
        return out


def parse(options: dict[str, str], *, streaming: bool) -> Any:
    from kafkalog.spark.options import parse_read_options

    return parse_read_options(options, streaming=streaming)


def serve(stdin: IO[str], stdout: IO[str], *, warm: bool = True) -> None:
    """Answer the driver JVM's requests until it closes stdin; while none is waiting, import
    what the next answers need (:data:`WARM_UP`), so a new driver's first query finds them
    loaded."""
    logging.getLogger("kafkalog").setLevel(logging.INFO)
    planner = Planner()
    _trace("planner_serving")
    pending = _PENDING if warm else []
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (tests)
        lines: Iterator[str | bytes] = iter(stdin)
    else:
        lines = _requests(fd, pending)
    for line in lines:
        if not line.strip():
            continue
        req = json.loads(line)
        op = str(req.get("op")) + (f".{req['method']}" if "method" in req else "")
        _trace(f"req:{op}")
        stdout.write(json.dumps(planner.answer(req)) + "\n")
        stdout.flush()
        _trace(f"ans:{op}")


#: the modules the planner's answers import (the options and columns at ``load()``, the
#: planner's at the first action, the stream reader's), in that order: :func:`serve` imports
#: them while it waits (~0.2 s of a new process's first plan otherwise), never numba
WARM_UP = (
    "kafkalog.spark.options",
    "kafkalog.spark.columns",
    "kafkalog.spark.selection",
    "kafkalog.spark.pushdown",
    "kafkalog.spark.plan",
    "kafkalog.spark.partitions",
    "kafkalog.spark.stream",
    "pyspark.sql.streaming.datasource",
)
#: what this process has not warmed up yet
_PENDING = list(WARM_UP)


def _warm(fd: int, pending: list[str]) -> None:
    """Import the next of ``pending`` until ``fd`` is readable or nothing is left (a module
    that fails to import is left for the request that needs it to report)."""
    import importlib
    import select

    while pending and not select.select([fd], [], [], 0)[0]:
        try:
            importlib.import_module(pending.pop(0))
        except Exception:
            continue  # the request that needs it says why
        finally:
            if not pending:
                _trace("planner_warm")


def _requests(fd: int, pending: list[str]) -> Iterator[bytes]:
    """The request lines read from ``fd``, warming ``pending`` up while none is waiting."""
    import os

    buffer = b""
    while True:
        while b"\n" not in buffer:
            _warm(fd, pending)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                if buffer.strip():
                    yield buffer
                return
            buffer += chunk
        line, buffer = buffer.split(b"\n", 1)
        yield line


def listen(server_fd: int) -> None:
    """``python -m kafkalog.spark.jvm_bridge serve --listen-fd N``: the planner
    :func:`kafkalog.spark.jvm_path.start_planner` starts at ``register()``, before the JVM asks
    anything. It answers the driver JVM on connections to the listening Unix socket ``N`` (one
    at a time, each as :func:`serve` answers its stdin), warming its imports up meanwhile, and
    ends when the process that started it closes its stdin (or ends)."""
    import contextlib
    import os
    import socket
    import threading

    server = socket.socket(fileno=server_fd)

    def watch_parent() -> None:
        sys.stdin.buffer.read()  # returns at EOF: the Python driver closed it or ended
        # its socket and private directory go too (a driver ended without its atexit hooks)
        path = str(server.getsockname())
        directory = os.path.dirname(path)
        with contextlib.suppress(OSError):
            os.unlink(path)
            if os.path.basename(directory).startswith("kafkalog-planner-"):
                os.rmdir(directory)
        os._exit(0)

    threading.Thread(target=watch_parent, name="kafkalog-planner-parent", daemon=True).start()
    while True:
        _warm(server.fileno(), _PENDING)
        conn, _ = server.accept()
        # a JVM gone away (a reset connection): the next session's JVM may connect again
        with (
            conn,
            conn.makefile("r", encoding="utf-8") as rd,
            conn.makefile("w") as wr,
            contextlib.suppress(BrokenPipeError, ConnectionResetError),
        ):
            serve(rd, wr)


#: a file the planner appends ``event wall-clock-time`` lines to (its serve loop's start, each
#: request in and answer out): bench/bench_spark.py ``--first-query`` reads the phases from it
TRACE_ENV = "KAFKALOG_PLANNER_TRACE"
_TRACE = None


def _trace(event: str) -> None:
    global _TRACE
    if _TRACE is None:
        import os

        _TRACE = os.environ.get(TRACE_ENV, "")
    if _TRACE:
        import time

        with open(_TRACE, "a") as out:
            out.write(f"{event} {time.time()!r}\n")


def _rest_batches(req: dict[str, Any]) -> Iterator[Any]:
    """The rows of the split in ``req`` from its byte ``start`` and offset ``after`` on, read by
    the Python source's task reader, in Spark's columns (all of them: the JVM picks)."""
    from kafkalog import files
    from kafkalog.spark.plan import Split
    from kafkalog.spark.task import read_split

    raw = dict(req["split"])
    raw["identity"] = None if raw["identity"] is None else tuple(raw["identity"])
    split = Split(**raw)
    location = req.get("location") or ""
    if files.is_remote(location):
        files.resolve(location)  # this process learns the store's settings
    batches = read_split(
        split,
        include_headers=bool(req["includeHeaders"]),
        aborted=None
        if req.get("aborted") is None
        else [(int(a[0]), int(a[1]), int(a[2])) for a in req["aborted"]],
        fail_on_data_loss=bool(req["failOnDataLoss"]),
    )
    keep = req.get("keepUs")
    if keep is None:
        yield from batches
        return
    for batch in batches:
        yield _timestamps_within(batch, keep[0], keep[1])


def _timestamps_within(batch: Any, lo: int | None, hi: int | None) -> Any:
    """The rows of ``batch`` whose ``timestamp`` (microseconds, never null) is in [lo, hi)
    (None: unbounded): the timestamp filters the JVM scan takes whole, which Spark then does
    not evaluate again (KafkaLogScan.Builder.pushFilters)."""
    import pyarrow.compute as pc

    ts = batch.column("timestamp").cast("int64")
    mask = None
    if lo is not None:
        mask = pc.greater_equal(ts, int(lo))
    if hi is not None:
        below = pc.less(ts, int(hi))
        mask = below if mask is None else pc.and_(mask, below)
    return batch if mask is None else batch.filter(mask)


#: the largest trailer :func:`serve_reads` writes after a split's rows is bounded by what the
#: JVM accepts (``PythonReaders.MAX_TRAILER``): log lines past this are cut, said so
_TRAILER_LINES_BYTES = 4 << 20


class _Lines(logging.Handler):
    """The log lines one split's read says (formatted as the process's stderr has them), for
    the JVM to log in the task that asked, before the task ends."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter(_LOG_FORMAT))
        self.lines: list[str] = []
        self.size = 0

    def emit(self, record: logging.LogRecord) -> None:
        line = self.format(record)
        if self.size + len(line) > _TRAILER_LINES_BYTES:
            line = line[: max(0, _TRAILER_LINES_BYTES - self.size)] + " [cut: too long]"
        self.size += len(line)
        self.lines.append(line)


def read_one(request: str, out: IO[bytes]) -> None:
    """One split's rows as an Arrow IPC stream on ``out``, then a trailer: 4 bytes (big endian)
    of length and that many bytes of JSON, ``{"error": null | "Kind: message", "lines": [...]}``
    (a kafkalog error, such as damage naming file and byte, and the log lines the read said,
    failOnDataLoss=false's warnings among them). Only a trailer says the split ended: rows
    without one were cut short (the process died), and the JVM fails the task saying so."""
    import os
    import struct
    import traceback

    import pyarrow as pa

    from kafkalog.spark.task import spark_schema_arrow

    req = json.loads(request)
    split = req.get("split", {})
    # pid, byte, then the segment (its URI may hold ":")
    _trace(
        f"read_start:{os.getpid()}:{split.get('start_position')}:{_shown(str(split.get('segment')))}"
    )
    schema = spark_schema_arrow(bool(req["includeHeaders"]))
    lines = _Lines()
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = [lines]
    error: str | None = None
    writer = pa.ipc.new_stream(out, schema)
    try:
        for batch in _rest_batches(req):
            writer.write_batch(batch)
            _trace(f"read_batch:{os.getpid()}:{batch.num_rows}")
    except KafkalogError as problem:
        error = f"{type(problem).__name__}: {problem}"
    except (BrokenPipeError, ConnectionError):
        raise  # the JVM is gone: nothing to answer
    except Exception as problem:  # a bug: said, with its traceback on stderr, as before
        traceback.print_exc()
        error = f"kafkalog: the Python reader failed: {type(problem).__name__}: {problem}"
    finally:
        root.handlers = saved
    writer.close()  # the stream's end marker (the sink stays open)
    trailer = json.dumps({"error": error, "lines": lines.lines}).encode()
    out.write(struct.pack(">I", len(trailer)) + trailer)
    out.flush()
    _trace(f"read_end:{os.getpid()}")


def _shown(segment: str) -> str:
    from kafkalog import files

    return files.redacted(segment).replace(" ", "%20")


def serve_reads(stdin: IO[bytes], out: IO[bytes]) -> None:
    """``python -m kafkalog.spark.jvm_bridge reader``: a reader an executor JVM keeps
    (``PythonReaders.java``), serving one split request after another (one JSON line each on
    stdin, answered by :func:`read_one`) until the JVM closes stdin or ends."""
    import os

    _trace(f"reader_serving:{os.getpid()}")
    _watch_parent()
    for line in stdin:
        if line.strip():
            read_one(line.decode("utf-8"), out)


def _watch_parent() -> None:
    """End this process when the JVM that started it ends, even while a read is under way
    (stdin's end says so between reads; a crashed JVM's child is handed to another parent)."""
    import os
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="kafkalog-reader-parent", daemon=True).start()


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format=_LOG_FORMAT, stream=sys.stderr)
    if argv[:1] == ["serve"] and argv[1:2] == ["--listen-fd"] and len(argv) == 3:
        listen(int(argv[2]))
        return 0
    if argv[:1] == ["serve"]:
        serve(sys.stdin, sys.stdout)
        return 0
    if argv == ["reader"]:
        import os

        # the rows go to a private copy of stdout; anything printed goes to stderr instead
        out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        import contextlib

        with contextlib.suppress(BrokenPipeError, ConnectionError):  # the JVM went away mid-split
            serve_reads(sys.stdin.buffer, out)
        return 0
    sys.stderr.write("usage: python -m kafkalog.spark.jvm_bridge serve [--listen-fd N] | reader\n")
    return 2


if __name__ == "__main__":  # pragma: no cover - run by the JVM source
    sys.exit(main(sys.argv[1:]))
