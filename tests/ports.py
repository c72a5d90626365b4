"""Ports for test servers that must know their port before they start."""

from __future__ import annotations

import random
import socket

#: below the kernel's ephemeral range (Linux: 32768-60999), which a port-0 bind or a client's
#: connection draws from
_LOW, _HIGH = 20000, 32000


def fixed_free_port() -> int:
    """A free loopback port for a server that must be given its port in advance (one that is
    restarted on the same port, or whose port goes into another process's arguments). A port
    from a port-0 bind, released and bound again later, could meanwhile go to another test's
    port-0 server on the other worker (a client then talks to the wrong server: the fresh-clone
    CI run saw a commit answered UNKNOWN_TOPIC_OR_PART); outside the ephemeral range no port-0
    bind takes it."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(_LOW, _HIGH)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_LOW}..{_HIGH}")
