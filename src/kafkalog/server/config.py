"""The broker settings ``kafkalog serve`` takes, under the names Kafka gives them."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field

from kafkalog.errors import KafkalogError

#: Kafka's ``socket.request.max.bytes`` default: a request frame larger than this closes the
#: connection before a byte of it is buffered.
SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024


class ListenerRefusedError(KafkalogError):
    """A listener the safety rules refuse (plaintext on a non-loopback address)."""


@dataclass
class ServerConfig:
    """Broker-level settings (Kafka's property names in the comments).

    ``topic_defaults`` are topic configs (``retention.ms``, ``message.timestamp.type``...) every
    topic created through this server starts with, before the creator's own overrides.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    node_id: int = 1  # node.id
    cluster_id: str = "kafkalog-cluster"
    auto_create_topics_enable: bool = True  # auto.create.topics.enable
    num_partitions: int = 1  # num.partitions
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    transaction_state_num_partitions: int = 50  # transaction.state.log.num.partitions
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6000 // 10  # group.min.session.timeout.ms (lowered)
    group_max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    socket_request_max_bytes: int = SOCKET_REQUEST_MAX_BYTES  # socket.request.max.bytes
    topic_defaults: dict[str, str] = field(default_factory=dict)
    allow_plaintext_non_loopback: bool = False
    advertised_host: str | None = None  # advertised.listeners' host

    def check_listener(self) -> None:
        """Refuse a plaintext listener that other machines could reach (no TLS or SASL yet)."""
        if self.allow_plaintext_non_loopback or _is_loopback(self.host):
            return
        raise ListenerRefusedError(
            f"refusing to listen on {self.host}:{self.port} without TLS or SASL: every client "
            "that can reach it could read and write every topic (pass "
            "--allow-plaintext-non-loopback to do it anyway)"
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9092`` for IPv6) as ``--listen`` takes it."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen takes HOST:PORT, not {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)
