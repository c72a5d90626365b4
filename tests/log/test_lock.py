"""One writer per partition directory (kafkalog.log.lock), against real processes and a real JVM.

The contenders are real: child Python processes, a child killed with SIGKILL, a "broker" that
locks ``.lock`` with fcntl like the JVM does, and (when ``java``/``javac`` are on PATH) a real
JVM taking the lock the way Kafka's ``FileLock`` does, ``FileChannel.tryLock()``.
"""

from __future__ import annotations

import errno
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkalog.errors import KafkalogError
from kafkalog.log.lock import (
    DirectoryLock,
    LockedError,
    LockFileError,
    broker_holds,
)

SRC = str(Path(__file__).resolve().parents[2] / "src")
BROKER_PHRASE = "a Kafka broker (its log directory .lock is held)"

# A kafkalog writer in another process: "try" reports and exits, "hold" waits for a line on stdin.
WRITER_SCRIPT = f"""
import os, sys
sys.path.insert(0, {SRC!r})
from kafkalog.log.lock import DirectoryLock, LockedError
lock = DirectoryLock(sys.argv[1])
try:
    lock.acquire()
except LockedError as exc:
    print("LOCKED", exc, flush=True)
    sys.exit(3)
print("ACQUIRED", os.getpid(), flush=True)
if sys.argv[2] == "hold":
    sys.stdin.readline()
lock.release()
print("RELEASED", flush=True)
"""

# What the JVM does on Linux for tryLock(): an fcntl (POSIX record) lock on the whole file.
FCNTL_SCRIPT = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.lockf(fd, fcntl.LOCK_EX if sys.argv[2] == "ex" else fcntl.LOCK_SH)
print("LOCKED", os.getpid(), flush=True)
sys.stdin.readline()
"""

# Kafka's kafka.utils.FileLock: FileChannel.open(CREATE, READ, WRITE) then tryLock().
JAVA_SOURCE = """
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;

public class KafkaStyleLock {
    public static void main(String[] args) throws Exception {
        try (FileChannel channel = FileChannel.open(Paths.get(args[1]),
                StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            FileLock lock = channel.tryLock();
            if (lock == null) {
                System.out.println("BUSY");
                return;
            }
            System.out.println("LOCKED " + ProcessHandle.current().pid());
            System.out.flush();
            if (args[0].equals("hold")) {
                while (System.in.read() >= 0) { }  // hold until stdin closes (or we are killed)
            }
            lock.release();
        }
    }
}
"""


class Child:
    """A helper process whose stdout is read line by line with a deadline."""

    def __init__(self, args: list[str], **kwargs: Any) -> None:
        self.popen = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kwargs,
        )
        self._pending = b""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def readline(self, timeout: float = 15.0) -> str:
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            if left <= 0:
                self._fail(f"no line within {timeout} s")
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, 4096)
                if not chunk:
                    self._fail("exited without a line")
                self._pending += chunk
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode()

    def send_line(self) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(b"\n")
        self.popen.stdin.flush()

    def finish(self, timeout: float = 15.0) -> int:
        """Close stdin (a holder then lets go) and wait for the exit code."""
        assert self.popen.stdin is not None
        self.popen.stdin.close()
        return self.popen.wait(timeout)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()

    def _fail(self, why: str) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        assert self.popen.stderr is not None
        stderr = self.popen.stderr.read().decode(errors="replace")
        pytest.fail(f"child {self.popen.args!r}: {why}; stderr: {stderr}")


Spawn = Callable[..., Child]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    children: list[Child] = []

    def start(args: list[str], **kwargs: Any) -> Child:
        child = Child(args, **kwargs)
        children.append(child)
        return child

    yield start
    for child in children:
        child.kill()


def writer(spawn: Spawn, partition: Path, mode: str = "try") -> Child:
    return spawn([sys.executable, "-c", WRITER_SCRIPT, str(partition), mode])


def try_in_other_process(spawn: Spawn, partition: Path) -> str:
    """What another kafkalog process gets when it tries the lock right now."""
    child = writer(spawn, partition)
    line = child.readline()
    child.finish()
    return line


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    d = tmp_path / "kafka-logs"
    d.mkdir()
    return d


@pytest.fixture
def partition(log_dir: Path) -> Path:
    p = log_dir / "orders-0"
    p.mkdir()
    return p


def snapshot(path: Path) -> tuple[int, bytes]:
    return path.stat().st_mtime_ns, path.read_bytes()


# -- in one process -------------------------------------------------------------------------
def test_acquire_release_reacquire(partition: Path) -> None:
    lock = DirectoryLock(partition)
    assert not lock.locked
    assert DirectoryLock.holder(partition) is None
    lock.acquire()
    assert lock.locked
    assert DirectoryLock.holder(partition) == os.getpid()
    assert DirectoryLock.is_held(partition)
    lock.release()
    assert not lock.locked
    assert DirectoryLock.holder(partition) is None
    assert not DirectoryLock.is_held(partition)
    lock.release()  # idempotent
    lock.acquire()
    assert lock.locked
    lock.release()
    # The file stays, like Kafka's .lock: deleting it would race with another acquirer.
    assert (partition / DirectoryLock.LOCK_NAME).is_file()


def test_context_manager(partition: Path) -> None:
    with DirectoryLock(str(partition)) as lock:
        assert lock.locked
        assert "locked" in repr(lock)
    assert not lock.locked
    with pytest.raises(RuntimeError), DirectoryLock(partition) as lock:
        raise RuntimeError("boom")
    assert not lock.locked
    assert DirectoryLock.holder(partition) is None


def test_lock_file_records_our_pid(partition: Path) -> None:
    lock_file = partition / DirectoryLock.LOCK_NAME
    lock_file.write_bytes(b"99999999 left over by a crashed writer, longer than a pid\n")
    with DirectoryLock(partition):
        assert lock_file.read_bytes() == f"{os.getpid()}\n".encode()
    assert lock_file.stat().st_mode & 0o777 == 0o644


def test_second_lock_in_same_process_refused(partition: Path, spawn: Spawn) -> None:
    first = DirectoryLock(partition)
    first.acquire()
    try:
        # Same directory spelt three ways: as given, through a symlink, relative.
        link = partition.parent / "alias"
        link.symlink_to(partition, target_is_directory=True)
        spellings: list[str | Path] = [partition, link, os.path.relpath(partition)]
        for spelling in spellings:
            with pytest.raises(LockedError) as info:
                DirectoryLock(spelling).acquire()
            assert str(os.getpid()) in str(info.value)
            assert "this process" in str(info.value)
            assert info.value.holder_pid == os.getpid()
            assert str(spelling) in str(info.value)
        with pytest.raises(LockedError, match="already holds"):
            first.acquire()
        # None of that may have dropped the kernel lock (closing any descriptor of a file
        # drops all of the process's fcntl locks on it): another process is still refused.
        assert try_in_other_process(spawn, partition).startswith("LOCKED")
        assert first.locked
    finally:
        first.release()


def test_probes_do_not_drop_our_own_lock(partition: Path, log_dir: Path, spawn: Spawn) -> None:
    (log_dir / ".lock").touch()
    with DirectoryLock(partition):
        for _ in range(3):
            assert DirectoryLock.holder(partition) == os.getpid()
            assert DirectoryLock.is_held(partition)
            assert not broker_holds(log_dir)
        line = try_in_other_process(spawn, partition)
        assert line.startswith("LOCKED") and str(os.getpid()) in line


def test_threads_race_one_winner(partition: Path) -> None:
    n = 8
    barrier = threading.Barrier(n)
    locks = [DirectoryLock(partition) for _ in range(n)]
    outcomes: list[str] = []

    def contend(lock: DirectoryLock) -> None:
        barrier.wait()
        try:
            lock.acquire()
            outcomes.append("won")
        except LockedError:
            outcomes.append("refused")

    threads = [threading.Thread(target=contend, args=(lock,)) for lock in locks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sorted(outcomes) == ["refused"] * (n - 1) + ["won"]
    assert sum(lock.locked for lock in locks) == 1
    for lock in locks:
        lock.release()
    assert DirectoryLock.holder(partition) is None


# -- across processes -------------------------------------------------------------------------
def test_second_process_refused_then_succeeds(partition: Path, spawn: Spawn) -> None:
    lock = DirectoryLock(partition)
    lock.acquire()
    line = try_in_other_process(spawn, partition)
    assert line.startswith("LOCKED")
    assert f"pid {os.getpid()}" in line
    assert str(partition) in line
    lock.release()
    assert try_in_other_process(spawn, partition).startswith("ACQUIRED")
    assert (partition / DirectoryLock.LOCK_NAME).read_text().strip().isdigit()


def test_other_process_holding_refuses_us(partition: Path, spawn: Spawn) -> None:
    child = writer(spawn, partition, "hold")
    assert child.readline() == f"ACQUIRED {child.pid}"
    assert DirectoryLock.holder(partition) == child.pid
    assert DirectoryLock.is_held(partition)
    with pytest.raises(LockedError) as info:
        DirectoryLock(partition).acquire()
    assert info.value.holder_pid == child.pid
    assert f"pid {child.pid}" in str(info.value)
    assert not info.value.broker
    child.send_line()
    assert child.readline() == "RELEASED"
    assert child.finish() == 0
    with DirectoryLock(partition):
        pass


def test_sigkill_frees_the_lock(partition: Path, spawn: Spawn) -> None:
    child = writer(spawn, partition, "hold")
    assert child.readline().startswith("ACQUIRED")
    assert DirectoryLock.holder(partition) == child.pid
    child.popen.send_signal(signal.SIGKILL)
    assert child.popen.wait(10) == -signal.SIGKILL
    # The kernel dropped the lock with the process; the pid in the file is stale and ignored.
    lock_file = partition / DirectoryLock.LOCK_NAME
    assert lock_file.read_text() == f"{child.pid}\n"
    assert DirectoryLock.holder(partition) is None
    with DirectoryLock(partition):
        assert lock_file.read_text() == f"{os.getpid()}\n"


def test_forked_child_does_not_inherit_the_lock(partition: Path, spawn: Spawn) -> None:
    parent = os.getpid()
    lock = DirectoryLock(partition)
    lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                if lock.locked:
                    code = 2
                else:
                    lock.release()  # closes the child's copy of the descriptor only
                    try:
                        DirectoryLock(partition).acquire()
                        code = 3
                    except LockedError as exc:
                        code = 0 if exc.holder_pid == parent else 4
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert lock.locked
        assert try_in_other_process(spawn, partition).startswith("LOCKED")
    finally:
        lock.release()


# -- a running broker ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["ex", "sh"])
def test_broker_lock_refuses_writer(
    log_dir: Path, partition: Path, spawn: Spawn, mode: str
) -> None:
    kafka_lock = log_dir / ".lock"
    broker = spawn([sys.executable, "-c", FCNTL_SCRIPT, str(kafka_lock), mode])
    assert broker.readline() == f"LOCKED {broker.pid}"
    os.utime(kafka_lock, ns=(1_000_000_000, 1_000_000_000))
    before, dir_before = snapshot(kafka_lock), partition.stat().st_mtime_ns

    assert broker_holds(log_dir)
    assert broker_holds(str(log_dir))
    with pytest.raises(LockedError) as info:
        DirectoryLock(partition).acquire()
    message = str(info.value)
    assert BROKER_PHRASE in message
    assert f"pid {broker.pid}" in message and str(log_dir) in message
    assert info.value.broker and info.value.holder_pid == broker.pid
    assert isinstance(info.value, KafkalogError)

    # The refused writer left no trace: no lock file in the broker's partition, .lock as it was.
    assert not (partition / DirectoryLock.LOCK_NAME).exists()
    assert partition.stat().st_mtime_ns == dir_before
    assert snapshot(kafka_lock) == before

    assert broker.finish() == 0
    assert not broker_holds(log_dir)
    with DirectoryLock(partition):
        pass
    assert snapshot(kafka_lock) == before


def test_broker_lock_seen_through_symlinked_partition(
    tmp_path: Path, log_dir: Path, spawn: Spawn
) -> None:
    # A broker follows a symlinked partition directory into another file system location.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "orders-1").mkdir()
    (log_dir / "orders-1").symlink_to(elsewhere / "orders-1", target_is_directory=True)
    broker = spawn([sys.executable, "-c", FCNTL_SCRIPT, str(log_dir / ".lock"), "ex"])
    assert broker.readline().startswith("LOCKED")
    with pytest.raises(LockedError, match=r"a Kafka broker \(its log directory"):
        DirectoryLock(log_dir / "orders-1").acquire()


def test_broker_holds_without_lock_file(log_dir: Path) -> None:
    before = log_dir.stat().st_mtime_ns
    assert not broker_holds(log_dir)
    assert not (log_dir / ".lock").exists()
    assert log_dir.stat().st_mtime_ns == before
    assert not broker_holds(log_dir / "no-such-dir")
    assert not broker_holds(log_dir / "no-such-dir" / "deeper")


def test_probes_change_nothing(log_dir: Path, partition: Path, spawn: Spawn) -> None:
    kafka_lock = log_dir / ".lock"
    kafka_lock.write_bytes(b"")
    writer_lock = partition / DirectoryLock.LOCK_NAME
    writer_lock.write_bytes(b"12345\n")
    past = (1_000_000_000, 1_000_000_000)
    for path in (kafka_lock, writer_lock):
        os.utime(path, ns=past)
    files = {p: snapshot(p) for p in (kafka_lock, writer_lock)}
    dirs = {d: d.stat().st_mtime_ns for d in (log_dir, partition)}

    def probe_all() -> None:
        for _ in range(3):
            broker_holds(log_dir)
            DirectoryLock.holder(partition)
            DirectoryLock.is_held(partition)
        assert {p: snapshot(p) for p in files} == files
        assert {d: d.stat().st_mtime_ns for d in dirs} == dirs

    probe_all()  # free
    broker = spawn([sys.executable, "-c", FCNTL_SCRIPT, str(kafka_lock), "ex"])
    other = spawn([sys.executable, "-c", FCNTL_SCRIPT, str(writer_lock), "ex"])
    assert broker.readline().startswith("LOCKED") and other.readline().startswith("LOCKED")
    assert broker_holds(log_dir)
    assert DirectoryLock.holder(partition) == other.pid  # the kernel's answer, not the file's
    probe_all()  # held
    # And a probe takes no lock, not even for an instant: the holders never noticed.
    assert broker.finish() == 0 and other.finish() == 0


# -- a real JVM ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def java_lock(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    java, javac = shutil.which("java"), shutil.which("javac")
    if java is None or javac is None:
        pytest.skip("java and javac are not on PATH")
    d = tmp_path_factory.mktemp("java")
    source = d / "KafkaStyleLock.java"
    source.write_text(JAVA_SOURCE)
    result = subprocess.run(
        [javac, "-d", str(d), str(source)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [java, "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", str(d), "KafkaStyleLock"]


def test_java_broker_lock_refuses_writer(
    java_lock: list[str], log_dir: Path, partition: Path, spawn: Spawn
) -> None:
    kafka_lock = log_dir / ".lock"
    jvm = spawn([*java_lock, "hold", str(kafka_lock)])
    line = jvm.readline(timeout=30)
    assert line.startswith("LOCKED ")
    jvm_pid = int(line.split()[1])
    os.utime(kafka_lock, ns=(1_000_000_000, 1_000_000_000))
    before = snapshot(kafka_lock)

    assert broker_holds(log_dir)
    with pytest.raises(LockedError) as info:
        DirectoryLock(partition).acquire()
    assert BROKER_PHRASE in str(info.value)
    assert info.value.holder_pid == jvm_pid
    assert f"pid {jvm_pid}" in str(info.value)
    assert not (partition / DirectoryLock.LOCK_NAME).exists()
    assert snapshot(kafka_lock) == before

    assert jvm.finish(timeout=30) == 0
    assert not broker_holds(log_dir)
    with DirectoryLock(partition):
        pass


def test_java_sees_the_kafkalog_lock(java_lock: list[str], partition: Path, spawn: Spawn) -> None:
    lock_file = partition / DirectoryLock.LOCK_NAME
    with DirectoryLock(partition):
        jvm = spawn([*java_lock, "try", str(lock_file)])
        assert jvm.readline(timeout=30) == "BUSY"
        assert jvm.finish(timeout=30) == 0
    jvm = spawn([*java_lock, "try", str(lock_file)])
    assert jvm.readline(timeout=30).startswith("LOCKED")
    assert jvm.finish(timeout=30) == 0


def test_java_holding_the_writer_lock_refuses_us(
    java_lock: list[str], partition: Path, spawn: Spawn
) -> None:
    jvm = spawn([*java_lock, "hold", str(partition / DirectoryLock.LOCK_NAME)])
    jvm_pid = int(jvm.readline(timeout=30).split()[1])
    assert DirectoryLock.holder(partition) == jvm_pid
    with pytest.raises(LockedError, match=f"pid {jvm_pid}"):
        DirectoryLock(partition).acquire()
    jvm.kill()
    with DirectoryLock(partition):
        pass


# -- cannot lock at all -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (errno.EACCES, "not writable"),
        (errno.EPERM, "not writable"),
        (errno.EROFS, "read-only file system"),
    ],
)
def test_unwritable_directory_is_a_clear_error(
    partition: Path, monkeypatch: pytest.MonkeyPatch, code: int, expected: str
) -> None:
    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(DirectoryLock.LOCK_NAME) and flags & os.O_CREAT:
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing_open)
    lock = DirectoryLock(partition)
    with pytest.raises(LockFileError) as info:
        lock.acquire()
    assert isinstance(info.value, KafkalogError)
    assert expected in str(info.value) and str(partition) in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert not lock.locked
    monkeypatch.undo()
    with DirectoryLock(partition):  # nothing was left half-registered
        pass


def _interpreter_for_nobody() -> str | None:
    """A Python >= 3.11 that user nobody can run (ours may live under root's home)."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if candidate is None:
            continue
        try:
            result = subprocess.run(
                [candidate, "-I", "-c", "import sys; print(sys.version_info >= (3, 11))"],
                capture_output=True,
                text=True,
                timeout=10,
                user=65534,
                group=65534,
                extra_groups=[],
                cwd="/",
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if result.stdout.strip() == "True":
            return candidate
    return None


# The interpreter nobody can run may lack kafkalog's dependencies (numpy...), which the
# kafkalog.log package imports; lock.py needs only the standard library and kafkalog.errors,
# so the package is replaced by a bare one pointing at the same directory.
NOBODY_SCRIPT = f"""
import sys, types
sys.path.insert(0, {SRC!r})
import kafkalog
package = types.ModuleType("kafkalog.log")
package.__path__ = [kafkalog.__path__[0] + "/log"]
sys.modules["kafkalog.log"] = package
from kafkalog.log.lock import DirectoryLock, LockFileError, broker_holds
log_dir, read_only, held = sys.argv[1:4]

def attempt(label, call):
    try:
        print(label, call(), flush=True)
    except LockFileError as exc:
        print(label, "LockFileError", exc, flush=True)

attempt("ACQUIRE", lambda: DirectoryLock(read_only).acquire())
attempt("BROKER", lambda: broker_holds(log_dir))
attempt("HOLDER", lambda: DirectoryLock.holder(held))
"""


def test_read_only_directory_for_real(spawn: Spawn) -> None:
    """Real permissions: as root the check runs as user nobody, otherwise as ourselves."""
    base = Path(tempfile.mkdtemp(prefix="kafkalog-lock-"))
    try:
        base.chmod(0o755)
        log_dir = base / "kafka-logs"
        log_dir.mkdir(mode=0o755)
        (log_dir / ".lock").touch(mode=0o644)
        read_only, held = log_dir / "ro-0", log_dir / "held-0"
        read_only.mkdir()
        held.mkdir()
        read_only.chmod(0o555)
        with DirectoryLock(held):
            (held / DirectoryLock.LOCK_NAME).chmod(0o644)
            if os.geteuid() != 0:
                with pytest.raises(LockFileError, match="not writable"):
                    DirectoryLock(read_only).acquire()
                return
            python = _interpreter_for_nobody()
            if python is None:
                pytest.skip("no Python >= 3.11 runnable as user nobody")
            args = [python, "-I", "-B", "-c", NOBODY_SCRIPT]
            args += [str(log_dir), str(read_only), str(held)]
            child = spawn(args, user=65534, group=65534, extra_groups=[], cwd="/")
            refused = child.readline()
            assert refused.startswith("ACQUIRE LockFileError"), refused
            assert "not writable" in refused and str(read_only) in refused
            # A reader needs no write permission to probe either lock.
            assert child.readline() == "BROKER False"
            assert child.readline() == f"HOLDER {os.getpid()}"
            assert child.finish() == 0
            assert not (read_only / DirectoryLock.LOCK_NAME).exists()

            # An unreadable .lock: "is a broker running?" cannot be answered, so no guess.
            (log_dir / ".lock").chmod(0o600)
            child = spawn(args, user=65534, group=65534, extra_groups=[], cwd="/")
            for label in ("ACQUIRE", "BROKER"):
                line = child.readline()
                assert line.startswith(f"{label} LockFileError"), line
                assert "cannot tell whether a Kafka broker" in line
            assert child.readline() == f"HOLDER {os.getpid()}"
            assert child.finish() == 0
    finally:
        for root, dirs, _ in os.walk(base):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
        shutil.rmtree(base)


def test_missing_or_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(LockFileError, match="does not exist"):
        DirectoryLock(tmp_path / "nope").acquire()
    file = tmp_path / "file-0"
    file.write_bytes(b"x")
    with pytest.raises(LockFileError, match="not a directory"):
        DirectoryLock(file).acquire()
    assert DirectoryLock.holder(tmp_path / "nope") is None
    assert not DirectoryLock.is_held(file)


def test_symlinked_lock_file_is_not_followed(partition: Path, tmp_path: Path) -> None:
    victim = tmp_path / "precious"
    victim.write_bytes(b"do not truncate me")
    (partition / DirectoryLock.LOCK_NAME).symlink_to(victim)
    with pytest.raises(LockFileError, match="symbolic link"):
        DirectoryLock(partition).acquire()
    assert victim.read_bytes() == b"do not truncate me"


def test_errors_pickle() -> None:
    locked = LockedError("/d/t-0", "held", holder_pid=42, broker=True)
    copy = pickle.loads(pickle.dumps(locked))
    assert (copy.path, copy.reason, copy.holder_pid, copy.broker) == ("/d/t-0", "held", 42, True)
    assert str(copy) == str(locked)
    failed = pickle.loads(pickle.dumps(LockFileError("/d/t-0", "not writable")))
    assert isinstance(failed, LockFileError) and str(failed) == "/d/t-0: not writable"
