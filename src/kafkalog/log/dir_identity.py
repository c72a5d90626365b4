"""Who a data directory belongs to: its ``meta.properties`` (cluster id, node id, directory id).

A Kafka broker refuses a log directory formatted for another node or another cluster, and a
KRaft broker (3.7+) gives every directory a ``directory.id`` the first time it starts on it.
``kafkalog serve`` takes its directory the same way (:func:`claim`): an existing
``meta.properties`` is read (with :class:`~kafkalog.log.checkpoints.MetaProperties`, the one
parser of the format) and kept, its ids adopted, and a configured id that contradicts it
refused with Kafka's message; a directory without one gets a version 1 (KRaft) file, so the
same directory opens in Kafka's tools as one a broker was formatted on.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

from kafkalog.errors import KafkalogError
from kafkalog.log.checkpoints import META_PROPERTIES, MetaProperties, encode_uuid

#: the node id a directory gets when neither it nor the configuration names one
DEFAULT_NODE_ID = 1


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
    * version 0 (a ZooKeeper-era broker's): kept at version 0; a missing ``cluster.id`` or
      ``broker.id`` is added, as a ZooKeeper broker (0.10.1+) adds them;
    * a stored node id or cluster id different from the configured one:
      :class:`DirectoryIdentityError` with Kafka's message, nothing written;
    * an unreadable or invalid file: the parser's
      :class:`~kafkalog.log.checkpoints.CheckpointError` (file and byte position), nothing
      written.
    """
    path = os.path.join(os.fspath(data_dir), META_PROPERTIES)
    try:
        meta = MetaProperties.load(path)
    except FileNotFoundError:
        props = {
            "version": "1",
            "cluster.id": cluster_id if cluster_id is not None else new_cluster_id(),
            "node.id": str(node_id if node_id is not None else DEFAULT_NODE_ID),
            "directory.id": new_directory_id(),
        }
        MetaProperties.write(path, props)
        meta = MetaProperties.load(path)
        return _identity(meta, path)
    _check(meta, path, node_id, cluster_id)
    stored_node, stored_cluster = meta.node_id, meta.cluster_id
    added: dict[str, str] = {}
    if meta.version == 1 and meta.directory_id is None:
        added["directory.id"] = new_directory_id()  # as Kafka 3.7+ does at startup
    if stored_cluster is None:  # only a v0 file can lack it: a ZooKeeper broker adds it
        added["cluster.id"] = cluster_id if cluster_id is not None else new_cluster_id()
    if stored_node is None:  # likewise broker.id
        added["broker.id"] = str(node_id if node_id is not None else DEFAULT_NODE_ID)
    if added:
        MetaProperties.write(path, {**meta.properties, **added})
        meta = MetaProperties.load(path)
    return _identity(meta, path)


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
        meta = MetaProperties.load(path)
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


def _identity(meta: MetaProperties, path: str) -> DirectoryIdentity:
    node, cluster = meta.node_id, meta.cluster_id
    assert node is not None and cluster is not None  # claim() wrote whatever was missing
    return DirectoryIdentity(
        cluster_id=cluster,
        node_id=node,
        directory_id=meta.directory_id,
        version=meta.version,
        path=path,
    )
