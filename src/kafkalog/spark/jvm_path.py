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

import atexit
import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import kafkalog
from kafkalog.spark.jar import JarUnavailable, find_jar

logger = logging.getLogger("kafkalog.spark")

#: the confs the JVM source starts its planner with (Bridge.java)
PYTHON_CONF = "spark.kafkalog.python"
PYTHONPATH_CONF = "spark.kafkalog.pythonpath"
#: set to "python" in a session (or KAFKALOG_JVM=0 in the environment): no JVM path
PATH_CONF = "spark.kafkalog.path"
#: the Unix socket of the planner :func:`start_planner` started (Bridge.java connects to it)
PLANNER_CONF = "spark.kafkalog.planner"

_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        logger.info(message)


def python_path(before_jar: Callable[[bool], None] | None) -> str:
    if before_jar is not None:
        before_jar(False)
    return "python"


def is_connect(spark: Any) -> bool:
    """A Spark Connect session (its classes live in ``pyspark.sql.connect``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def use_jvm(
    spark: Any, before_jar: Callable[[bool], None] | None = None, *, alongside_jar: bool = True
) -> str:
    """Add the jar to ``spark`` (building it on first use): ``"jvm"`` when batch reads and
    streams of ``format("kafkalog")`` now run in the JVM on this thread, else ``"python"``.
    ``before_jar`` (the Python sources' registration, told whether the JVM source goes in
    front) runs alongside ``ADD JAR`` on a thread of its own (which Spark does not give the
    jar), or here when not ``alongside_jar`` or on the Python path."""
    if os.environ.get("KAFKALOG_JVM", "1") == "0" or spark.conf.get(PATH_CONF, "jvm") == "python":
        return python_path(before_jar)
    if is_connect(spark):
        _say_once(
            "kafkalog: a Spark Connect session: format('kafkalog') reads through the Python "
            "source; for the JVM path put kafkalog's jar (python -m kafkalog.spark.jar) in the "
            "server's spark.jars"
        )
        return python_path(before_jar)
    try:
        jar = find_jar()
    except JarUnavailable as why:
        _say_once(
            f"kafkalog: the Python data source serves format('kafkalog') ({why}); for the "
            "faster JVM path install a JDK 17+ (javac) and call kafkalog.spark.register again"
        )
        return python_path(before_jar)
    spark.conf.set(PYTHON_CONF, sys.executable)
    spark.conf.set(PYTHONPATH_CONF, kafkalog_path())
    socket_path = start_planner()
    if socket_path is not None:
        spark.conf.set(PLANNER_CONF, socket_path)
    else:
        spark.conf.unset(PLANNER_CONF)
    if before_jar is not None and not alongside_jar:
        before_jar(True)
    warmup = spark.conf.get(WARMUP_CONF, WARMUP_DEFAULT).lower()
    plan = "false" if warmup == "false" else spark.conf.get(PLAN_WARMUP_CONF, "false").lower()
    if plan == "early":
        first_plan_in_background(spark)
    with alongside(partial(before_jar, True) if before_jar and alongside_jar else None):
        spark.sql(f"ADD JAR '{jar}'")
    if warmup == "background":  # after the registration: its Python worker's start is cold too
        first_task_in_background(spark, str(jar))
    elif warmup == "true":
        first_task(spark, str(jar))
    if plan == "true":
        first_plan_in_background(spark)
    return "jvm"


#: when the JVM source's first task (the warm-up) runs: ``stream`` (the default: the JVM
#: source starts it when a stream starts, ``StreamWarmup.java``, beside the first micro-batch;
#: nothing here), ``background`` (``register`` runs :func:`first_task` on a thread of its own,
#: while the program goes on), ``true`` (inside ``register``), ``false`` (never). Neither of
#: ``register``'s ways brought the first answer sooner in bench/RESULTS.md's same-run
#: measurements: they compete with ``load()`` and ``start()``
WARMUP_CONF = "spark.kafkalog.jvm.warmup"
WARMUP_DEFAULT = "stream"
#: what it did: ``done <ms> (read N rows in T ms)``, ``failed: ...`` (unset: not run, or not
#: yet done in the background)
WARMUP_STATE_CONF = "spark.kafkalog.jvm.warmup.state"

#: (application, jar) pairs whose first task ran: once per Spark application and jar
_first_tasks: set[tuple[str, str]] = set()
_first_tasks_lock = threading.Lock()


def first_task(spark: Any, jar: str) -> None:
    """The warm-up, inside ``register`` (``spark.kafkalog.jvm.warmup=true``): run, in a local
    session, one task of Spark's own (a one-row ``range``) that calls the jar's
    ``kafkalog.jvm.FirstTask.run`` in the executor, so that what a new process's first query
    or micro-batch pays in its first job and task is paid before it.

    In local mode the executor loads the jar ``ADD JAR`` added through a class loader of its
    own, so nothing the driver loads or compiles serves a task: this task fetches the jar
    into the executor and loads and runs the decoder's classes there, and pays Spark's first
    job (its scheduler, the task's serialization, the executor's task thread, its code
    generator's classes). It reads nothing of the user's and changes how soon, never what, a
    query answers; a failure is only logged (and left in :data:`WARMUP_STATE_CONF`).

    Inside ``register`` it moves time more than it saves it: the first micro-batch came sooner,
    but the first answer later (bench/RESULTS.md, session 15); it can run in the
    background instead (:func:`first_task_in_background`). Once per application and jar;
    never where executors are other JVMs."""
    if _claim(spark, jar):
        spark.conf.set(WARMUP_STATE_CONF, _run_first_task(spark))


def first_task_in_background(spark: Any, jar: str) -> threading.Thread | None:
    """The warm-up in the background (``spark.kafkalog.jvm.warmup=background``):
    :func:`first_task`'s job on a daemon thread of its own, started
    by ``register``, so that it overlaps what the program does next anyway (building its
    query, Spark's planning and a stream's start) instead of delaying ``register``'s return.
    The thread (for a test to join), or ``None`` when there is nothing to run.

    The job's DataFrame is made here, on the calling thread: Spark analyses a DataFrame when it
    is made, and its ``reflect`` finds the class through the calling thread's class loader,
    where ``ADD JAR`` put the jar (on that thread only: each Python thread is a JVM thread of
    its own, whose class loader does not see the jar). The thread only runs it."""
    if not _claim(spark, jar):
        return None
    try:
        job = _first_task_job(spark)
    except Exception as problem:  # only how soon a first query answers
        spark.conf.set(WARMUP_STATE_CONF, _failed(problem))
        return None

    def run() -> None:
        state = _run_first_task(spark, job)
        with contextlib.suppress(Exception):  # the session stopped meanwhile
            spark.conf.set(WARMUP_STATE_CONF, state)

    thread = threading.Thread(target=run, name="kafkalog-first-task", daemon=True)
    thread.start()
    return thread


def _claim(spark: Any, jar: str) -> bool:
    """Whether this caller runs the first task of ``spark``'s application with ``jar``: a
    local session (elsewhere executors are other JVMs, which one task would not all reach)
    that has not had it."""
    context = spark.sparkContext
    if not str(context.master).startswith("local"):
        return False
    key = (str(context.applicationId), jar)
    with _first_tasks_lock:
        if key in _first_tasks:
            return False
        _first_tasks.add(key)
    return True


def _first_task_job(spark: Any) -> Any:
    """The first task's job: one row whose value the executor computes with the jar's
    ``FirstTask.run`` (analysed on the calling thread, which must see the jar)."""
    return spark.range(1, numPartitions=1).selectExpr(
        "reflect('kafkalog.jvm.FirstTask', 'run') AS state"
    )


def _run_first_task(spark: Any, job: Any = None) -> str:
    """The first task's job (made here unless given), run on the calling thread: its state
    (``done``/``failed``)."""
    context = spark.sparkContext
    before = context.getLocalProperty("spark.job.description")
    context.setJobDescription("kafkalog: the JVM source's first task (warm-up)")
    started = time.monotonic()
    try:
        rows = (job if job is not None else _first_task_job(spark)).collect()
        took = round((time.monotonic() - started) * 1000)
        return f"done {took} ({rows[0][0]})"
    except Exception as problem:  # only how soon a first query answers
        return _failed(problem)
    finally:
        with contextlib.suppress(Exception):
            context.setLocalProperty("spark.job.description", before)


def _failed(problem: Exception) -> str:
    logger.debug("kafkalog: the JVM source's first task failed (%s)", problem)
    return f"failed: {str(problem).splitlines()[0] if str(problem) else repr(problem)}"


#: the driver's first SQL planning and code generation paid on a thread of its own
#: (:func:`first_plan_in_background`): ``false`` (the default: never), ``true`` (started at
#: the end of ``register``) or ``early`` (at its start, beside ``ADD JAR``); never when
#: ``spark.kafkalog.jvm.warmup`` is ``false``. Opt-in: in bench/RESULTS.md's session-19 runs
#: it took 0.1-0.8 s off the first micro-batch but delayed ``load()`` and ``start()``
#: (``true``) or ``register()`` (``early``) by as much, so the first answer came no sooner
PLAN_WARMUP_CONF = "spark.kafkalog.jvm.warmup.compile"
#: what it did: ``done <ms>`` or ``failed: ...`` (unset: not run, or still running)
PLAN_WARMUP_STATE_CONF = "spark.kafkalog.jvm.warmup.compile.state"

#: applications whose first plan ran (once per application)
_first_plans: set[str] = set()


def first_plan_in_background(spark: Any) -> threading.Thread | None:
    """Spark's first planning and Janino's first compile in the driver, paid on a daemon
    thread started by ``register`` (:data:`PLAN_WARMUP_CONF`), while the program builds and
    starts its query.

    A new process's first micro-batch pays them on the stream's thread before its job can
    start (bench/RESULTS.md, session 19: the stream thread's first compile 0.33 s on a quiet
    machine, 0.05 s once the driver had compiled anything). This
    plans a one-row ``range`` projected to the types of kafkalog's columns (binary, string,
    int, long, timestamp) and turns it into an RDD (``DataFrame.rdd``): Spark analyses,
    optimizes, plans and compiles its whole-stage code then, and runs **no job**; it reads
    no file, the user's or any other, and changes how soon, never what, a query answers. A
    failure is only kept in :data:`PLAN_WARMUP_STATE_CONF`. Once per application; the thread
    (for a test to join), or ``None`` when there is nothing to run."""
    application = str(spark.sparkContext.applicationId)
    with _first_tasks_lock:
        if application in _first_plans:
            return None
        _first_plans.add(application)

    def run() -> None:
        started = time.monotonic()
        try:
            spark.range(1, numPartitions=1).selectExpr(*_FIRST_PLAN_COLUMNS).rdd  # noqa: B018
            state = f"done {round((time.monotonic() - started) * 1000)}"
        except Exception as problem:  # only how soon a first query answers
            state = _failed(problem)
        with contextlib.suppress(Exception):  # the session stopped meanwhile
            spark.conf.set(PLAN_WARMUP_STATE_CONF, state)

    thread = threading.Thread(target=run, name="kafkalog-first-plan", daemon=True)
    thread.start()
    return thread


#: the first plan's columns: the types of kafkalog's (key, value, topic, partition, offset,
#: timestamp, timestampType), made from ``range``'s ``id``
_FIRST_PLAN_COLUMNS = (
    "cast(cast(id AS string) AS binary) AS key",
    "cast(cast(id AS string) AS binary) AS value",
    "cast(id AS string) AS topic",
    "cast(id AS int) AS partition",
    "id AS offset",
    "timestamp_millis(id) AS timestamp",
    "cast(id AS int) AS timestampType",
)


def kafkalog_path() -> str:
    """The directory this ``kafkalog`` package is imported from (the planner's PYTHONPATH)."""
    return os.path.dirname(os.path.dirname(kafkalog.__file__))


@contextlib.contextmanager
def alongside(work: Callable[[], None] | None) -> Iterator[None]:
    """Run ``work`` in a thread of its own while the ``with`` body runs, and wait for it (its
    exception raised here). ``None``: nothing."""
    if work is None:
        yield
        return
    failed: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as problem:  # handed to the caller's thread
            failed.append(problem)

    thread = threading.Thread(target=run, name="kafkalog-register", daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
    if failed:
        raise failed[0]


class _Planner:
    """The planner process this interpreter started, and the socket it listens on."""

    def __init__(self, process: subprocess.Popen[bytes], directory: str, path: str) -> None:
        self.process = process
        self.directory = directory
        self.path = path


_planner: _Planner | None = None
_planner_lock = threading.Lock()


def start_planner() -> str | None:
    """Start the JVM source's planner now, in the background (once per interpreter): the path
    of the Unix socket it answers on, for ``Bridge.java`` to connect to at ``load()`` instead of
    starting one then. A new driver's first query then finds its interpreter started and its
    imports done (they overlap ``ADD JAR`` and the JVM's own work). ``None`` where it cannot be
    started (no Unix sockets): the JVM starts its own at ``load()``, as it always can.

    The socket is bound here, before the process starts, so the JVM's connection is accepted
    whenever it comes; the process ends when this interpreter does (it watches its stdin) or at
    :func:`stop_planner`."""
    global _planner
    with _planner_lock:
        if _planner is not None and _planner.process.poll() is None:
            return _planner.path
        stop_planner_locked()
        if not hasattr(socket, "AF_UNIX"):
            return None
        directory = tempfile.mkdtemp(prefix="kafkalog-planner-")  # 0700: this user's only
        path = os.path.join(directory, "planner.sock")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(path)
            server.listen(4)
            env = dict(os.environ)
            old = env.get("PYTHONPATH")
            env["PYTHONPATH"] = kafkalog_path() + (os.pathsep + old if old else "")
            cmd = [sys.executable, "-m", "kafkalog.spark.jvm_bridge", "serve", "--listen-fd"]
            process = subprocess.Popen(
                [*cmd, str(server.fileno())],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                pass_fds=(server.fileno(),),
                env=env,
            )
        except OSError as problem:
            logger.debug("kafkalog: no planner started at register() (%s)", problem)
            shutil.rmtree(directory, ignore_errors=True)
            return None
        finally:
            server.close()  # the planner holds its own copy
        _planner = _Planner(process, directory, path)
        return path


def stop_planner() -> None:
    """End the planner :func:`start_planner` started (at exit, and for tests); the JVM starts
    one of its own if it asks again."""
    with _planner_lock:
        stop_planner_locked()


def stop_planner_locked() -> None:
    global _planner
    planner, _planner = _planner, None
    if planner is None:
        return
    if planner.process.stdin is not None:
        planner.process.stdin.close()  # its signal to end
    try:
        planner.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        planner.process.kill()
        planner.process.wait()
    shutil.rmtree(planner.directory, ignore_errors=True)


atexit.register(stop_planner)
