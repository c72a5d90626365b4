"""Fetch responses whose record bytes go from the segment file to the socket without passing
through Python (Kafka's zero-copy fetch: ``FileRecords.writeTo`` and ``sendfile``).

The response codec (kio) writes a frame into one buffer, records included. So each partition's
records, a :class:`~kafkalog.log.segment.FileRegion`, is swapped for a random 16-byte
placeholder before encoding; the encoded frame is then cut around each placeholder and its
length prefix, and the pieces are sent in order: the frame's own bytes with ``write``, each
region with ``loop.sendfile`` from a duplicate of the segment's descriptor (``os.sendfile`` on
a plain TCP socket; asyncio reads and writes it itself on a TLS one). The frame's size field and
each records length prefix (``int32``, or an unsigned varint of length + 1 from the flexible
versions on) are rewritten for the real lengths.
"""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any

from kafkalog.log.segment import FileRegion
from kafkalog.records.varint import write_unsigned

PLACEHOLDER_BYTES = 16
_INT32_PLACEHOLDER_LENGTH = struct.pack(">i", PLACEHOLDER_BYTES)
_COMPACT_PLACEHOLDER_LENGTH = bytes([PLACEHOLDER_BYTES + 1])

Piece = bytes | FileRegion


def take_regions(result: dict[str, Any]) -> dict[bytes, FileRegion]:
    """Replace every partition's FileRegion in a Fetch result with a placeholder; the map
    from placeholder to region."""
    regions: dict[bytes, FileRegion] = {}
    for topic in result.get("responses", ()):
        for partition in topic["partitions"]:
            records = partition.get("records")
            if isinstance(records, FileRegion):
                placeholder = os.urandom(PLACEHOLDER_BYTES)
                while placeholder in regions:  # pragma: no cover - 2**-128
                    placeholder = os.urandom(PLACEHOLDER_BYTES)
                regions[placeholder] = records
                partition["records"] = placeholder
    return regions


def splice(frame: bytes, regions: dict[bytes, FileRegion]) -> list[Piece]:
    """The frame as pieces to send in order, each placeholder (and its length prefix) replaced
    by its region and the real length. A placeholder not found where the codec must have put
    it is an error in this module, not in the data: it raises."""
    found: list[tuple[int, bytes]] = []
    for placeholder in regions:
        at = frame.find(placeholder)
        if at < 0:
            raise AssertionError("a records placeholder is missing from the encoded frame")
        found.append((at, placeholder))
    found.sort()
    pieces: list[Piece] = []
    cursor = 0
    growth = 0
    for at, placeholder in found:
        region = regions[placeholder]
        if frame[at - 1 : at] == _COMPACT_PLACEHOLDER_LENGTH:
            prefix_at = at - 1
            prefix = bytearray()
            write_unsigned(prefix, region.length + 1)
        elif frame[at - 4 : at] == _INT32_PLACEHOLDER_LENGTH:
            prefix_at = at - 4
            prefix = bytearray(struct.pack(">i", region.length))
        else:
            raise AssertionError("a records placeholder without its length prefix")
        pieces.append(frame[cursor:prefix_at] + prefix)
        pieces.append(region)
        growth += len(prefix) - (at - prefix_at) + region.length - PLACEHOLDER_BYTES
        cursor = at + PLACEHOLDER_BYTES
    pieces.append(frame[cursor:])
    head = pieces[0]
    assert isinstance(head, bytes)
    size = struct.unpack_from(">i", head)[0] + growth
    pieces[0] = struct.pack(">i", size) + head[4:]
    return pieces


async def send(writer: asyncio.StreamWriter, pieces: list[Piece], where: str) -> None:
    """Write the pieces in order; regions with ``sendfile``. A region cut short under the send
    (a segment truncated meanwhile) leaves a frame that cannot be completed: the connection is
    closed (ConnectionError), and the client fetches again on a new one."""
    loop = asyncio.get_running_loop()
    for piece in pieces:
        if isinstance(piece, bytes):
            writer.write(piece)
            continue
        if not piece.length:
            continue
        fd = piece.file.duplicate_fd()
        if fd < 0:  # a file in an object store: no descriptor, read it
            data = piece.read()
            if len(data) != piece.length:
                raise ConnectionError(f"{where}: {piece.file.path} shrank under a fetch")
            writer.write(data)
            continue
        with open(fd, "rb", closefd=True) as file:
            await writer.drain()
            sent = await loop.sendfile(writer.transport, file, piece.position, piece.length)
        if sent != piece.length:
            raise ConnectionError(
                f"{where}: {piece.file.path} shrank under a fetch ({sent} of {piece.length} "
                f"bytes from position {piece.position} sent)"
            )
    await writer.drain()
