"""Read access to log directories on the local disk or behind any URI that ``pyarrow.fs``
resolves (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``, ``file://``).

Reading is all a reader does to a log directory -- list it, stat it, read byte ranges -- so
the read-only paths of the log, the indexes and the Spark source go through these few calls and
need not care where the files are.  A remote location is a plain string
(``s3://bucket/kafka-logs/orders-0/00000000000000000000.log``) so that ``os.path.join`` and
``basename`` keep working on it and it pickles into Spark tasks unchanged; the filesystem behind
it is resolved once per process from the URI the user gave (whose query string may carry
``endpoint_override``, ``region`` and the like) and looked up by prefix afterwards.

Local paths go straight to ``os`` (``pread`` on a file descriptor), as fast as before.  Writing
stays local-only: the writers need rename and exclusive locks, which object stores lack.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import threading
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from kafkalog.errors import ClosedError, KafkalogError

__all__ = [
    "HandleUsers",
    "ReadHandle",
    "RemoteLocationError",
    "exists",
    "getsize",
    "is_remote",
    "isdir",
    "listdir",
    "listed_sizes",
    "mtime_ms",
    "open_read",
    "read_bytes",
    "redacted",
    "resolve",
    "scandir",
]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


class RemoteLocationError(KafkalogError, OSError):
    """A URI that ``pyarrow.fs`` cannot resolve, a store that fails a request, or an operation
    a remote store cannot do (an ``OSError`` too, as the local equivalents are)."""


class ReadHandle(Protocol):
    """An open file read by position (``pread``), whatever stores it."""

    def size(self) -> int: ...

    def pread(self, length: int, position: int) -> bytes: ...

    def pread_into(self, buffer: memoryview, position: int) -> int:
        """Fill ``buffer`` from ``position`` on; the bytes read (fewer at the end of the file).
        A reader going through a file chunk by chunk reuses one buffer this way instead of
        faulting in fresh memory for every chunk."""
        ...

    def identity(self) -> tuple[int, int] | None: ...

    def close(self) -> None: ...


class _LocalHandle:
    __slots__ = ("fd",)

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        if stat.S_ISDIR(os.fstat(self.fd).st_mode):
            # opening a directory read-only succeeds; the first read would then fail with an
            # EISDIR that names no file
            os.close(self.fd)
            self.fd = -1
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def pread(self, length: int, position: int) -> bytes:
        return os.pread(self.fd, length, position) if length > 0 else b""

    def pread_into(self, buffer: memoryview, position: int) -> int:
        done = 0
        while done < len(buffer):  # a regular file returns short reads only at its end
            n = os.preadv(self.fd, [buffer[done:]], position + done)
            if n <= 0:
                break
            done += n
        return done

    def identity(self) -> tuple[int, int] | None:
        st = os.fstat(self.fd)
        return st.st_dev, st.st_ino

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _BorrowedHandle(_LocalHandle):
    """A descriptor someone else owns (an index's own write descriptor), read by position and
    left open by ``close``."""

    __slots__ = ()

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        pass


class HandleUsers:
    """Counts the reads in flight on a descriptor its owner may close from another thread.

    Why: closing a descriptor while another thread is about to ``pread`` it is worse than an
    error: the number is reused by the next ``open`` anywhere in the process, and the read then
    returns another file's bytes. A read enters (refused with :class:`ClosedError` once the
    owner closed) and leaves around each single call, never across a ``yield``; ``close`` marks
    the owner closed and waits for the reads in flight before the owner releases the
    descriptor. Two short lock round trips per read of at least a 64 KiB chunk.
    """

    __slots__ = ("_changed", "_users", "closed")

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._users = 0
        self.closed = False

    def enter(self, path: str) -> None:
        with self._changed:
            if self.closed:
                raise ClosedError(path)
            self._users += 1

    def leave(self) -> None:
        with self._changed:
            self._users -= 1
            if not self._users:
                self._changed.notify_all()

    def close(self) -> bool:
        """Refuse new reads and wait for those in flight; False if already closed."""
        with self._changed:
            if self.closed:
                return False
            self.closed = True
            while self._users:
                self._changed.wait()
            return True


def borrowed(fd: int) -> ReadHandle:
    """Read through an open descriptor without taking it over: reads see exactly what was
    written through it, and closing the handle leaves it open."""
    return _BorrowedHandle(fd)


def pread_into_by_copy(handle: ReadHandle, buffer: memoryview, position: int) -> int:
    """``pread_into`` for a handle that can only return new bytes (a store's API, a guarded
    descriptor): read, then copy into ``buffer``; returns the bytes read."""
    data = handle.pread(len(buffer), position)
    buffer[: len(data)] = data
    return len(data)


class _ArrowHandle:
    """A ``pyarrow`` random-access file; the size is re-read on demand so a tailing reader sees
    an object that was replaced by a longer one (stores that allow appends: HDFS, ABFS)."""

    __slots__ = ("_file", "_fs", "_opened_size", "_path", "_shown")

    def __init__(self, fs: Any, path: str, shown: str) -> None:
        self._fs = fs
        self._path = path
        self._shown = shown  # the kafkalog path, for messages
        self._file = fs.open_input_file(path)
        # opening learned the size (a HEAD on object stores): the first size() asked right
        # after opening needs no second request
        self._opened_size: int | None = int(self._file.size())

    def size(self) -> int:
        if self._opened_size is not None:
            size, self._opened_size = self._opened_size, None
            return size
        try:
            info = self._fs.get_file_info(self._path)
            return int(info.size) if info.size is not None else int(self._file.size())
        except OSError as e:
            raise RemoteLocationError(f"cannot stat {self._shown}: {e}") from e

    def pread(self, length: int, position: int) -> bytes:
        if length <= 0:
            return b""
        try:
            return bytes(self._file.read_at(length, position))
        except OSError as e:  # a store gone away mid-read: say which file and where
            raise RemoteLocationError(
                f"cannot read {length} bytes at byte {position} of {self._shown}: {e}"
            ) from e

    def pread_into(self, buffer: memoryview, position: int) -> int:
        return pread_into_by_copy(self, buffer, position)

    def identity(self) -> tuple[int, int] | None:
        return None  # object stores replace objects whole; nothing stable to compare

    def close(self) -> None:
        self._file.close()


# -- remote locations ------------------------------------------------------------------------
_lock = threading.Lock()
#: canonical prefix ("s3://bucket/dir") -> (filesystem, path of that prefix in the filesystem)
_roots: dict[str, tuple[Any, str]] = {}
#: URI as given -> canonical prefix (resolving builds a client: once per process is enough)
_resolved: dict[str, str] = {}


def identity(path: str) -> tuple[int, int] | None:
    """Which file ``path`` is now (device, inode), so a reader can tell later whether it was
    replaced by another file of the same name (Kafka's log cleaner swaps segments in); None
    for remote stores."""
    if is_remote(path):
        return None
    st = os.stat(path)
    return st.st_dev, st.st_ino


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URI of a store other than the local disk."""
    match = _SCHEME.match(os.fspath(path))
    return match is not None and match.group(1).lower() != "file"


def redacted(location: str) -> str:
    """``location`` with any password in it replaced, for messages."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.\-]*://)[^/@]*@", r"\1***@", location)


def resolve(location: str) -> str:
    """The path every other call here takes for ``location``: an absolute local path for a
    plain path or ``file://`` URI, else the URI without its query string, with its filesystem
    registered for this process. Raises :class:`RemoteLocationError` when ``pyarrow.fs``
    cannot resolve it."""
    match = _SCHEME.match(location)
    if match is None:
        return os.path.abspath(location)
    with _lock:
        known = _resolved.get(location)
    if known is not None:
        return known
    parts = urlsplit(location)
    host = parts.netloc.rpartition("@")[2]  # credentials stay in the registered filesystem
    canonical = f"{parts.scheme.lower()}://{host}{unquote(parts.path)}".rstrip("/")
    if not parts.query and host == parts.netloc and _registered(canonical) is not None:
        return canonical  # already under a store resolved with its settings: keep those
    from pyarrow import fs as pafs

    try:
        filesystem, inner = pafs.FileSystem.from_uri(location)
    except (ValueError, OSError, TypeError) as e:
        shown = redacted(location)
        raise RemoteLocationError(
            f"{shown!r} is not a location pyarrow.fs resolves: {e}".replace(location, shown)
        ) from None
    if match.group(1).lower() == "file":
        if not isinstance(filesystem, pafs.LocalFileSystem):  # pragma: no cover - pyarrow's rule
            raise RemoteLocationError(f"{location!r} does not name a local file")
        return os.path.abspath(str(inner))
    with _lock:
        _roots[canonical] = (filesystem, str(inner).rstrip("/"))
        _resolved[location] = canonical
    return canonical


def _registered(path: str) -> tuple[Any, str] | None:
    """The filesystem and inner path of ``path`` under the longest registered prefix, else in
    the same store (scheme and bucket or host) as a registered location: a partition's data
    directory (its ``log-start-offset-checkpoint``) lies above the location the user named, and
    must be read with that location's endpoint and credentials, not the defaults (which would
    ask the public cloud, and wait for its time-out where there is none)."""
    with _lock:
        candidates = [r for r in _roots if path == r or path.startswith(r + "/")]
        if candidates:
            root = max(candidates, key=len)
            filesystem, inner = _roots[root]
            return filesystem, inner + path[len(root) :]
        wanted = urlsplit(path)
        for root, (filesystem, inner) in _roots.items():
            known = urlsplit(root)
            if (known.scheme, known.netloc) != (wanted.scheme, wanted.netloc):
                continue
            # the store's inner paths end with the location's path (s3: "bucket" + "/key")
            if known.path and inner.endswith(known.path):
                return filesystem, inner[: len(inner) - len(known.path)] + wanted.path
        return None


def _remote(path: str) -> tuple[Any, str]:
    """Where ``path`` is: under a registered prefix, else resolved as it stands (default
    credentials and settings)."""
    found = _registered(path.rstrip("/"))
    if found is None:
        found = _registered(resolve(path))
    if found is None:  # pragma: no cover - resolve registers what it returns
        raise RemoteLocationError(f"no filesystem for {redacted(path)}")
    return found


def _info(path: str) -> Any:
    filesystem, inner = _remote(path)
    try:
        return filesystem.get_file_info(inner)
    except OSError as e:
        raise RemoteLocationError(f"cannot stat {path}: {e}") from e


def _file_info(path: str) -> Any:
    """``_info`` of something that must be there (``FileNotFoundError`` otherwise)."""
    from pyarrow import fs as pafs

    info = _info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"no file {path}")
    return info


# -- the calls ---------------------------------------------------------------------------------
def open_read(path: str) -> ReadHandle:
    """Open ``path`` for positional reads; ``FileNotFoundError`` when it is not there."""
    if not is_remote(path):
        return _LocalHandle(path)
    filesystem, inner = _remote(path)
    try:
        return _ArrowHandle(filesystem, inner, path)
    except FileNotFoundError:
        raise
    except OSError as e:
        if not exists(path):
            raise FileNotFoundError(f"no file {path}") from e
        raise RemoteLocationError(f"cannot open {path}: {e}") from e


def read_bytes(path: str, limit: int | None = None) -> bytes:
    """The whole file (or its first ``limit`` bytes)."""
    handle = open_read(path)
    try:
        size = handle.size()
        return handle.pread(size if limit is None else min(size, limit), 0)
    finally:
        handle.close()


def listdir(path: str) -> list[str]:
    """Names in a directory (``FileNotFoundError`` when there is none)."""
    if not is_remote(path):
        return os.listdir(path)
    return [name for name, _ in scandir(path)]


def _listing(path: str) -> list[Any]:
    """The ``FileInfo`` of every entry of a remote directory (one request per page)."""
    from pyarrow import fs as pafs

    filesystem, inner = _remote(path)
    try:
        return list(filesystem.get_file_info(pafs.FileSelector(inner, recursive=False)))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise RemoteLocationError(f"cannot list {path}: {e}") from e


def scandir(path: str) -> list[tuple[str, bool]]:
    """``(name, is a directory)`` for each entry, in one listing (one request on a store)."""
    if not is_remote(path):
        with os.scandir(path) as entries:
            return [(e.name, e.is_dir()) for e in entries]
    from pyarrow import fs as pafs

    infos = _listing(path)
    return [(info.base_name, info.type == pafs.FileType.Directory) for info in infos]


def listed_sizes(path: str) -> dict[str, int] | None:
    """Name -> size of every file in a remote directory from its one listing (object stores
    return sizes with names); ``None`` for a local directory, whose files are cheap to open."""
    if not is_remote(path):
        return None
    from pyarrow import fs as pafs

    infos = _listing(path)
    return {i.base_name: int(i.size or 0) for i in infos if i.type == pafs.FileType.File}


def isdir(path: str) -> bool:
    if not is_remote(path):
        return os.path.isdir(path)
    from pyarrow import fs as pafs

    return bool(_info(path).type == pafs.FileType.Directory)


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    from pyarrow import fs as pafs

    return bool(_info(path).type != pafs.FileType.NotFound)


def getsize(path: str) -> int:
    if not is_remote(path):
        return os.path.getsize(path)
    return int(_file_info(path).size or 0)


def mtime_ms(path: str) -> int:
    """Last modification in epoch milliseconds (Kafka's fallback segment timestamp); 0 when a
    store keeps none."""
    if not is_remote(path):
        return int(os.stat(path).st_mtime_ns // 1_000_000)
    info = _file_info(path)
    return 0 if info.mtime_ns is None else int(info.mtime_ns // 1_000_000)


def fsync_dir(directory: str) -> None:
    """Make a rename or unlink inside the local ``directory`` durable (Kafka's
    ``Utils.flushDir``): without it a power loss after ``os.replace`` can bring the old file
    back. Windows cannot open directories, and has no need to."""
    if os.name == "nt":  # pragma: no cover - not exercised on POSIX CI
        return
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
