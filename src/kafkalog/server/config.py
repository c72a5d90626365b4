"""The broker settings ``kafkalog serve`` takes, under the names Kafka gives them."""

from __future__ import annotations

import ipaddress
import socket
import ssl
from dataclasses import dataclass, field

from kafkalog.errors import KafkalogError

#: Kafka's ``socket.request.max.bytes`` default: a request frame larger than this closes the
#: connection before a byte of it is buffered.
SOCKET_REQUEST_MAX_BYTES = 100 * 1024 * 1024

#: ``queued.max.request.bytes``: Kafka's default is -1 (unbounded); kafkalog bounds the request
#: bytes held in memory across connections to 256 MiB, room for two requests of the largest size.
QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024


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
    #: node.id; None: the data directory's (``meta.properties``), else 1. A configured id the
    #: directory contradicts is refused, as Kafka refuses it.
    node_id: int | None = None
    #: the cluster id; None: the data directory's, else a new random one written there
    cluster_id: str | None = None
    auto_create_topics_enable: bool = True  # auto.create.topics.enable
    num_partitions: int = 1  # num.partitions
    offsets_topic_num_partitions: int = 50  # offsets.topic.num.partitions
    offsets_topic_segment_bytes: int = 104857600  # offsets.topic.segment.bytes
    transaction_state_num_partitions: int = 50  # transaction.state.log.num.partitions
    group_initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = 6000 // 10  # group.min.session.timeout.ms (lowered)
    group_max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    socket_request_max_bytes: int = SOCKET_REQUEST_MAX_BYTES  # socket.request.max.bytes
    queued_max_request_bytes: int = QUEUED_MAX_REQUEST_BYTES  # queued.max.request.bytes (<=0: none)
    connections_max_idle_ms: int = 600000  # connections.max.idle.ms (<= 0: never closed)
    max_connections: int = 0  # max.connections (<= 0: no limit, as Kafka's Int.MaxValue)
    max_connections_per_ip: int = 0  # max.connections.per.ip (<= 0: no limit)
    topic_defaults: dict[str, str] = field(default_factory=dict)
    log_retention_check_interval_ms: int = 300000  # log.retention.check.interval.ms
    producer_id_expiration_ms: int = 86400000  # producer.id.expiration.ms
    producer_id_expiration_check_interval_ms: int = 600000  # ...expiration.check.interval.ms
    log_flush_offset_checkpoint_interval_ms: int = 60000  # log.flush.offset.checkpoint.interval.ms
    #: replica.high.watermark.checkpoint.interval.ms: the replication-offset-checkpoint's
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    log_cleaner_enable: bool = True  # log.cleaner.enable
    log_cleaner_backoff_ms: int = 15000  # log.cleaner.backoff.ms
    log_cleaner_dedupe_buffer_size: int = 32 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
    allow_plaintext_non_loopback: bool = False
    advertised_host: str | None = None  # advertised.listeners' host
    ssl_certfile: str | None = None  # ssl.keystore: the server's certificate chain (PEM)
    ssl_keyfile: str | None = None  # its private key (PEM)
    ssl_cafile: str | None = None  # ssl.truststore: with it, clients must present a certificate
    sasl_plain_users: dict[str, str] | None = None  # SASL/PLAIN user -> password
    # SCRAM-SHA-256 and SCRAM-SHA-512 (sasl.enabled.mechanisms), the credentials in the data
    # directory (kafkalog.server.scram.CREDENTIALS_FILE)
    sasl_scram: bool = False
    # connection.failed.authentication.delay.ms: a failed login's answer is sent, then the
    # connection is closed this much later, so the client reads the error before the close
    connection_failed_authentication_delay_ms: int = 100
    # authorizer.class.name: ACLs (kafkalog.server.acls) are enforced only when this is on
    authorizer: bool = False
    super_users: frozenset[str] = frozenset()  # super.users: principals such as "User:admin"
    allow_everyone_if_no_acl_found: bool = False  # allow.everyone.if.no.acl.found

    @property
    def sasl_enabled(self) -> bool:
        """Whether clients must authenticate (a SASL_* listener)."""
        return self.sasl_plain_users is not None or self.sasl_scram

    @property
    def sasl_mechanisms(self) -> list[str]:
        """sasl.enabled.mechanisms, as SaslHandshake lists them."""
        plain = ["PLAIN"] if self.sasl_plain_users is not None else []
        return plain + (["SCRAM-SHA-256", "SCRAM-SHA-512"] if self.sasl_scram else [])

    @property
    def security_protocol(self) -> str:
        """The listener's ``security.protocol``, as Kafka names it."""
        tls = self.ssl_certfile is not None
        sasl = self.sasl_enabled
        return {
            (False, False): "PLAINTEXT",
            (True, False): "SSL",
            (False, True): "SASL_PLAINTEXT",
            (True, True): "SASL_SSL",
        }[(tls, sasl)]

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.ssl_certfile is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        if self.ssl_cafile is not None:  # ssl.client.auth=required
            context.load_verify_locations(self.ssl_cafile)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def check_listener(self) -> None:
        """Refuse a listener other machines could reach without TLS or SASL, unless allowed."""
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise ListenerRefusedError("a TLS key without a certificate (--ssl-certfile)")
        if self.security_protocol != "PLAINTEXT":
            return
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


def read_plain_users(path: str) -> dict[str, str]:
    """SASL/PLAIN users from a file of ``user=password`` lines (Java properties syntax: ``#``
    comments, blank lines skipped), as a JAAS ``PlainLoginModule``'s ``user_<name>`` options
    would list them."""
    users: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith(("#", "!")):
                continue
            name, sep, password = text.partition("=")
            if not sep or not name.strip():
                raise KafkalogError(f"{path} line {number}: expected user=password")
            users[name.strip()] = password.strip()
    if not users:
        raise KafkalogError(f"{path}: no SASL/PLAIN users")
    return users


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9092`` for IPv6) as ``--listen`` takes it."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        example = f"127.0.0.1:{text}" if text.isdigit() else "127.0.0.1:9092"
        raise ValueError(f"--listen takes HOST:PORT, not {text!r}: e.g. --listen {example}")
    return host.strip("[]") or "127.0.0.1", int(port)
