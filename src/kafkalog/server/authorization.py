"""What each request needs the ACLs to allow, checked before its handler runs.

Kafka's ``KafkaApis`` authorizes each request in its handler; here a gate per API does it in
front of the unchanged handlers, so the handlers stay free of security: the gate either answers
the whole request itself (a group, transactional id or cluster permission missing), or takes the
topics the caller may not touch out of the request, lets the handler answer the rest, and puts
them back in the response with TOPIC_AUTHORIZATION_FAILED, as Kafka answers them.

The operations are Kafka's (``KafkaApis``, KIP-679 for idempotent producers):

====================  ========================================================================
Produce               WRITE topic; WRITE transactional id when the request carries one
Fetch                 READ topic
ListOffsets, OffsetForLeaderEpoch  DESCRIBE topic
Metadata              DESCRIBE topic (the full listing shows only those); auto-creating one
                      needs CREATE on the cluster or the topic
OffsetCommit          READ group, READ topic
OffsetFetch           DESCRIBE group, DESCRIBE topic
Join/Sync/Heartbeat/LeaveGroup  READ group
DescribeGroups        DESCRIBE group; ListGroups lists the groups it may DESCRIBE (or all
                      with DESCRIBE on the cluster); DeleteGroups DELETE group
FindCoordinator       DESCRIBE group / transactional id
InitProducerId        WRITE transactional id; without one, IDEMPOTENT_WRITE on the cluster or
                      WRITE on some topic
AddPartitionsToTxn    WRITE transactional id, WRITE topic
AddOffsetsToTxn       WRITE transactional id, READ group
EndTxn                WRITE transactional id
TxnOffsetCommit       WRITE transactional id, READ group, READ topic
CreateTopics          CREATE cluster or CREATE topic; DeleteTopics, DeleteRecords DELETE
                      topic; CreatePartitions ALTER topic
DescribeConfigs       DESCRIBE_CONFIGS topic / cluster; (Incremental)AlterConfigs
                      ALTER_CONFIGS topic / cluster
DescribeAcls, DescribeUserScramCredentials  DESCRIBE cluster
DescribeCluster       nothing; its cluster_authorized_operations (like Metadata's and
                      DescribeGroups' authorized operations) are the caller's
CreateAcls, DeleteAcls, AlterUserScramCredentials  ALTER cluster
====================  ========================================================================
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkalog.server import acls as A
from kafkalog.server import errors as E

if TYPE_CHECKING:
    from kafkalog.server.broker_interface import BrokerInterface as Broker

Response = dict[str, Any]
Merge = Callable[[Response], Response]
#: a gate's verdict: the request for the handler (None: do not call it) and what to do to its
#: response (or, without a handler call, to ``{}``)
Verdict = tuple[Any, Merge]

RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4  # DescribeConfigs / AlterConfigs resource types


def _same(response: Response) -> Response:
    return response


class Gate:
    """One request's caller against the authorizer."""

    def __init__(self, authorizer: A.Authorizer, principal: str, host: str) -> None:
        self.authorizer = authorizer
        self.principal = principal
        self.host = host

    def allowed(self, operation: int, resource_type: int, name: str) -> bool:
        return self.authorizer.authorize(self.principal, self.host, operation, resource_type, name)

    def topic(self, operation: int, name: str) -> bool:
        return self.allowed(operation, A.TOPIC, name)

    def cluster(self, operation: int) -> bool:
        return self.allowed(operation, A.CLUSTER, A.CLUSTER_NAME)


#: the operations Kafka reports in ``*_authorized_operations`` per resource type
#: (its AclEntry.supportedOperations)
SUPPORTED_OPERATIONS = {
    A.TOPIC: (
        A.READ,
        A.WRITE,
        A.CREATE,
        A.DESCRIBE,
        A.DELETE,
        A.ALTER,
        A.DESCRIBE_CONFIGS,
        A.ALTER_CONFIGS,
    ),
    A.GROUP: (A.READ, A.DESCRIBE, A.DELETE),
    A.CLUSTER: (
        A.CREATE,
        A.CLUSTER_ACTION,
        A.DESCRIBE_CONFIGS,
        A.ALTER_CONFIGS,
        A.IDEMPOTENT_WRITE,
        A.ALTER,
        A.DESCRIBE,
        A.CREATE_TOKENS,
        A.DESCRIBE_TOKENS,
    ),
}


def authorized_operations(gate: Gate, resource_type: int, name: str) -> int:
    """The bit field of the operations the caller may do on the resource (bit = code), as
    Metadata, DescribeGroups and DescribeCluster report it when asked."""
    return sum(
        1 << op
        for op in SUPPORTED_OPERATIONS[resource_type]
        if gate.allowed(op, resource_type, name)
    )


def _then(first: Merge, second: Merge) -> Merge:
    return lambda response: second(first(response))


def _answer(response: Response) -> Verdict:
    """The whole request is refused with this response; the handler is not called."""
    return None, lambda _: response


def _split_topics(
    gate: Gate, body: Any, field: str, name_of: Callable[[Any], str], operation: int
) -> tuple[Any, list[Any]]:
    """The request without the topics ``operation`` is not allowed on, and those topics."""
    items = getattr(body, field)
    kept = [t for t in items if gate.topic(operation, name_of(t))]
    denied = [t for t in items if t not in kept]
    if not denied:
        return body, []
    return dataclasses.replace(body, **{field: tuple(kept)}), denied


def _add_topics(key: str, entries: list[Response]) -> Merge:
    def merge(response: Response) -> Response:
        if entries:
            response[key] = list(response.get(key, [])) + entries
        return response

    return merge


# -- produce and fetch ---------------------------------------------------------------------------


def produce(gate: Gate, body: Any) -> Verdict:
    def denied_entry(t: Any, code: int) -> Response:
        return {
            "name": t.name,
            "partition_responses": [
                {"index": p.index, "error_code": code, "base_offset": -1} for p in t.partition_data
            ],
        }

    txn = getattr(body, "transactional_id", None)
    if txn is not None and not gate.allowed(A.WRITE, A.TRANSACTIONAL_ID, txn):
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return _answer({"responses": [denied_entry(t, code) for t in body.topic_data]})
    body, denied = _split_topics(gate, body, "topic_data", lambda t: t.name, A.WRITE)
    code = E.TOPIC_AUTHORIZATION_FAILED
    return body, _add_topics("responses", [denied_entry(t, code) for t in denied])


def _denied_partitions(
    denied: list[Any], topic: str, partition: tuple[str, str], **answer: Any
) -> list[Response]:
    """The response entries of ``denied`` topics: every partition TOPIC_AUTHORIZATION_FAILED
    with ``answer``'s fields; ``topic`` names the topic field (request and response alike),
    ``partition`` the (response, request) names of the partition's index."""
    key, attr = partition
    return [
        {
            topic: getattr(t, topic),
            "partitions": [
                {key: getattr(p, attr), "error_code": E.TOPIC_AUTHORIZATION_FAILED, **answer}
                for p in t.partitions
            ],
        }
        for t in denied
    ]


def fetch(gate: Gate, body: Any) -> Verdict:
    body, denied = _split_topics(gate, body, "topics", lambda t: t.topic, A.READ)
    entries = _denied_partitions(
        denied,
        "topic",
        ("partition_index", "partition"),
        high_watermark=-1,
        last_stable_offset=-1,
        log_start_offset=-1,
        records=b"",
    )
    return body, _add_topics("responses", entries)


def list_offsets(gate: Gate, body: Any) -> Verdict:
    body, denied = _split_topics(gate, body, "topics", lambda t: t.name, A.DESCRIBE)
    entries = _denied_partitions(
        denied, "name", ("partition_index", "partition_index"), timestamp=-1, offset=-1
    )
    return body, _add_topics("topics", entries)


def offset_for_leader_epoch(gate: Gate, body: Any) -> Verdict:
    body, denied = _split_topics(gate, body, "topics", lambda t: t.topic, A.DESCRIBE)
    entries = _denied_partitions(
        denied, "topic", ("partition", "partition"), leader_epoch=-1, end_offset=-1
    )
    return body, _add_topics("topics", entries)


def delete_records(gate: Gate, body: Any) -> Verdict:
    body, denied = _split_topics(gate, body, "topics", lambda t: t.name, A.DELETE)
    entries = _denied_partitions(
        denied, "name", ("partition_index", "partition_index"), low_watermark=-1
    )
    return body, _add_topics("topics", entries)


def metadata(gate: Gate, body: Any, broker: Broker) -> Verdict:
    body_out, merge = _metadata(gate, body, broker)

    def operations(response: Response) -> Response:
        if getattr(body, "include_topic_authorized_operations", False):
            for t in response.get("topics", []):
                if t.get("error_code", 0) == E.NONE and t.get("name"):
                    t["topic_authorized_operations"] = authorized_operations(
                        gate, A.TOPIC, t["name"]
                    )
        if getattr(body, "include_cluster_authorized_operations", False):
            response["cluster_authorized_operations"] = authorized_operations(
                gate, A.CLUSTER, A.CLUSTER_NAME
            )
        return response

    return body_out, _then(merge, operations)


def _metadata(gate: Gate, body: Any, broker: Broker) -> Verdict:
    denied_entry = {"error_code": E.TOPIC_AUTHORIZATION_FAILED, "partitions": []}
    if body.topics is None or len(body.topics) == 0:
        # every topic: only those the caller may describe are listed (v0's empty list too)
        def only_described(response: Response) -> Response:
            response["topics"] = [
                t for t in response["topics"] if gate.topic(A.DESCRIBE, t["name"])
            ]
            return response

        return body, only_described
    creating = bool(getattr(body, "allow_auto_topic_creation", True)) and (
        broker.config.auto_create_topics_enable
    )
    may_create_any = gate.cluster(A.CREATE)
    kept, denied = [], []
    for item in body.topics:
        name = item.name
        if name is None:  # by id: allowed when its topic may be described
            found = next(
                (t for t in broker.registry.topics.values() if t.uuid == item.topic_id), None
            )
            if found is not None and not gate.topic(A.DESCRIBE, found.name):
                denied.append({"name": None, "topic_id": item.topic_id, **denied_entry})
            else:
                kept.append(item)
            continue
        if not gate.topic(A.DESCRIBE, name) or (
            creating
            and broker.registry.get(name) is None
            and not may_create_any
            and not gate.topic(A.CREATE, name)
        ):
            denied.append({"name": name, **denied_entry})
        else:
            kept.append(item)
    if not denied:
        return body, _same
    if not kept:  # the handler reads an empty list as "every topic": those are replaced
        return dataclasses.replace(body, topics=None), _replace_topics(denied)
    return dataclasses.replace(body, topics=tuple(kept)), _add_topics("topics", denied)


def _replace_topics(entries: list[Response]) -> Merge:
    def merge(response: Response) -> Response:
        response["topics"] = entries
        return response

    return merge


# -- topics and configs ---------------------------------------------------------------------------


def create_topics(gate: Gate, body: Any) -> Verdict:
    if gate.cluster(A.CREATE):
        return body, _same
    body, denied = _split_topics(gate, body, "topics", lambda t: t.name, A.CREATE)
    entries = [
        {
            "name": t.name,
            "error_code": E.TOPIC_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
            "num_partitions": -1,
            "replication_factor": -1,
        }
        for t in denied
    ]
    return body, _add_topics("topics", entries)


def delete_topics(gate: Gate, body: Any, broker: Broker) -> Verdict:
    code = E.TOPIC_AUTHORIZATION_FAILED
    if hasattr(body, "topic_names"):
        body, denied = _split_topics(gate, body, "topic_names", lambda n: n, A.DELETE)
        return body, _add_topics("responses", [{"name": n, "error_code": code} for n in denied])

    def name_of(t: Any) -> str:
        if t.name is not None:
            return str(t.name)
        found = next((x for x in broker.registry.topics.values() if x.uuid == t.topic_id), None)
        return found.name if found is not None else ""

    body, gone = _split_topics(gate, body, "topics", name_of, A.DELETE)
    entries = [{"name": t.name, "topic_id": t.topic_id, "error_code": code} for t in gone]
    return body, _add_topics("responses", entries)


def create_partitions(gate: Gate, body: Any) -> Verdict:
    body, denied = _split_topics(gate, body, "topics", lambda t: t.name, A.ALTER)
    code = E.TOPIC_AUTHORIZATION_FAILED
    return body, _add_topics("results", [{"name": t.name, "error_code": code} for t in denied])


def _configs(gate: Gate, body: Any, operation: int, key: str) -> Verdict:
    def allowed(res: Any) -> bool:
        kind = int(res.resource_type)
        if kind == RESOURCE_TOPIC:
            return gate.topic(operation, res.resource_name)
        if kind == RESOURCE_BROKER:
            return gate.cluster(operation)
        return True  # unknown kinds: the handler answers them

    kept = [r for r in body.resources if allowed(r)]
    denied = [r for r in body.resources if not allowed(r)]
    entries = [
        {
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "error_code": E.TOPIC_AUTHORIZATION_FAILED
            if int(r.resource_type) == RESOURCE_TOPIC
            else E.CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "Authorization failed.",
            "configs": [],
        }
        for r in denied
    ]
    if not denied:
        return body, _same
    return dataclasses.replace(body, resources=tuple(kept)), _add_topics(key, entries)


def describe_configs(gate: Gate, body: Any) -> Verdict:
    return _configs(gate, body, A.DESCRIBE_CONFIGS, "results")


def alter_configs(gate: Gate, body: Any) -> Verdict:
    return _configs(gate, body, A.ALTER_CONFIGS, "responses")


# -- groups ------------------------------------------------------------------------------------


def _group_only(
    operation: int, response: Callable[[Any], Response]
) -> Callable[[Gate, Any], Verdict]:
    def gate_it(gate: Gate, body: Any) -> Verdict:
        if gate.allowed(operation, A.GROUP, body.group_id):
            return body, _same
        return _answer(response(body))

    return gate_it


def _group_error(body: Any) -> Response:
    return {"error_code": E.GROUP_AUTHORIZATION_FAILED}


def _join_error(body: Any) -> Response:
    return {
        "error_code": E.GROUP_AUTHORIZATION_FAILED,
        "generation_id": -1,
        "member_id": "",
        "leader": "",
        "members": [],
    }


join_group = _group_only(A.READ, _join_error)
sync_group = _group_only(A.READ, _group_error)
heartbeat = _group_only(A.READ, _group_error)
leave_group = _group_only(A.READ, _group_error)


def offset_commit(gate: Gate, body: Any) -> Verdict:
    def all_failed(code: int, topics: Any) -> list[Response]:
        return [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in topics
        ]

    if not gate.allowed(A.READ, A.GROUP, body.group_id):
        return _answer({"topics": all_failed(E.GROUP_AUTHORIZATION_FAILED, body.topics)})
    body, denied = _split_topics(gate, body, "topics", lambda t: t.name, A.READ)
    return body, _add_topics("topics", all_failed(E.TOPIC_AUTHORIZATION_FAILED, denied))


def offset_fetch(gate: Gate, body: Any) -> Verdict:
    if not gate.allowed(A.DESCRIBE, A.GROUP, body.group_id):
        code = E.GROUP_AUTHORIZATION_FAILED
        # the error per partition too: v1 has no top-level error code
        topics = [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p, "error_code": code, "committed_offset": -1}
                    for p in t.partition_indexes
                ],
            }
            for t in body.topics or ()
        ]
        return _answer({"error_code": code, "topics": topics})

    def only_described(response: Response) -> Response:
        for t in response.get("topics", []):
            if not gate.topic(A.DESCRIBE, t["name"]):
                for p in t["partitions"]:
                    p.update(
                        error_code=E.TOPIC_AUTHORIZATION_FAILED,
                        committed_offset=-1,
                        metadata="",
                    )
        if body.topics is None:  # all of the group's: those it may not describe are left out
            response["topics"] = [
                t for t in response.get("topics", []) if gate.topic(A.DESCRIBE, t["name"])
            ]
        return response

    return body, only_described


def describe_groups(gate: Gate, body: Any) -> Verdict:
    denied = [g for g in body.groups if not gate.allowed(A.DESCRIBE, A.GROUP, g)]
    entries = [
        {"group_id": g, "error_code": E.GROUP_AUTHORIZATION_FAILED, "members": []} for g in denied
    ]
    if denied and len(denied) == len(body.groups):
        return _answer({"groups": entries})
    kept = tuple(g for g in body.groups if g not in denied)

    def merge(response: Response) -> Response:
        if getattr(body, "include_authorized_operations", False):
            for g in response.get("groups", []):
                g["authorized_operations"] = authorized_operations(gate, A.GROUP, g["group_id"])
        return _add_topics("groups", entries)(response)

    return (dataclasses.replace(body, groups=kept) if denied else body), merge


def describe_cluster(gate: Gate, body: Any) -> Verdict:
    def operations(response: Response) -> Response:
        if body.include_cluster_authorized_operations and response.get("error_code") == E.NONE:
            response["cluster_authorized_operations"] = authorized_operations(
                gate, A.CLUSTER, A.CLUSTER_NAME
            )
        return response

    return body, operations


def list_groups(gate: Gate, body: Any) -> Verdict:
    if gate.cluster(A.DESCRIBE):
        return body, _same

    def only_described(response: Response) -> Response:
        response["groups"] = [
            g for g in response["groups"] if gate.allowed(A.DESCRIBE, A.GROUP, g["group_id"])
        ]
        return response

    return body, only_described


def delete_groups(gate: Gate, body: Any) -> Verdict:
    denied = [g for g in body.groups_names if not gate.allowed(A.DELETE, A.GROUP, g)]
    if not denied:
        return body, _same
    kept = tuple(g for g in body.groups_names if g not in denied)
    entries = [{"group_id": g, "error_code": E.GROUP_AUTHORIZATION_FAILED} for g in denied]
    if not kept:
        return _answer({"results": entries})
    return dataclasses.replace(body, groups_names=kept), _add_topics("results", entries)


def find_coordinator(gate: Gate, body: Any) -> Verdict:
    key_type = int(getattr(body, "key_type", 0))
    resource = A.TRANSACTIONAL_ID if key_type == 1 else A.GROUP
    code = (
        E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if key_type == 1 else E.GROUP_AUTHORIZATION_FAILED
    )
    denied_entry = {"error_code": code, "node_id": -1, "host": "", "port": -1}
    if hasattr(body, "coordinator_keys"):
        keys = list(body.coordinator_keys)
        denied = [k for k in keys if not gate.allowed(A.DESCRIBE, resource, k)]
        if not denied:
            return body, _same
        kept = tuple(k for k in keys if k not in denied)
        entries = [{"key": k, **denied_entry} for k in denied]
        if not kept:
            return _answer({"coordinators": entries})
        return dataclasses.replace(body, coordinator_keys=kept), _add_topics(
            "coordinators", entries
        )
    if gate.allowed(A.DESCRIBE, resource, body.key):
        return body, _same
    return _answer(denied_entry)


# -- transactions -------------------------------------------------------------------------------


def init_producer_id(gate: Gate, body: Any) -> Verdict:
    failed = {"producer_id": -1, "producer_epoch": -1}
    if body.transactional_id is not None:
        if gate.allowed(A.WRITE, A.TRANSACTIONAL_ID, body.transactional_id):
            return body, _same
        return _answer({"error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, **failed})
    # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on a topic
    if gate.cluster(A.IDEMPOTENT_WRITE) or gate.authorizer.authorize_any(
        gate.principal, gate.host, A.WRITE, A.TOPIC
    ):
        return body, _same
    return _answer({"error_code": E.CLUSTER_AUTHORIZATION_FAILED, **failed})


def _txn_allowed(gate: Gate, transactional_id: str) -> bool:
    return gate.allowed(A.WRITE, A.TRANSACTIONAL_ID, transactional_id)


def add_partitions_to_txn(gate: Gate, body: Any) -> Verdict:
    topics = body.v3_and_below_topics

    def results(code_of: Callable[[str], int]) -> list[Response]:
        return [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": code_of(t.name)}
                    for p in t.partitions
                ],
            }
            for t in topics
        ]

    if not _txn_allowed(gate, body.v3_and_below_transactional_id):
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return _answer({"results_by_topic_v3_and_below": results(lambda _: code)})
    if all(gate.topic(A.WRITE, t.name) for t in topics):
        return body, _same

    # Kafka: the allowed partitions are answered OPERATION_NOT_ATTEMPTED (55), nothing added
    def code_of(name: str) -> int:
        return 55 if gate.topic(A.WRITE, name) else E.TOPIC_AUTHORIZATION_FAILED

    return _answer({"results_by_topic_v3_and_below": results(code_of)})


def add_offsets_to_txn(gate: Gate, body: Any) -> Verdict:
    if not _txn_allowed(gate, body.transactional_id):
        return _answer({"error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
    if not gate.allowed(A.READ, A.GROUP, body.group_id):
        return _answer({"error_code": E.GROUP_AUTHORIZATION_FAILED})
    return body, _same


def end_txn(gate: Gate, body: Any) -> Verdict:
    if not _txn_allowed(gate, body.transactional_id):
        return _answer({"error_code": E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED})
    return body, _same


def txn_offset_commit(gate: Gate, body: Any) -> Verdict:
    def all_failed(code: int, topics: Any) -> list[Response]:
        return [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in topics
        ]

    if not _txn_allowed(gate, body.transactional_id):
        code = E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return _answer({"topics": all_failed(code, body.topics)})
    if not gate.allowed(A.READ, A.GROUP, body.group_id):
        return _answer({"topics": all_failed(E.GROUP_AUTHORIZATION_FAILED, body.topics)})
    body, denied = _split_topics(gate, body, "topics", lambda t: t.name, A.READ)
    return body, _add_topics("topics", all_failed(E.TOPIC_AUTHORIZATION_FAILED, denied))


# -- cluster-level admin -------------------------------------------------------------------------


def _cluster_only(
    operation: int, response: Callable[[Any], Response]
) -> Callable[[Gate, Any], Verdict]:
    def gate_it(gate: Gate, body: Any) -> Verdict:
        if gate.cluster(operation):
            return body, _same
        return _answer(response(body))

    return gate_it


_DENIED = {"error_code": E.CLUSTER_AUTHORIZATION_FAILED, "error_message": "Authorization failed."}

describe_acls = _cluster_only(A.DESCRIBE, lambda body: {**_DENIED, "resources": []})
create_acls = _cluster_only(
    A.ALTER, lambda body: {"results": [dict(_DENIED) for _ in body.creations]}
)
delete_acls = _cluster_only(
    A.ALTER, lambda body: {"filter_results": [dict(_DENIED) for _ in body.filters]}
)
describe_user_scram_credentials = _cluster_only(A.DESCRIBE, lambda body: {**_DENIED, "results": []})
alter_user_scram_credentials = _cluster_only(
    A.ALTER,
    lambda body: {
        "results": [
            {"user": u, **_DENIED}
            for u in dict.fromkeys(
                [d.name for d in body.deletions] + [u.name for u in body.upsertions]
            )
        ]
    },
)

#: the gates by API key; ``metadata`` and ``delete_topics`` also need the broker
GATES: dict[int, Callable[[Gate, Any], Verdict]] = {
    0: produce,
    1: fetch,
    2: list_offsets,
    8: offset_commit,
    9: offset_fetch,
    10: find_coordinator,
    11: join_group,
    12: heartbeat,
    13: leave_group,
    14: sync_group,
    15: describe_groups,
    16: list_groups,
    19: create_topics,
    21: delete_records,
    22: init_producer_id,
    23: offset_for_leader_epoch,
    24: add_partitions_to_txn,
    25: add_offsets_to_txn,
    26: end_txn,
    28: txn_offset_commit,
    29: describe_acls,
    30: create_acls,
    31: delete_acls,
    32: describe_configs,
    33: alter_configs,
    37: create_partitions,
    42: delete_groups,
    44: alter_configs,
    50: describe_user_scram_credentials,
    60: describe_cluster,
    51: alter_user_scram_credentials,
}


def check(gate: Gate, key: int, body: Any, broker: Broker) -> Verdict:
    """The verdict on one request (APIs without a gate pass unchanged)."""
    if key == 3:
        return metadata(gate, body, broker)
    if key == 20:
        return delete_topics(gate, body, broker)
    gate_it = GATES.get(key)
    return gate_it(gate, body) if gate_it is not None else (body, _same)
