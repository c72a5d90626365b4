"""DescribeUserScramCredentials (API 50) and AlterUserScramCredentials (API 51), KIP-554.

An upsertion carries what Kafka's clients send: the salt, the iteration count and the salted
password (``Hi(password, salt, i)``, computed by the client), from which the server keeps the
stored and server keys (:mod:`kafkalog.server.scram`). Errors per user as Kafka answers them:
RESOURCE_NOT_FOUND, UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL, DUPLICATE_RESOURCE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkalog.server import errors as E
from kafkalog.server.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)

if TYPE_CHECKING:
    from kafkalog.server.broker_interface import BrokerInterface as Broker


async def describe_user_scram_credentials(
    broker: Broker, body: Any, version: int
) -> dict[str, Any]:
    users = broker.scram.users()
    everyone = not body.users  # null or empty: every user, as Kafka reads it
    wanted = list(users) if everyone else [u.name for u in body.users]
    results = []
    for name in sorted(users) if everyone else list(dict.fromkeys(wanted)):
        entry: dict[str, Any] = {"user": name, "error_code": E.NONE, "credential_infos": []}
        if wanted.count(name) > 1:
            entry.update(
                error_code=E.DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in "
                "a single request",
            )
        elif name not in users:
            entry.update(
                error_code=E.RESOURCE_NOT_FOUND,
                error_message="Attempt to describe a user credential that does not exist",
            )
        else:
            entry["credential_infos"] = [
                {"mechanism": MECHANISMS[m][1], "iterations": c.iterations}
                for m, c in sorted(users[name].items())
            ]
        results.append(entry)
    return {"error_code": E.NONE, "results": results}


async def alter_user_scram_credentials(broker: Broker, body: Any, version: int) -> dict[str, Any]:
    store = broker.scram
    existing = store.users()
    changes = [(d.name, int(d.mechanism), None) for d in body.deletions] + [
        (u.name, int(u.mechanism), u) for u in body.upsertions
    ]
    users = list(dict.fromkeys(name for name, _, _ in changes))
    failed: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, int]] = set()
    for name, mech, _ in changes:
        if (name, mech) in seen:
            failed.setdefault(
                name,
                (
                    E.DUPLICATE_RESOURCE,
                    "A user credential cannot be altered twice in the same request",
                ),
            )
        seen.add((name, mech))
    upserts: list[tuple[str, str, ScramCredential]] = []
    deletions: list[tuple[str, str]] = []
    for name, mech, upsert in changes:
        if name in failed:
            continue
        problem = _problem(name, mech, upsert, existing)
        if problem is not None:
            failed[name] = problem
            continue
        mechanism = MECHANISM_BY_TYPE[mech]
        if upsert is None:
            deletions.append((name, mechanism))
        else:
            credential = credential_from_salted(
                mechanism, bytes(upsert.salt), bytes(upsert.salted_password), int(upsert.iterations)
            )
            upserts.append((name, mechanism, credential))
    # a user's changes are applied together or not at all, as Kafka does per user
    upserts = [u for u in upserts if u[0] not in failed]
    deletions = [d for d in deletions if d[0] not in failed]
    if upserts or deletions:
        store.set_many(upserts, deletions)
    results = []
    for name in users:
        code, message = failed.get(name, (E.NONE, None))
        results.append({"user": name, "error_code": code, "error_message": message})
    return {"results": results}


def _problem(
    name: str, mech: int, upsert: Any, existing: dict[str, dict[str, ScramCredential]]
) -> tuple[int, str] | None:
    if not name:
        return E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    mechanism = MECHANISM_BY_TYPE.get(mech)
    if mechanism is None:
        return E.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {mech}"
    if upsert is None:
        if mechanism not in existing.get(name, {}):
            return (
                E.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        return None
    iterations = int(upsert.iterations)
    if iterations < MIN_ITERATIONS:
        return E.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: {iterations}"
    if iterations > MAX_ITERATIONS:
        return E.UNACCEPTABLE_CREDENTIAL, f"Too many iterations: {iterations}"
    if not upsert.salt or not upsert.salted_password:
        return E.UNACCEPTABLE_CREDENTIAL, "The salt and the salted password must not be empty"
    return None
