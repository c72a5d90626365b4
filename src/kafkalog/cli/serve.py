"""``kafkalog serve``: a single-node Kafka broker over a data directory, so unchanged Kafka
clients (librdkafka, kafka-python, aiokafka, the Java client) produce to it and consume from it.
Stops cleanly on SIGTERM or Ctrl-C: logs flushed, the directory marked cleanly shut down."""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import sys
from typing import Any

from kafkalog.cli.args import int_between


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a data directory to Kafka clients over Kafka's wire protocol",
        description=__doc__,
        epilog="examples:\n  kafkalog serve --data ./data\n"
        "  kafkalog serve --data ./data --listen 127.0.0.1:19092 --no-auto-create-topics",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="the data directory (created if missing)")
    p.add_argument(
        "--listen", default="127.0.0.1:9092", help="HOST:PORT to listen on (loopback by default)"
    )
    p.add_argument("--advertised-host", help="the host name clients are told to connect to")
    p.add_argument(
        "--node-id",
        type=int_between(0, 2**31 - 1),
        help="node.id: refused if the directory's meta.properties names another "
        "(default: the directory's, else 1)",
    )
    p.add_argument(
        "--cluster-id",
        help="the cluster id: refused if the directory's meta.properties names another "
        "(default: the directory's, else a new random one)",
    )
    p.add_argument(
        "--num-partitions", type=int_between(1), default=1, help="num.partitions for new topics"
    )
    p.add_argument(
        "--no-auto-create-topics",
        action="store_true",
        help="auto.create.topics.enable=false: unknown topics are not created on first use",
    )
    p.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config every new topic starts with (repeatable), e.g. retention.ms=3600000",
    )
    p.add_argument(
        "--group-initial-rebalance-delay-ms",
        type=int_between(0),
        default=3000,
        help="group.initial.rebalance.delay.ms",
    )
    p.add_argument(
        "--queued-max-request-bytes",
        type=int_between(-1),
        default=256 * 1024 * 1024,  # config.QUEUED_MAX_REQUEST_BYTES, without importing it
        help="queued.max.request.bytes: request bytes held in memory across connections "
        "(default 256 MiB; -1: unbounded, Kafka's default)",
    )
    p.add_argument(
        "--connections-max-idle-ms",
        type=int_between(0),
        default=600000,
        help="connections.max.idle.ms: close a connection silent this long (0: never)",
    )
    p.add_argument(
        "--max-connections",
        type=int_between(0),
        default=0,
        help="max.connections: close connections beyond this many (0: no limit)",
    )
    p.add_argument(
        "--max-connections-per-ip",
        type=int_between(0),
        default=0,
        help="max.connections.per.ip: close a client address's connections beyond this many "
        "(0: no limit)",
    )
    p.add_argument("--ssl-certfile", help="TLS: the server certificate chain (PEM)")
    p.add_argument("--ssl-keyfile", help="TLS: its private key (PEM)")
    p.add_argument(
        "--ssl-cafile", help="TLS: CA certificates clients must present one of (client auth)"
    )
    p.add_argument(
        "--sasl-plain-users",
        metavar="FILE",
        help="SASL/PLAIN: a file of user=password lines; clients must authenticate",
    )
    p.add_argument(
        "--sasl-scram",
        action="store_true",
        help="SASL/SCRAM-SHA-256 and -512: users from the data directory (kafkalog scram, or "
        "AlterUserScramCredentials); clients must authenticate",
    )
    p.add_argument(
        "--authorizer",
        action="store_true",
        help="enforce ACLs (CreateAcls/DescribeAcls/DeleteAcls, kept in the data directory) "
        "as Kafka's StandardAuthorizer does; principals are User:<SASL user> or User:ANONYMOUS",
    )
    p.add_argument(
        "--super-users",
        default="",
        metavar="PRINCIPALS",
        help="super.users: ';'-separated principals allowed everything, e.g. User:admin",
    )
    p.add_argument(
        "--allow-everyone-if-no-acl-found",
        action="store_true",
        help="allow.everyone.if.no.acl.found=true: a resource without ACLs is open to all "
        "(default: only super users, as Kafka)",
    )
    p.add_argument(
        "--allow-plaintext-non-loopback",
        action="store_true",
        help="listen on a non-loopback address without TLS or SASL (anyone reaching it can "
        "read and write every topic)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kafkalog.server import KafkaServer, ServerConfig, parse_listen
    from kafkalog.server.config import read_plain_users

    host, port = parse_listen(args.listen)
    defaults = {}
    for item in args.topic_config:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--topic-config takes KEY=VALUE, not {item!r}")
        defaults[key.strip()] = value.strip()
    config = ServerConfig(
        host=host,
        port=port,
        advertised_host=args.advertised_host,
        node_id=args.node_id,
        cluster_id=args.cluster_id,
        num_partitions=args.num_partitions,
        auto_create_topics_enable=not args.no_auto_create_topics,
        topic_defaults=defaults,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        queued_max_request_bytes=args.queued_max_request_bytes,
        connections_max_idle_ms=args.connections_max_idle_ms,
        max_connections=args.max_connections,
        max_connections_per_ip=args.max_connections_per_ip,
        allow_plaintext_non_loopback=args.allow_plaintext_non_loopback,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        ssl_cafile=args.ssl_cafile,
        sasl_plain_users=(
            read_plain_users(args.sasl_plain_users) if args.sasl_plain_users else None
        ),
        sasl_scram=args.sasl_scram,
        authorizer=args.authorizer,
        super_users=frozenset(u.strip() for u in args.super_users.split(";") if u.strip()),
        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
    )
    config.check_listener()
    os.makedirs(args.data, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    async def main() -> None:
        server = KafkaServer(args.data, config)
        try:
            await server.start()
        except OSError as e:
            if e.errno != errno.EADDRINUSE:
                raise
            raise OSError(
                f"cannot listen on {host}:{port}: the address is in use (another kafkalog "
                "serve, or a Kafka broker?); stop it, or choose another port with "
                f"--listen {host}:PORT",
            ) from None
        # the server's own INFO line says where it serves (one line, not two)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, done.set)
        try:
            await done.wait()
        finally:
            await server.stop()
            print("kafkalog: stopped cleanly", file=sys.stderr, flush=True)

    asyncio.run(main())
    return 0
