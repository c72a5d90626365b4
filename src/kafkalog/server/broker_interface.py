"""What the request handlers of ``admin`` and ``data`` use of the broker, as a Protocol.

``broker`` builds its request table from those handlers, so they cannot import its ``Broker``
class to name their argument's type, not even for the type checker alone: the modules would
depend on each other. They name this instead (imported as ``Broker``); ``Broker`` satisfies it
without naming it, and mypy checks that it does where ``broker`` builds ``HANDLERS``.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from kafkalog.log import Log
from kafkalog.server.acls import Authorizer
from kafkalog.server.config import ServerConfig
from kafkalog.server.scram import ScramStore
from kafkalog.server.topics import TopicRegistry


class BrokerInterface(Protocol):
    config: ServerConfig
    registry: TopicRegistry
    scram: ScramStore
    authorizer: Authorizer | None
    advertised: tuple[str, int]

    def append_waiter(self) -> asyncio.Event: ...

    def appended(self) -> None: ...

    def last_stable_offset(self, log: Log) -> int: ...

    def forget_topic(self, name: str) -> None: ...
