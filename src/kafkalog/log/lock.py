"""One writer per partition directory: an OS lock file, compatible with a Kafka broker's lock.

Two writers appending to the same partition directory interleave batches, index entries and
checkpoints and corrupt the log beyond what Kafka's recovery can repair. Kafka itself guards
each *log directory root* with an OS lock on the empty file ``.lock`` (spec §1.1), taken with
Java's ``FileChannel.tryLock()``. kafkalog does two things before it writes to a partition:

1. It refuses when a Kafka broker (or any other process) holds the parent log directory's
   ``.lock``: writing into a live broker's partition would corrupt it under the broker's feet.
2. It takes an exclusive lock on ``<partition>/.kafkalog.lock`` so that two kafkalog writers
   (two processes, two threads, two objects) never write the same partition at once.

Why ``fcntl`` record locks (``fcntl.lockf``) and not ``fcntl.flock``: on Linux the JVM
implements ``tryLock()`` with ``fcntl(F_SETLK)``, a POSIX record lock. BSD ``flock`` locks
live in a separate kernel table and are invisible to it, so only fcntl locks interoperate
with a broker (and with any Java tool that locks ``.kafkalog.lock``).

POSIX record locks have two traps that shape this module:

* They belong to the *process*, not to the file descriptor: a second lock request on the same
  file from the same process always succeeds (it merely replaces the first). So a
  process-wide registry, keyed by the partition directory's identity (device, inode), refuses
  a second :class:`DirectoryLock` in the same process.
* Closing *any* descriptor of a file releases *all* of the process's locks on that file. So
  nothing here opens a lock file that this process may hold without first consulting the
  registry, under the registry's mutex, and the lock files are never opened elsewhere.

Probing (is a broker running? who holds this partition?) uses ``fcntl(F_GETLK)``, which asks
the kernel for a conflicting lock without taking one: the probe needs only read permission,
never creates a file, never changes a byte or an mtime, and cannot make a broker that starts
at that very instant fail its own ``tryLock()`` (a momentary shared lock could). The kernel
also names the holder's pid, which is how the broker's pid gets into the error message.

Limitation: the broker check is a check, not a lock. A broker started *after* kafkalog took
its writer lock is not stopped by kafkalog (Kafka knows nothing of ``.kafkalog.lock``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
import sys
import threading
from types import TracebackType
from typing import ClassVar, Self, TypeAlias

from kafkalog.errors import KafkalogError

__all__ = [
    "KAFKA_LOCK_NAME",
    "DirectoryLock",
    "LockFileError",
    "LockedError",
    "broker_holds",
]

StrPath: TypeAlias = str | os.PathLike[str]

KAFKA_LOCK_NAME = ".lock"
"""The file a Kafka broker locks in each log directory root (``LogManager.LockFileName``)."""

_BROKER = "a Kafka broker (its log directory .lock is held)"
_LOCK_CONFLICT = (errno.EACCES, errno.EAGAIN)  # what F_SETLK reports for a conflicting lock
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK  # NONBLOCK: a FIFO
_PID_BYTES = 32  # a pid record is a decimal number and a newline


class LockedError(KafkalogError):
    """Another writer holds the partition: a Kafka broker, another process or this process.

    ``holder_pid`` is the holder's pid when known; ``broker`` is true when the refusal is
    because the parent log directory's ``.lock`` is held (a running broker).
    """

    def __init__(
        self, path: str, reason: str, *, holder_pid: int | None = None, broker: bool = False
    ) -> None:
        self.path = path
        self.reason = reason
        self.holder_pid = holder_pid
        self.broker = broker
        super().__init__(f"{path}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments do not survive the default pickling of exceptions (which
        # multiprocessing uses to send an error back to the parent).
        return (_rebuild_locked, (type(self), self.path, self.reason, self.holder_pid, self.broker))


def _rebuild_locked(
    cls: type[LockedError], path: str, reason: str, holder_pid: int | None, broker: bool
) -> LockedError:
    return cls(path, reason, holder_pid=holder_pid, broker=broker)


class LockFileError(KafkalogError):
    """The lock cannot be taken or probed for a reason other than a holder: the directory is
    missing or not writable, the file system has no fcntl locks, ...

    A separate class so that callers can tell "someone else is writing, try later" from "this
    can never work here"; the original ``OSError`` is chained as ``__cause__``.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.reason))


# -- the process-wide registry -------------------------------------------------------------
class _Registry:
    """Which partition directories this process holds, keyed by (st_dev, st_ino).

    Keyed by the directory's identity rather than its path so that a symlink, a relative path
    or a bind mount cannot smuggle a second lock past it.
    """

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.owners: dict[tuple[int, int], DirectoryLock] = {}


_registry = _Registry()


def _forget_after_fork() -> None:
    # A forked child inherits the dict but not the kernel locks (fcntl locks are not inherited
    # across fork), nor a usable mutex if another thread held it at fork time.
    global _registry
    _registry = _Registry()


os.register_at_fork(after_in_child=_forget_after_fork)


# -- probing -------------------------------------------------------------------------------
_FLOCK_FORMAT = "@hhqqi"  # struct flock on 64-bit Linux: type, whence, start, len, pid
_USE_GETLK = sys.platform == "linux" and struct.calcsize("P") == 8


def _test_lock(fd: int) -> tuple[bool, int | None]:
    """Whether another process holds any fcntl lock on ``fd``'s file, and its pid if known.

    Takes no lock. On 64-bit Linux this is ``F_GETLK`` asking "could I write-lock the whole
    file?": any conflicting lock, shared or exclusive, is reported with its holder's pid (0 or
    -1 when the kernel cannot name it: another pid namespace, an OFD lock). Locks held by this
    very process never conflict with it, as POSIX specifies. Elsewhere (no known ``struct
    flock`` layout) it falls back to a momentary non-blocking shared lock, released at once,
    which detects exclusive locks only.
    """
    if _USE_GETLK:
        request = struct.pack(_FLOCK_FORMAT, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        # Padding: the kernel's struct may be larger than ours (trailing arch padding).
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, request + bytes(32))
        l_type, _, _, _, l_pid = struct.unpack_from(_FLOCK_FORMAT, answer)
        if l_type == fcntl.F_UNLCK:
            return False, None
        return True, (l_pid if l_pid > 0 else None)
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _LOCK_CONFLICT:
            return True, None
        raise
    fcntl.lockf(fd, fcntl.LOCK_UN)
    return False, None


def _read_pid(fd: int) -> int | None:
    """The pid a kafkalog writer recorded in its lock file, or None if there is none."""
    try:
        text = os.pread(fd, _PID_BYTES, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def _probe(path: str, *, pid_file: bool) -> tuple[bool, int | None]:
    """(held, holder pid) for the lock file ``path``, opened read-only; a missing file is free.

    ``pid_file``: when the kernel cannot name the holder, read the pid recorded in the file.

    Callers must hold the registry mutex and must not hold ``path`` themselves (closing the
    probe's descriptor would drop this process's locks on it).
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        held, pid = _test_lock(fd)
        if held and pid is None and pid_file:
            pid = _read_pid(fd)
        return held, pid
    finally:
        os.close(fd)


def _probe_broker(log_dir: str) -> tuple[bool, int | None]:
    """(held, pid) for ``log_dir/.lock``; raises LockFileError when it cannot be probed."""
    path = os.path.join(log_dir, KAFKA_LOCK_NAME)
    try:
        # A broker's .lock is empty: only the kernel can name the broker.
        return _probe(path, pid_file=False)
    except FileNotFoundError:
        return False, None  # no .lock: no broker has ever used this directory as a log dir
    except NotADirectoryError:
        return False, None
    except OSError as exc:
        # Refuse rather than guess: writing into a live broker's directory corrupts it.
        raise LockFileError(
            log_dir,
            f"cannot tell whether a Kafka broker is using this log directory: "
            f"cannot read {path} ({exc.strerror or exc})",
        ) from exc


def broker_holds(log_dir: StrPath) -> bool:
    """True when some process holds an fcntl lock on ``log_dir/.lock``: a running broker.

    A read-only probe: never creates ``.lock``, never changes its bytes or mtime, needs only
    read permission, and takes no lock a starting broker could trip over. Raises
    :class:`LockFileError` when ``.lock`` exists but cannot be opened for reading, because
    "no" would be a guess. Locks held by the calling process itself are not seen (POSIX).
    """
    with _registry.mutex:
        return _probe_broker(os.fspath(log_dir))[0]


def _dir_identity(path: str) -> tuple[int, int]:
    """(st_dev, st_ino) of the partition directory; LockFileError if it is not one."""
    try:
        st = os.stat(path)
    except FileNotFoundError as exc:
        raise LockFileError(path, "the partition directory does not exist") from exc
    except OSError as exc:
        raise LockFileError(path, f"cannot stat the partition directory: {exc.strerror}") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise LockFileError(path, "not a directory")
    return st.st_dev, st.st_ino


class DirectoryLock:
    """Exclusive writer lock on one partition directory.

    ``acquire`` refuses (:class:`LockedError`) when a broker holds the parent log directory's
    ``.lock`` or another writer (another process, another thread or object in this process)
    holds ``<partition>/.kafkalog.lock``; otherwise it locks that file and records its pid in
    it so that the losers' error messages can say who is writing. The kernel drops the lock
    when the process dies, however it dies, so there is no stale-lock cleanup to do.

    Use it as a context manager::

        with DirectoryLock("/var/kafka-logs/orders-3"):
            ...  # append

    After ``os.fork`` the child does not hold the lock (fcntl locks are not inherited);
    ``locked`` is false there and ``release`` only closes the child's copy of the descriptor.
    """

    LOCK_NAME: ClassVar[str] = ".kafkalog.lock"

    def __init__(self, partition_dir: StrPath) -> None:
        self.partition_dir = os.fspath(partition_dir)
        self.lock_path = os.path.join(self.partition_dir, self.LOCK_NAME)
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None
        self._owner_pid = 0
        self._owner_thread = ""

    def __repr__(self) -> str:
        state = "locked" if self.locked else "unlocked"
        return f"<DirectoryLock {self.partition_dir!r} {state}>"

    @property
    def locked(self) -> bool:
        """True while this object holds the lock (in this process)."""
        return self._fd is not None and self._owner_pid == os.getpid()

    # -- taking and releasing ------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lock without waiting, or raise :class:`LockedError` naming the holder.

        Raises :class:`LockFileError` when the lock cannot be taken at all (missing or
        read-only directory, no fcntl locks on the file system).
        """
        registry = _registry
        with registry.mutex:
            if self.locked:
                raise LockedError(
                    self.partition_dir,
                    "this DirectoryLock already holds the lock",
                    holder_pid=os.getpid(),
                )
            key = _dir_identity(self.partition_dir)
            owner = registry.owners.get(key)
            if owner is not None:
                raise LockedError(
                    self.partition_dir,
                    f"locked by another kafkalog writer in this process (pid {os.getpid()}, "
                    f"thread {owner._owner_thread!r}, via {owner.partition_dir!r})",
                    holder_pid=os.getpid(),
                )
            # Before touching the partition: a refused writer leaves no trace in a broker's dir.
            self._refuse_if_broker()
            fd = self._open_lock_file()
            try:
                self._lock(fd)
            except BaseException:
                os.close(fd)  # safe: the registry says this process holds no lock on it
                raise
            self._record_pid(fd)
            self._fd = fd
            self._key = key
            self._owner_pid = os.getpid()
            self._owner_thread = threading.current_thread().name
            registry.owners[key] = self

    def release(self) -> None:
        """Release the lock; a no-op when not held. The file stays (see module docs): deleting
        it would let a third writer lock a fresh file while a second still holds the old one.
        """
        registry = _registry
        with registry.mutex:
            fd = self._fd
            if fd is None:
                return
            self._fd = None
            try:
                if self._owner_pid == os.getpid():
                    if self._key is not None and registry.owners.get(self._key) is self:
                        del registry.owners[self._key]
                    fcntl.lockf(fd, fcntl.LOCK_UN)
            finally:
                self._key = None
                os.close(fd)

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    # -- probing without taking ----------------------------------------------------------
    @staticmethod
    def holder(partition_dir: StrPath) -> int | None:
        """The pid of the process holding the partition's writer lock, or None.

        A read-only probe of ``.kafkalog.lock`` (never created, never written, read permission
        suffices). The pid comes from the kernel, or failing that from the file. None also when
        the lock is held but its holder cannot be named (only across pid namespaces, by a
        process that recorded no pid); :meth:`is_held` tells the two apart.
        """
        return DirectoryLock._probe_writer(os.fspath(partition_dir))[1]

    @staticmethod
    def is_held(partition_dir: StrPath) -> bool:
        """True when some process (this one included) holds the partition's writer lock."""
        return DirectoryLock._probe_writer(os.fspath(partition_dir))[0]

    @classmethod
    def _probe_writer(cls, partition_dir: str) -> tuple[bool, int | None]:
        registry = _registry
        with registry.mutex:
            try:
                st = os.stat(partition_dir)
            except (FileNotFoundError, NotADirectoryError):
                return False, None
            except OSError as exc:
                raise LockFileError(
                    partition_dir, f"cannot stat the partition directory: {exc.strerror}"
                ) from exc
            owner = registry.owners.get((st.st_dev, st.st_ino))
            if owner is not None:
                # Ours: must not open (and close) the file, which would drop our lock.
                return True, os.getpid()
            path = os.path.join(partition_dir, cls.LOCK_NAME)
            try:
                return _probe(path, pid_file=True)
            except (FileNotFoundError, NotADirectoryError):
                return False, None
            except OSError as exc:
                raise LockFileError(
                    partition_dir, f"cannot read the writer lock file {path}: {exc.strerror}"
                ) from exc

    # -- internals -----------------------------------------------------------------------
    def _refuse_if_broker(self) -> None:
        # The log directory root is the parent of the partition directory, both as given and
        # after resolving symlinks (a broker follows a symlinked partition directory).
        given = os.path.dirname(os.path.abspath(self.partition_dir))
        resolved = os.path.dirname(os.path.realpath(self.partition_dir))
        for log_dir in dict.fromkeys((given, resolved)):
            held, pid = _probe_broker(log_dir)
            if held:
                who = f"pid {pid}" if pid is not None else "pid unknown"
                raise LockedError(
                    self.partition_dir,
                    f"refusing to write: {_BROKER} is using the log directory {log_dir} "
                    f"({who} locks {os.path.join(log_dir, KAFKA_LOCK_NAME)}); stop the "
                    f"broker or work on a copy of the directory",
                    holder_pid=pid,
                    broker=True,
                )

    def _open_lock_file(self) -> int:
        """Open (creating) ``.kafkalog.lock`` for writing, with errors an operator can act on."""
        # NOFOLLOW: a planted symlink must not make us truncate some other file.
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
        flags |= os.O_NONBLOCK  # a FIFO planted under the name must not hang the open
        try:
            fd = os.open(self.lock_path, flags, 0o644)
        except OSError as exc:
            raise LockFileError(self.partition_dir, self._open_failure(exc)) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise LockFileError(
                    self.partition_dir, f"{self.lock_path} exists and is not a regular file"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_failure(self, exc: OSError) -> str:
        code = exc.errno
        if code in (errno.EACCES, errno.EPERM):
            if os.path.lexists(self.lock_path):
                return (
                    f"the writer lock file {self.lock_path} is not writable by this user "
                    f"({exc.strerror}); writing needs write permission, reading does not"
                )
            return (
                f"the partition directory is not writable by this user: cannot create "
                f"the writer lock file {self.LOCK_NAME} ({exc.strerror}); writing needs "
                f"write permission, reading does not"
            )
        if code == errno.EROFS:
            return "the partition directory is on a read-only file system; it can only be read"
        if code == errno.ELOOP:
            return f"{self.lock_path} is a symbolic link; refusing to follow it"
        if code == errno.ENOENT:
            return "the partition directory does not exist"
        return f"cannot open the writer lock file {self.lock_path}: {exc.strerror or exc}"

    def _lock(self, fd: int) -> None:
        """Exclusive non-blocking fcntl lock on ``fd``, or LockedError naming the holder."""
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in _LOCK_CONFLICT:
                _, pid = _test_lock(fd)
                if pid is None:
                    pid = _read_pid(fd)
                who = f"pid {pid}" if pid is not None else "pid unknown"
                raise LockedError(
                    self.partition_dir,
                    f"locked by another writer ({who}, lock file {self.lock_path})",
                    holder_pid=pid,
                ) from exc
            if exc.errno == errno.ENOLCK:
                raise LockFileError(
                    self.partition_dir,
                    "the file system does not support fcntl locks (an NFS mount without a "
                    "lock manager?); one writer per directory cannot be enforced there",
                ) from exc
            raise LockFileError(
                self.partition_dir, f"cannot lock {self.lock_path}: {exc.strerror or exc}"
            ) from exc

    @staticmethod
    def _record_pid(fd: int) -> None:
        """Write our pid into the lock file, for the error messages of the writers we refuse.

        Purely informative (the kernel lock is the lock), so a failure to record it (a full
        disk) does not give the lock back.
        """
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
