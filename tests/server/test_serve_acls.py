"""ACLs (CreateAcls / DescribeAcls / DeleteAcls) and their enforcement, with confluent-kafka
and kafka-python unchanged: Kafka's decision rules (deny wins, implied operations, wildcard and
prefixed patterns, super users, allow.everyone.if.no.acl.found), Kafka's error codes per API,
ACLs kept across a restart, and no authorizer unless one is configured."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from test_serve_security import _exchange

from kafka_clients import LOOPBACK_SAN, config, consumer_settings, rdkafka, self_signed
from kafkalog.server import ServerThread
from kafkalog.server import acls as A
from kafkalog.server.acls import AclBinding as Binding
from kafkalog.server.acls import Authorizer

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}


def secured(**extra: Any) -> Any:
    settings: dict[str, Any] = {
        "sasl_plain_users": USERS,
        "authorizer": True,
        "super_users": frozenset({"User:admin"}),
    }
    settings.update(extra)
    return config(**settings)


def login(user: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def allow(
    name: str,
    user: str,
    operation: AclOperation,
    restype: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(restype, name, pattern, f"User:{user}", "*", operation, permission)


def admin_of(bootstrap: str, user: str = "admin") -> AdminClient:
    return AdminClient(rdkafka(bootstrap, **login(user)))


def create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for future in admin.create_acls(bindings).values():
        future.result(10)


def produce_error(bootstrap: str, user: str, topic: str, **extra: Any) -> Any:
    """The delivery error of one record (None when it was written)."""
    producer = Producer(rdkafka(bootstrap, **login(user), **{"message.timeout.ms": 5000, **extra}))
    reports: list[Any] = []
    producer.produce(topic, b"v", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    assert len(reports) == 1
    return reports[0].code() if reports[0] is not None else None


def consume(bootstrap: str, user: str, topic: str, group: str) -> tuple[Any, list[bytes]]:
    """The first error a group consumer reports, or the records it read."""
    consumer = Consumer(consumer_settings(bootstrap, group, **login(user)))
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None:
                if got:
                    break
                continue
            if msg.error() is not None:
                return msg.error().code(), got
            got.append(msg.value())
    finally:
        consumer.close()
    return None, got


def make_topic(bootstrap: str, name: str) -> None:
    admin = admin_of(bootstrap)
    admin.create_topics([NewTopic(name, 1)])[name].result(10)


# -- the decision ---------------------------------------------------------------------------------


def test_decision_rules(tmp_path: Path) -> None:
    auth = Authorizer(str(tmp_path), super_users=frozenset({"User:root"}))
    alice, bob = "User:alice", "User:bob"

    def ok(who: str, op: int, name: str, kind: int = A.TOPIC, host: str = "10.0.0.1") -> bool:
        return auth.authorize(who, host, op, kind, name)

    assert not ok(alice, A.READ, "t")  # no ACL: only super users
    assert ok("User:root", A.ALTER, "anything", A.CLUSTER)
    auth.add(
        [
            Binding(A.TOPIC, "t", A.LITERAL, alice, "*", A.READ, A.ALLOW),
            Binding(A.TOPIC, "sales-", A.PREFIXED, "User:*", "*", A.WRITE, A.ALLOW),
            Binding(A.TOPIC, "sales-secret", A.LITERAL, bob, "*", A.ALL, A.DENY),
            Binding(A.TOPIC, "*", A.LITERAL, bob, "10.0.0.9", A.DESCRIBE, A.ALLOW),
            Binding(A.TOPIC, "cfg", A.LITERAL, alice, "*", A.ALTER_CONFIGS, A.ALLOW),
            Binding(A.TOPIC, "cfg", A.LITERAL, bob, "*", A.READ, A.DENY),
            Binding(A.TOPIC, "cfg", A.LITERAL, bob, "*", A.READ, A.ALLOW),
            Binding(A.GROUP, "g", A.LITERAL, alice, "10.0.0.1", A.READ, A.ALLOW),
        ]
    )
    assert ok(alice, A.READ, "t") and ok(alice, A.DESCRIBE, "t")  # READ implies DESCRIBE
    assert not ok(alice, A.WRITE, "t") and not ok(bob, A.READ, "t")
    assert ok(bob, A.WRITE, "sales-eu") and ok(alice, A.DESCRIBE, "sales-eu")  # prefix, User:*
    assert not ok(bob, A.WRITE, "sales-secret")  # DENY ALL wins over the prefixed ALLOW
    assert ok(alice, A.WRITE, "sales-secret")
    assert not ok(bob, A.DESCRIBE, "t") and ok(bob, A.DESCRIBE, "t", host="10.0.0.9")
    assert ok(alice, A.DESCRIBE_CONFIGS, "cfg") and not ok(alice, A.DESCRIBE, "cfg")
    assert not ok(bob, A.READ, "cfg")  # deny wins over the same allow
    assert ok(bob, A.DESCRIBE, "cfg", host="10.0.0.9")  # a DENY READ does not deny DESCRIBE
    assert ok(alice, A.READ, "g", A.GROUP) and not ok(alice, A.READ, "g", A.GROUP, "10.0.0.2")
    assert not ok(alice, A.READ, "other")  # bob's ACL on "*" applies to it: not alice's
    open_auth = Authorizer(str(tmp_path), allow_if_no_acl=True)
    assert not open_auth.authorize(alice, "h", A.READ, A.TOPIC, "other")  # "*" applies
    assert open_auth.authorize(alice, "h", A.READ, A.GROUP, "no-acls-here")
    assert not open_auth.authorize(bob, "h", A.WRITE, A.TOPIC, "t")  # t has ACLs: not open
    assert open_auth.authorize_any(bob, "h", A.WRITE, A.TOPIC)  # sales- allows User:*
    # the file is the store: a new Authorizer reads the same ACLs
    assert len(Authorizer(str(tmp_path)).acls) == 8


def test_filters_match_as_kafka(tmp_path: Path) -> None:
    auth = Authorizer(str(tmp_path))
    lit = Binding(A.TOPIC, "orders", A.LITERAL, "User:a", "*", A.READ, A.ALLOW)
    star = Binding(A.TOPIC, "*", A.LITERAL, "User:b", "*", A.READ, A.ALLOW)
    pre = Binding(A.TOPIC, "ord", A.PREFIXED, "User:c", "*", A.WRITE, A.DENY)
    other = Binding(A.GROUP, "orders", A.LITERAL, "User:a", "*", A.READ, A.ALLOW)
    auth.add([lit, star, pre, other, lit])
    assert auth.acls == [lit, star, pre, other]  # a binding is stored once

    def f(rtype: int, name: str | None, pattern: int, **kw: Any) -> A.AclFilter:
        return A.AclFilter(
            rtype,
            name,
            pattern,
            kw.get("principal"),
            kw.get("host"),
            kw.get("operation", A.ANY),
            kw.get("permission", A.ANY),
        )

    def found(flt: A.AclFilter) -> list[Binding]:
        return [a for a in auth.acls if flt.matches(a)]

    assert found(f(A.TOPIC, "orders", A.MATCH)) == [lit, star, pre]
    assert found(f(A.TOPIC, "orders", A.LITERAL)) == [lit]
    assert found(f(A.ANY, "orders", A.ANY)) == [lit, other]
    assert found(f(A.ANY, None, A.ANY, permission=A.DENY)) == [pre]
    assert found(f(A.TOPIC, None, A.PREFIXED)) == [pre]
    assert found(f(A.ANY, None, A.ANY, principal="User:a", operation=A.READ)) == [lit, other]
    assert auth.remove([f(A.TOPIC, "orders", A.MATCH, principal="User:b")]) == [[star]]
    assert Authorizer(str(tmp_path)).acls == [lit, pre, other]


# -- enforcement with real clients ---------------------------------------------------------------


def test_acl_apis_and_enforcement(data_dir: Path) -> None:
    with ServerThread(str(data_dir), secured()) as server:
        boot = server.bootstrap
        make_topic(boot, "orders")  # the super user may create
        # no ACL on the topic: alice cannot write it; bob, without READ on the group, is
        # refused at the group (its coordinator lookup), then, with it, at the topic
        assert produce_error(boot, "alice", "orders") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        code, got = consume(boot, "bob", "orders", "readers")
        assert code == KafkaError.GROUP_AUTHORIZATION_FAILED and got == []
        # an ordinary user may not create ACLs
        with pytest.raises(KafkaException) as refused:
            create(admin_of(boot, "alice"), [allow("orders", "alice", AclOperation.WRITE)])
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        admin = admin_of(boot)
        group_acl = allow(
            "read", "bob", AclOperation.READ, ResourceType.GROUP, ResourcePatternType.PREFIXED
        )
        create(admin, [group_acl])
        code, got = consume(boot, "bob", "orders", "readers")
        assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED and got == []
        create(
            admin,
            [
                allow("orders", "alice", AclOperation.WRITE),
                allow("orders", "bob", AclOperation.READ),
            ],
        )
        assert produce_error(boot, "alice", "orders") is None
        assert consume(boot, "bob", "orders", "readers") == (None, [b"v"])
        # a group outside bob's prefix is refused
        code, _ = consume(boot, "bob", "orders", "others")
        assert code == KafkaError.GROUP_AUTHORIZATION_FAILED
        # describe: everything on the topic, then through a MATCH filter
        everything = AclBindingFilter(
            ResourceType.ANY,
            None,
            ResourcePatternType.ANY,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        listed = admin.describe_acls(everything).result(10)
        assert {(b.name, b.principal, b.operation) for b in listed} == {
            ("orders", "User:alice", AclOperation.WRITE),
            ("orders", "User:bob", AclOperation.READ),
            ("read", "User:bob", AclOperation.READ),
        }
        match = AclBindingFilter(
            ResourceType.GROUP,
            "readers",
            ResourcePatternType.MATCH,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        assert [b.name for b in admin.describe_acls(match).result(10)] == ["read"]
        # a DENY wins: bob is denied the topic again
        create(
            admin,
            [allow("orders", "bob", AclOperation.READ, permission=AclPermissionType.DENY)],
        )
        code, _ = consume(boot, "bob", "orders", "readers-2")
        assert code == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # the super user passes without any ACL of its own
        assert produce_error(boot, "admin", "orders") is None
    # the ACLs survive a restart, and delete_acls removes what its filter matches
    with ServerThread(str(data_dir), secured()) as server:
        admin = admin_of(server.bootstrap)
        listed = admin.describe_acls(everything).result(10)
        assert len(listed) == 4
        deny_filter = AclBindingFilter(
            ResourceType.TOPIC,
            "orders",
            ResourcePatternType.LITERAL,
            "User:bob",
            None,
            AclOperation.ANY,
            AclPermissionType.DENY,
        )
        deleted = next(iter(admin.delete_acls([deny_filter]).values())).result(10)
        assert [(b.principal, b.permission_type) for b in deleted] == [
            ("User:bob", AclPermissionType.DENY)
        ]
        assert consume(server.bootstrap, "bob", "orders", "readers-3")[0] is None
        assert len(admin.describe_acls(everything).result(10)) == 3


def test_metadata_lists_only_described_topics_and_creation_needs_create(data_dir: Path) -> None:
    with ServerThread(str(data_dir), secured()) as server:
        boot = server.bootstrap
        for name in ("visible", "hidden"):
            make_topic(boot, name)
        admin = admin_of(boot)
        create(admin, [allow("visible", "alice", AclOperation.DESCRIBE)])
        topics = admin_of(boot, "alice").list_topics(timeout=10).topics
        assert sorted(topics) == ["visible"]
        # auto-creation: alice may describe but not create "fresh"
        create(admin, [allow("fresh", "alice", AclOperation.WRITE)])
        assert produce_error(boot, "alice", "fresh") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        create(admin, [allow("fresh", "alice", AclOperation.CREATE)])
        assert produce_error(boot, "alice", "fresh") is None
        # CreateTopics through the admin API needs CREATE as well
        alice_admin = admin_of(boot, "alice")  # kept: a dropped client cancels its futures
        future = alice_admin.create_topics([NewTopic("nope", 1)])["nope"]
        with pytest.raises(KafkaException) as refused:
            future.result(10)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_allow_everyone_if_no_acl_found(data_dir: Path) -> None:
    with ServerThread(str(data_dir), secured(allow_everyone_if_no_acl_found=True)) as server:
        boot = server.bootstrap
        assert produce_error(boot, "alice", "open-topic") is None  # no ACL anywhere: open
        assert consume(boot, "bob", "open-topic", "open-group") == (None, [b"v"])
        create(admin_of(boot), [allow("guarded", "bob", AclOperation.ALL)])
        make_topic(boot, "guarded")
        assert produce_error(boot, "alice", "guarded") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce_error(boot, "bob", "guarded") is None


def test_transactional_id_needs_write(data_dir: Path) -> None:
    with ServerThread(str(data_dir), secured()) as server:
        boot = server.bootstrap
        make_topic(boot, "txn-topic")
        create(admin_of(boot), [allow("txn-topic", "alice", AclOperation.WRITE)])
        producer = Producer(rdkafka(boot, **login("alice"), **{"transactional.id": "tx-1"}))
        with pytest.raises(KafkaException) as refused:
            producer.init_transactions(10)
        assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        create(
            admin_of(boot),
            [
                allow(
                    "tx-",
                    "alice",
                    AclOperation.WRITE,
                    ResourceType.TRANSACTIONAL_ID,
                    ResourcePatternType.PREFIXED,
                )
            ],
        )
        producer = Producer(rdkafka(boot, **login("alice"), **{"transactional.id": "tx-1"}))
        producer.init_transactions(10)
        producer.begin_transaction()
        producer.produce("txn-topic", b"in a transaction")
        producer.commit_transaction(10)


def test_kafka_python_acls(data_dir: Path) -> None:
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as PyResourceType
    from kafka.errors import KafkaError as PyKafkaError
    from kafka.errors import TopicAuthorizationFailedError

    def auth(user: str) -> dict[str, Any]:
        return {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN",
            "sasl_plain_username": user,
            "sasl_plain_password": USERS[user],
        }

    with ServerThread(str(data_dir), secured()) as server:
        boot = server.bootstrap
        make_topic(boot, "py-topic")
        admin = KafkaAdminClient(bootstrap_servers=boot, **auth("admin"))
        acl = ACL(
            principal="User:alice",
            host="*",
            operation=ACLOperation.WRITE,
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(PyResourceType.TOPIC, "py-topic"),
        )
        # (an idempotent producer would first be refused its producer id: KIP-679 wants
        # WRITE on some topic or IDEMPOTENT_WRITE on the cluster; a plain one meets the topic)
        producer = KafkaProducer(
            bootstrap_servers=boot, **auth("alice"), max_block_ms=5000, enable_idempotence=False
        )
        with pytest.raises((TopicAuthorizationFailedError, PyKafkaError)) as refused:
            producer.send("py-topic", b"x").get(10)
        assert "TopicAuthorizationFailed" in repr(refused.value)
        producer.close()
        result = admin.create_acls([acl])
        assert not result["failed"], result
        producer = KafkaProducer(bootstrap_servers=boot, **auth("alice"))  # idempotent
        producer.send("py-topic", b"x").get(10)
        producer.close()
        acl_filter = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                PyResourceType.TOPIC, "py-topic", ACLResourcePatternType.LITERAL
            ),
        )
        described, _ = admin.describe_acls(acl_filter)
        assert [a.principal for a in described] == ["User:alice"]
        admin.close()


def test_acl_apis_without_authorizer_are_security_disabled(data_dir: Path) -> None:
    with ServerThread(str(data_dir), config()) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            reply = _exchange(
                sock,
                29,
                3,
                {
                    "resource_type_filter": 1,
                    "resource_name_filter": None,
                    "pattern_type_filter": 1,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                },
            )
            assert reply.error_code == 54  # SECURITY_DISABLED
            # and everything else is open, as before
            assert len(_exchange(sock, 3, 12, {"topics": None}).brokers) == 1
        assert produce_error_plain(server.bootstrap) is None


def produce_error_plain(bootstrap: str) -> Any:
    producer = Producer(rdkafka(bootstrap))
    reports: list[Any] = []
    producer.produce("plain", b"v", on_delivery=lambda e, m: reports.append(e))
    producer.flush(10)
    return reports[0]


def test_create_acls_refuses_invalid_bindings(data_dir: Path) -> None:
    with (
        ServerThread(
            str(data_dir), secured(sasl_plain_users=None, super_users=frozenset({"User:ANONYMOUS"}))
        ) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock,
    ):
        good = {
            "resource_type": 2,
            "resource_name": "t",
            "resource_pattern_type": 3,
            "principal": "User:x",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        }
        reply = _exchange(
            sock,
            30,
            3,
            {
                "creations": [
                    good,
                    {**good, "principal": "nobody"},
                    {**good, "resource_pattern_type": 2},  # MATCH is only a filter
                    {**good, "resource_type": 4, "resource_name": "other"},
                    {**good, "operation": 1},  # ANY
                ]
            },
        )
        assert [r.error_code for r in reply.results] == [0, 42, 42, 42, 42]
    assert [a.principal for a in Authorizer(str(data_dir)).acls] == ["User:x"]


# -- every gated API, every version, on the wire ---------------------------------------------------

_TOPIC = [{"name": "t", "topic": "t", "partitions": [{"partition_index": 0, "partition": 0}]}]
_GROUP = {"group_id": "g", "member_id": "", "generation_id": -1, "protocol_type": "consumer"}
_TXN = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}
_FILTER = {
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}
#: (API key, request fields, the error code each version must answer) for a caller with no ACL
DENIED_REQUESTS: list[tuple[int, dict[str, Any], int]] = [
    (
        0,
        {
            "acks": 1,
            "timeout": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": None}]}],
        },
        29,
    ),
    (
        1,
        {
            "max_wait": 0,
            "max_bytes": 1000,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}
                    ],
                }
            ],
        },
        29,
    ),
    (
        2,
        {
            "replica_id": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        29,
    ),
    (3, {"topics": [{"name": "t"}], "allow_auto_topic_creation": True}, 29),
    (
        8,
        {
            **_GROUP,
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}
            ],
        },
        30,
    ),
    (9, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}, 30),
    (10, {"key": "g", "key_type": 0, "coordinator_keys": ["g"]}, 30),
    (
        11,
        {
            **_GROUP,
            "session_timeout": 10000,
            "rebalance_timeout": 10000,
            "protocols": [{"name": "range", "metadata": b""}],
        },
        30,
    ),
    (12, _GROUP, 30),
    (13, {**_GROUP, "members": [{"member_id": "m"}]}, 30),
    (14, _GROUP, 30),
    (15, {"groups": ["g"]}, 30),
    (
        19,
        {
            "topics": [{"name": "new", "num_partitions": 1, "replication_factor": 1}],
            "timeout": 1000,
        },
        29,
    ),
    (20, {"topic_names": ["t"], "topics": [{"name": "t"}], "timeout": 1000}, 29),
    (
        21,
        {
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 0}]}],
            "timeout": 1000,
        },
        29,
    ),
    (22, {"transactional_id": "tx", "transaction_timeout": 1000}, 53),
    (22, {"transactional_id": None, "transaction_timeout": 1000}, 31),
    (
        23,
        {
            "replica_id": -1,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "leader_epoch": 0}]}],
        },
        29,
    ),
    (
        24,
        {
            "v3_and_below_transactional_id": "tx",
            "transactional_id": "tx",
            "v3_and_below_producer_id": 1,
            "producer_id": 1,
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
            "topics": [{"name": "t", "partitions": [0]}],
        },
        53,
    ),
    (25, _TXN, 53),
    (26, {**_TXN, "committed": True}, 53),
    (
        28,
        {
            **_TXN,
            "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1}]}
            ],
        },
        53,
    ),
    (29, _FILTER, 31),
    (
        30,
        {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "resource_pattern_type": 3,
                    "principal": "User:x",
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
        31,
    ),
    (31, {"filters": [_FILTER]}, 31),
    (32, {"resources": [{"resource_type": 2, "resource_name": "t"}]}, 29),
    (32, {"resources": [{"resource_type": 4, "resource_name": "1"}]}, 31),
    (33, {"resources": [{"resource_type": 2, "resource_name": "t", "configs": []}]}, 29),
    (37, {"topics": [{"name": "t", "count": 2}], "timeout": 1000}, 29),
    (42, {"groups_names": ["g"]}, 30),
    (44, {"resources": [{"resource_type": 4, "resource_name": "", "configs": []}]}, 31),
    (50, {"users": None}, 31),
    (51, {"deletions": [{"name": "u", "mechanism": 1}], "upsertions": []}, 31),
]


def _error_codes(value: Any) -> list[int]:
    """Every error code in a decoded response, at any depth."""
    import dataclasses

    codes: list[int] = []
    if dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name in ("error_code", "partition_error_code"):
                codes.append(int(item))
            else:
                codes.extend(_error_codes(item))
    elif isinstance(value, tuple):
        for item in value:
            codes.extend(_error_codes(item))
    return codes


def test_every_gated_api_and_version_answers_kafkas_error(data_dir: Path) -> None:
    """No SASL and no ACL: User:ANONYMOUS is refused everything, each API in each version the
    server answers, with the error Kafka answers (the responses decode as the client would)."""
    from kafkalog.server.codec import SUPPORTED

    with ServerThread(str(data_dir), config()) as plain:  # a topic "t" to be refused
        producer = Producer(rdkafka(plain.bootstrap))
        producer.produce("t", b"x")
        assert producer.flush(10) == 0
    with ServerThread(str(data_dir), config(authorizer=True)) as server:
        for key, fields, expected in DENIED_REQUESTS:
            low, high = SUPPORTED[key]
            for version in range(low, high + 1):
                with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                    reply = _exchange(sock, key, version, fields)
                assert reply is not None, (key, version)
                codes = _error_codes(reply)
                assert expected in codes, (key, version, codes)
                # nothing in it succeeded (a Fetch's top-level code is 0 beside its partitions')
                assert E_NONE not in (codes[1:] if key == 1 else codes), (key, version, codes)
        # what was refused was not done: no topic created, no ACL, no user, no commit
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            assert _exchange(sock, 3, 12, {"topics": None}).topics == ()
    assert Authorizer(str(data_dir)).acls == []
    assert not (data_dir / "new-0").exists()


E_NONE = 0


def test_admin_operations_follow_their_acls(data_dir: Path) -> None:
    """Configs (ALTER_CONFIGS implies DESCRIBE_CONFIGS), DeleteTopics, ListGroups and
    DescribeGroups through confluent-kafka's AdminClient, refused then allowed."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    with ServerThread(str(data_dir), secured()) as server:
        boot = server.bootstrap
        make_topic(boot, "cfg")
        admin, alice = admin_of(boot), admin_of(boot, "alice")
        resource = ConfigResource(
            ConfigResource.Type.TOPIC,
            "cfg",
            incremental_configs=[
                ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        with pytest.raises(KafkaException) as refused:
            alice.incremental_alter_configs([resource])[resource].result(10)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        create(admin, [allow("cfg", "alice", AclOperation.ALTER_CONFIGS)])
        alice.incremental_alter_configs([resource])[resource].result(10)
        described = alice.describe_configs([ConfigResource("topic", "cfg")])
        configs = next(iter(described.values())).result(10)
        assert configs["retention.ms"].value == "1000"
        broker = ConfigResource(ConfigResource.Type.BROKER, "1")
        with pytest.raises(KafkaException) as refused:
            next(iter(alice.describe_configs([broker]).values())).result(10)
        assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        # DeleteTopics needs DELETE
        with pytest.raises(KafkaException) as refused:
            alice.delete_topics(["cfg"])["cfg"].result(10)
        assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        create(admin, [allow("cfg", "alice", AclOperation.DELETE)])
        alice.delete_topics(["cfg"])["cfg"].result(10)
        # groups: bob's consumer group is listed to bob, not to alice; describing it needs
        # DESCRIBE on the group
        make_topic(boot, "events")
        create(
            admin,
            [
                allow("events", "bob", AclOperation.ALL),
                allow("bobs", "bob", AclOperation.READ, ResourceType.GROUP),
            ],
        )
        assert produce_error(boot, "bob", "events") is None
        assert consume(boot, "bob", "events", "bobs") == (None, [b"v"])
        bob = admin_of(boot, "bob")
        assert [g.group_id for g in bob.list_consumer_groups().result(10).valid] == ["bobs"]
        assert alice.list_consumer_groups().result(10).valid == []
        bobs = bob.describe_consumer_groups(["bobs"])["bobs"].result(10)
        assert bobs.group_id == "bobs"
        with pytest.raises(KafkaException) as refused:
            alice.describe_consumer_groups(["bobs"])["bobs"].result(10)
        assert refused.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_authorized_operations_are_the_callers(data_dir: Path) -> None:
    """describe_cluster / describe_topics / describe_consumer_groups with
    include_authorized_operations report what the caller may do, not everything."""
    from confluent_kafka import TopicCollection

    with ServerThread(str(data_dir), secured()) as server:
        boot = server.bootstrap
        make_topic(boot, "ops")
        admin = admin_of(boot)
        create(
            admin,
            [
                allow("ops", "alice", AclOperation.READ),
                allow("ops", "alice", AclOperation.ALTER_CONFIGS),
                allow("kafka-cluster", "alice", AclOperation.DESCRIBE, ResourceType.BROKER),
                allow("team", "alice", AclOperation.READ, ResourceType.GROUP),
            ],
        )
        alice = admin_of(boot, "alice")
        cluster = alice.describe_cluster(include_authorized_operations=True).result(10)
        assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE}
        everything = admin.describe_cluster(include_authorized_operations=True).result(10)
        assert AclOperation.ALTER in set(everything.authorized_operations)  # the super user
        topics = alice.describe_topics(TopicCollection(["ops"]), include_authorized_operations=True)
        ops = set(topics["ops"].result(10).authorized_operations)
        assert ops == {
            AclOperation.READ,
            AclOperation.DESCRIBE,
            AclOperation.ALTER_CONFIGS,
            AclOperation.DESCRIBE_CONFIGS,
        }
        groups = alice.describe_consumer_groups(["team"], include_authorized_operations=True)
        assert set(groups["team"].result(10).authorized_operations) == {
            AclOperation.READ,
            AclOperation.DESCRIBE,
        }


def _openssl(*args: str) -> None:
    import subprocess

    subprocess.run(["openssl", *args], check=True, capture_output=True)


def test_tls_client_certificate_is_the_principal(tmp_path: Path, data_dir: Path) -> None:
    """With client certificates required (ssl.client.auth=required), the principal is
    ``User:`` and the certificate's subject DN in RFC 2253 order, as Kafka's
    DefaultKafkaPrincipalBuilder names it."""
    from kafkalog.server.server import certificate_dn

    d = tmp_path
    self_signed(str(d / "ca.pem"), str(d / "ca.key"), "/CN=test-ca")
    self_signed(str(d / "server.pem"), str(d / "server.key"), "/CN=127.0.0.1", *LOOPBACK_SAN)
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/C=US/O=Example, Inc/CN=app-1",
        "-keyout",
        str(d / "client.key"),
        "-out",
        str(d / "client.csr"),
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(d / "client.csr"),
        "-CA",
        str(d / "ca.pem"),
        "-CAkey",
        str(d / "ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        str(d / "client.pem"),
    )
    principal = "User:CN=app-1,O=Example\\, Inc,C=US"
    cfg = config(
        ssl_certfile=str(d / "server.pem"),
        ssl_keyfile=str(d / "server.key"),
        ssl_cafile=str(d / "ca.pem"),
        authorizer=True,
    )
    tls = {
        "security.protocol": "SSL",
        "ssl.ca.location": str(d / "server.pem"),
        "ssl.certificate.location": str(d / "client.pem"),
        "ssl.key.location": str(d / "client.key"),
    }
    with ServerThread(str(data_dir), cfg) as server:

        def produce() -> Any:
            producer = Producer(rdkafka(server.bootstrap, **tls))
            reports: list[Any] = []
            producer.produce("tls-topic", b"v", on_delivery=lambda e, m: reports.append(e))
            producer.flush(10)
            return reports[0].code() if reports and reports[0] is not None else None

        assert produce() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # the ACL file is the authorizer's store: add to it as a super user would
        assert server.server.broker is not None
        server.server.broker.authorizer.add(  # type: ignore[union-attr]
            [
                Binding(A.TOPIC, "tls-", A.PREFIXED, principal, "*", A.ALL, A.ALLOW),
                Binding(A.CLUSTER, A.CLUSTER_NAME, A.LITERAL, principal, "*", A.CREATE, A.ALLOW),
            ]
        )
        assert produce() is None
    assert (
        certificate_dn(
            {
                "subject": (
                    (("commonName", " a+b "),),
                    (("organizationalUnitName", "x"), ("domainComponent", "y")),
                )
            }
        )
        == "OU=x+DC=y,CN=\\ a\\+b\\ "
    )
    assert certificate_dn({}) is None
