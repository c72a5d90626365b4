"""The broker's resource limits on connections and requests, as Kafka names them.

``queued.max.request.bytes`` bounds the sum of the request frames read into memory and not yet
answered, across every connection (Kafka's ``MemoryPool`` for the network receive buffers): a
connection whose next request does not fit stops reading, leaving the bytes in the kernel (and
the client's TCP window), until answers free room. One request is always let in when nothing is
held, so a bound below ``socket.request.max.bytes`` slows clients down but never deadlocks them.

``max.connections`` and ``max.connections.per.ip`` refuse a connection beyond them by closing it
at once, as Kafka's acceptor does for the per-IP limit.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque


class RequestMemory:
    """Bytes of requests held by the server, bounded by ``queued.max.request.bytes``.

    :attr:`held` is what is held now, :attr:`peak` the most ever held, :attr:`waits` how many
    times a connection had to wait for room: counters a test or an operator can read.
    """

    def __init__(self, bound: int) -> None:
        self.bound = bound  # <= 0: unbounded (Kafka's -1)
        self.held = 0
        self.peak = 0
        self.waits = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int) -> bool:
        return self.bound <= 0 or self.held == 0 or self.held + size <= self.bound

    def _take(self, size: int) -> None:
        self.held += size
        self.peak = max(self.peak, self.held)

    async def acquire(self, size: int) -> None:
        """Wait until ``size`` more bytes fit; first come, first served."""
        if not self._queue and self._fits(size):
            self._take(size)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._queue.append(entry)
        self.waits += 1
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(size)  # granted while the connection was being closed
            else:
                self._queue.remove(entry)
                self._grant()
            raise

    def release(self, size: int) -> None:
        self.held -= size
        self._grant()

    def _grant(self) -> None:
        while self._queue and self._fits(self._queue[0][0]):
            size, future = self._queue.popleft()
            self._take(size)
            future.set_result(None)


class ConnectionCount:
    """Open connections, in all and per client address, against ``max.connections`` and
    ``max.connections.per.ip`` (<= 0: no limit)."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.by_ip: Counter[str] = Counter()

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``, or say which limit refuses it."""
        if 0 < self.max_connections <= self.total:
            return f"max.connections ({self.max_connections}) reached"
        if 0 < self.max_per_ip <= self.by_ip[ip]:
            return f"max.connections.per.ip ({self.max_per_ip}) reached for {ip}"
        self.total += 1
        self.by_ip[ip] += 1
        return None

    def leave(self, ip: str) -> None:
        self.total -= 1
        self.by_ip[ip] -= 1
        if self.by_ip[ip] <= 0:
            del self.by_ip[ip]
