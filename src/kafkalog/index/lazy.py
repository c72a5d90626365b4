"""Indexes held as paths until first use (Kafka's LazyIndex, spec §2.6).

Opening a data directory with thousands of partitions must not map thousands of files: a
segment keeps a :class:`LazyIndex` and the file is opened (and, when writable and missing,
created) only when something reads or appends to it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Generic, TypeVar

from kafkalog.errors import unreadable_file
from kafkalog.index.base import DEFAULT_MAX_INDEX_SIZE, REBUILT_FROM_THE_LOG, MappedIndex

T = TypeVar("T", bound=MappedIndex)


class LazyIndex(Generic[T]):
    """A path that becomes an index of type ``kind`` on the first :meth:`get`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        kind: type[T],
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
    ) -> None:
        self._path = os.fspath(path)
        self.base_offset = base_offset
        self.kind = kind
        self.max_index_size = max_index_size
        self.writable = writable
        # the index once get() has opened it, else None: read (never assigned) by a caller that
        # must not open the file, as an append's fast path (a plain attribute: it runs per call)
        self.loaded: T | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        return self.loaded.path if self.loaded is not None else self._path

    @property
    def is_loaded(self) -> bool:
        return self.loaded is not None

    def get(self) -> T:
        """The index, opened on first call (double-checked, thread-safe)."""
        index = self.loaded
        if index is None:
            with self._lock:
                index = self.loaded
                if index is None:
                    try:
                        index = self.kind(
                            self._path, self.base_offset, self.max_index_size, self.writable
                        )
                    except (IsADirectoryError, PermissionError) as e:
                        # an OSError naming no byte would reach every reader as a crash
                        raise unreadable_file(
                            os.fspath(self._path), e.strerror, then=REBUILT_FROM_THE_LOG
                        ) from e
                    self.loaded = index
        return index

    def update_parent_dir(self, directory: str | os.PathLike[str]) -> None:
        """Only the in-memory path changes (the directory itself was moved)."""
        name = os.path.basename(self.path)
        self._path = os.path.join(os.fspath(directory), name)
        if self.loaded is not None:
            self.loaded._path = self._path

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Move the file if it exists (a never-materialised index may have none)."""
        target = os.fspath(new_path)
        if self.loaded is not None:
            self.loaded.rename_to(target)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.replace(self._path, target)
        self._path = target

    def delete_if_exists(self) -> bool:
        if self.loaded is not None:
            return self.loaded.delete_if_exists()
        try:
            os.remove(self._path)
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        if self.loaded is not None:
            self.loaded.close()

    def close_handler(self) -> None:
        if self.loaded is not None:
            self.loaded.close_handler()

    def __repr__(self) -> str:
        state = "loaded" if self.loaded is not None else "not loaded"
        return f"LazyIndex({self.kind.__name__}, {self.path!r}, {state})"
