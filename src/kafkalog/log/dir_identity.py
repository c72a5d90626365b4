"""Who a data directory belongs to: its ``meta.properties`` (cluster id, node id, directory id).

A Kafka broker refuses a log directory formatted for another node or another cluster, and a
KRaft broker (3.7+) gives every directory a ``directory.id`` the first time it starts on it.
``kafkalog serve`` takes its directory the same way (:func:`claim`): an existing
``meta.properties`` is read (with :class:`~kafkalog.log.checkpoints.MetaProperties`, the one
parser of the format) and kept, its ids adopted, and a configured id that contradicts it
refused with Kafka's message; a directory without one gets a version 1 (KRaft) file, so the
same directory opens in Kafka's tools as one a broker was formatted on.

An existing file is never rewritten to change who the directory belongs to: a malformed one (a
key no Kafka writes, a version 0 file without ``broker.id``, a value Kafka cannot read) is
refused naming the file and the byte of the offending line, and a ZooKeeper-era (version 0)
directory is served without a ``cluster.id`` written into it (its broker got the cluster id
from ZooKeeper, and a real broker refuses a directory whose stored id differs from its
cluster's). The only key ever added to an existing file is a version 1 file's missing
``directory.id``, as Kafka 3.7+ adds it.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from kafkalog.errors import KafkalogError
from kafkalog.log.checkpoints import (
    META_PROPERTIES,
    CheckpointError,
    MetaProperties,
    encode_uuid,
)

#: the node id a directory gets when neither it nor the configuration names one
DEFAULT_NODE_ID = 1

#: every key a Kafka broker or ``kafka-storage.sh`` writes into ``meta.properties``
KNOWN_KEYS = frozenset({"version", "broker.id", "node.id", "cluster.id", "directory.id"})


class DirectoryIdentityError(KafkalogError):
    """The data directory was formatted for another node or cluster (Kafka refuses to start)."""


@dataclass(frozen=True)
class DirectoryIdentity:
    """The ids a data directory's ``meta.properties`` holds, as a broker uses them."""

    cluster_id: str
    node_id: int
    directory_id: str | None
    version: int
    path: str


def new_cluster_id() -> str:
    """A cluster id as ``kafka-storage.sh random-uuid`` draws one (a Kafka Uuid, no ``-`` so
    it never reads as a command-line flag)."""
    return _random_uuid()


def new_directory_id() -> str:
    """A directory id as Kafka's ``generateValidDirectoryId`` draws one: random, never one of
    the reserved ids (all but the last byte zero: UNASSIGNED, LOST, MIGRATING...), never
    starting with ``-``."""
    return _random_uuid()


def _random_uuid() -> str:
    while True:
        raw = uuid.uuid4().bytes  # version nibble set: never one of the reserved ids
        text = encode_uuid(raw)
        if "-" not in text:
            return text


def claim(
    data_dir: str | os.PathLike[str],
    *,
    node_id: int | None = None,
    cluster_id: str | None = None,
) -> DirectoryIdentity:
    """Read (or create) ``data_dir``'s ``meta.properties`` for a broker with these ids
    (None: whatever the directory says; for a new directory, :data:`DEFAULT_NODE_ID` and a
    fresh cluster id). The caller must hold the directory (a writable
    :class:`~kafkalog.log.logdir.LogDir`).

    * none there: a version 1 file (``cluster.id``, ``node.id``, ``directory.id``) is written
      through ``meta.properties.tmp`` and a rename, as Kafka's ``kafka-storage.sh format``
      and broker write it;
    * version 1 without ``directory.id``: one is added, the other keys kept (Kafka 3.7+ does
      this at startup);
    * version 0 (a ZooKeeper-era broker's): read only, never written; without a
      ``cluster.id`` (0.9/0.10.0, or a ZooKeeper cluster's id) the broker uses the configured
      one or one derived from the directory's path, in memory;
    * a malformed file (:func:`load`): refused, nothing written;
    * a stored node id or cluster id different from the configured one:
      :class:`DirectoryIdentityError` with Kafka's message, nothing written;
    * an unreadable or invalid file: the parser's
      :class:`~kafkalog.log.checkpoints.CheckpointError` (file and byte position), nothing
      written.
    """
    path = os.path.join(os.fspath(data_dir), META_PROPERTIES)
    try:
        meta = load(path)
    except FileNotFoundError:
        props = {
            "version": "1",
            "cluster.id": cluster_id if cluster_id is not None else new_cluster_id(),
            "node.id": str(node_id if node_id is not None else DEFAULT_NODE_ID),
            "directory.id": new_directory_id(),
        }
        MetaProperties.write(path, props)
        meta = MetaProperties.load(path)
        return _identity(meta, path, cluster_id)
    _check(meta, path, node_id, cluster_id)
    if meta.version == 1 and meta.directory_id is None:
        # as Kafka 3.7+ does at startup; the ids the file holds are kept as they are
        MetaProperties.write(path, {**meta.properties, "directory.id": new_directory_id()})
        meta = load(path)
    return _identity(meta, path, cluster_id)


def load(path: str | os.PathLike[str]) -> MetaProperties:
    """``meta.properties`` read with Kafka's typed checks, and refused when it is not a file a
    Kafka broker wrote: a key none writes (a damaged line reads as one), or a version 0 file
    without ``broker.id`` (every ZooKeeper-era broker writes it). Raises
    :class:`~kafkalog.log.checkpoints.CheckpointError` naming the file and the byte of the
    line; ``FileNotFoundError`` when there is none."""
    meta = MetaProperties.load(path)
    for key in meta.properties:
        if key not in KNOWN_KEYS:
            raise CheckpointError(
                f"malformed meta.properties: unknown key {key!r} (Kafka writes only "
                f"{', '.join(sorted(KNOWN_KEYS))}); a damaged line? Restore the file from a "
                "backup or the broker's own copy; kafkalog never rewrites it",
                path=meta.path,
                position=meta.positions.get(key),
            )
    if meta.version == 0 and "broker.id" not in meta.properties:
        raise CheckpointError(
            "malformed meta.properties: version 0 without broker.id (every ZooKeeper-era "
            "broker writes it); restore the file, kafkalog never rewrites it",
            path=meta.path,
            position=meta.positions.get("version", 0),
        )
    return meta


def verify(
    data_dir: str | os.PathLike[str],
    *,
    node_id: int | None = None,
    cluster_id: str | None = None,
) -> None:
    """Refuse, before anything is opened or written, a directory :func:`claim` would refuse
    (another node's or cluster's, an invalid ``meta.properties``); a directory without one
    passes. Reads only: a broker may be running on it."""
    path = os.path.join(os.fspath(data_dir), META_PROPERTIES)
    try:
        meta = load(path)
    except FileNotFoundError:
        return
    _check(meta, path, node_id, cluster_id)


def _check(meta: MetaProperties, path: str, node_id: int | None, cluster_id: str | None) -> None:
    stored_node = meta.node_id
    if node_id is not None and stored_node is not None and stored_node != node_id:
        raise DirectoryIdentityError(
            f"Stored node id {stored_node} doesn't match previous node id {node_id} in {path}. "
            "If you moved your data, make sure your configured node id matches. If you intend "
            "to create a new node, you should remove all data in your data directories."
        )
    stored_cluster = meta.cluster_id
    if cluster_id is not None and stored_cluster is not None and stored_cluster != cluster_id:
        raise DirectoryIdentityError(
            f"Invalid cluster.id in: {path}. Expected {cluster_id}, but read {stored_cluster}"
        )


def _identity(meta: MetaProperties, path: str, configured: str | None) -> DirectoryIdentity:
    node, cluster = meta.node_id, meta.cluster_id
    assert node is not None  # load() refuses a file without one
    if cluster is None:
        # a ZooKeeper-era directory (its cluster id lived in ZooKeeper): the configured id, or
        # one drawn from the directory's path, stable across restarts and never written
        cluster = configured if configured is not None else _cluster_id_of(path)
    return DirectoryIdentity(
        cluster_id=cluster,
        node_id=node,
        directory_id=meta.directory_id,
        version=meta.version,
        path=path,
    )


def _cluster_id_of(path: str) -> str:
    digest = uuid.uuid5(uuid.NAMESPACE_URL, "kafkalog:" + os.path.realpath(path)).bytes
    return encode_uuid(digest)
