"""``kafkalog scram``: SCRAM users of a data directory that ``kafkalog serve --sasl-scram``
authenticates (SCRAM-SHA-256 / SCRAM-SHA-512). Only the salt, the iteration count and the
derived keys are stored, never the password. A running server sees a change at the next login;
clients can also manage users with AlterUserScramCredentials (e.g. confluent-kafka's
``AdminClient.alter_user_scram_credentials``)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from kafkalog.cli.args import int_between

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "scram",
        help="add, delete or list the SCRAM users kafkalog serve authenticates",
        description=__doc__,
        epilog="examples:\n"
        "  kafkalog scram --data ./data --add alice --password-stdin\n"
        "  kafkalog scram --data ./data --add bob --mechanism SCRAM-SHA-512 --iterations 8192\n"
        "  kafkalog scram --data ./data --delete alice\n"
        "  kafkalog scram --data ./data --list",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data", required=True, help="the data directory kafkalog serve uses")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--add", metavar="USER", help="add a user or change its password")
    what.add_argument("--delete", metavar="USER", help="delete a user's credentials")
    what.add_argument("--list", action="store_true", help="list users and their mechanisms")
    p.add_argument(
        "--mechanism",
        choices=(*MECHANISMS, "both"),
        default="both",
        help="which mechanism(s) to add or delete (default: both)",
    )
    p.add_argument(
        "--iterations",
        type=int_between(4096, 16384),
        default=8192,
        help="PBKDF2 iterations, 4096..16384 as Kafka allows (default 8192)",
    )
    p.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input (else it is prompted)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from kafkalog.server.scram import ScramStore, credential_from_password

    os.makedirs(args.data, exist_ok=True)
    store = ScramStore(args.data)
    mechanisms = MECHANISMS if args.mechanism == "both" else (args.mechanism,)
    if args.list:
        for user, creds in sorted(store.users().items()):
            described = ", ".join(f"{m} ({c.iterations} iterations)" for m, c in creds.items())
            print(f"{user}: {described}")
        return 0
    if args.delete is not None:
        gone = [m for m in mechanisms if store.delete(args.delete, m)]
        if not gone:
            print(f"kafkalog scram: no credentials for {args.delete!r}", file=sys.stderr)
            return 1
        print(f"deleted {args.delete}: {', '.join(gone)}")
        return 0
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.add}: ")
    if not password:
        print("kafkalog scram: an empty password", file=sys.stderr)
        return 2
    store.set_many(
        [(args.add, m, credential_from_password(m, password, args.iterations)) for m in mechanisms],
        [],
    )
    print(f"added {args.add}: {', '.join(mechanisms)} ({args.iterations} iterations)")
    return 0
