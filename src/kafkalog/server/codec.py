"""Requests in, responses out: Kafka's framing and headers, the bodies through ``kio``.

``kio`` is generated from Kafka's own message schemas, so every field, nullable flag and tagged
field of every version comes from Kafka rather than from hand-written structs. This module adds
what a broker needs around it: which (API, version) pairs this server answers
(:data:`SUPPORTED`), the header version each one uses, and errors that say which connection sent
what and where the bytes went wrong.
"""

from __future__ import annotations

import contextlib
import functools
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema as _load_request_schema
from kio.index import load_response_schema as _load_response_schema
from kio.serial import entity_reader, entity_writer

from kafkalog.errors import KafkalogError

API_VERSIONS_KEY = 18

# kio resolves a schema's module by name at each call (``pkgutil.resolve_name``): once here
load_request_schema = functools.cache(_load_request_schema)
load_response_schema = functools.cache(_load_response_schema)

#: The APIs this broker answers and their version ranges (Kafka 4.x's lower bounds; upper bounds
#: where the server implements every field of the version).
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 12),  # Fetch (v13 addresses topics by id only)
    2: (1, 8),  # ListOffsets
    3: (0, 12),  # Metadata
    8: (2, 8),  # OffsetCommit
    9: (1, 7),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 4),  # ListGroups
    17: (1, 1),  # SaslHandshake (v0's unframed tokens are not served)
    18: (0, 3),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    24: (0, 3),  # AddPartitionsToTxn (v4+ is the brokers' batched form)
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn
    28: (0, 3),  # TxnOffsetCommit
    29: (1, 3),  # DescribeAcls
    30: (1, 3),  # CreateAcls
    31: (1, 3),  # DeleteAcls
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    44: (0, 1),  # IncrementalAlterConfigs
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    60: (0, 2),  # DescribeCluster
    68: (0, 1),  # ConsumerGroupHeartbeat: answered UNSUPPORTED_VERSION (groups.py says why)
}

_HEAD = struct.Struct(">hhi")


class ProtocolError(KafkalogError):
    """A request that cannot be understood: the connection that sent it is closed."""


@dataclass(frozen=True)
class Request:
    """One decoded request: its header fields and its ``kio`` body."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """API key, version and correlation id: the part of every header version that is fixed."""
    if len(frame) < _HEAD.size:
        raise ProtocolError(f"a request of {len(frame)} bytes is shorter than a request header")
    key, version, correlation = _HEAD.unpack_from(frame, 0)
    return int(key), int(version), int(correlation)


def is_supported(api_key: int, api_version: int) -> bool:
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= api_version <= bounds[1]


def decode_request(frame: bytes | memoryview) -> Request:
    """Parse a whole request frame (without its size prefix).

    Raises :class:`ProtocolError` for an API or version this server does not answer and for
    bytes that do not parse.
    """
    key, version, correlation = peek_header(frame)
    if not is_supported(key, version):
        raise ProtocolError(f"API key {key} version {version} is not supported")
    schema = load_request_schema(key, version)
    data = bytes(frame)
    try:
        header, used = entity_reader(schema.__header_schema__)(data, 0)
        body, size = entity_reader(schema)(data, used)
    except Exception as e:  # kio raises its own and ValueError/IndexError on bad bytes
        raise ProtocolError(
            f"API key {key} version {version}: malformed request ({type(e).__name__}: {e})"
        ) from None
    # bytes after the body are ignored, as Kafka's own parser ignores them
    del size
    return Request(key, version, correlation, getattr(header, "client_id", None), body)


def response_type(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """The size-prefixed response frame: header (v0, or v1 when flexible; ApiVersions always
    v0 so that a client that sent a newer version can still read the error) and body."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    schema = type(body)
    header_type = schema.__header_schema__
    entity_writer(header_type)(buf, header_type(correlation_id=correlation_id))
    entity_writer(schema)(buf, body)
    out = buf.getbuffer()
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def unsupported_api_versions_response(correlation_id: int) -> bytes:
    """ApiVersions v0 with UNSUPPORTED_VERSION and the supported ranges: what Kafka answers to
    an ApiVersions request of a version it does not know, so the client retries with v0..max."""
    from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16

    body = ApiVersionsResponse(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersion(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
            for k, (lo, hi) in sorted(SUPPORTED.items())
        ),
    )
    return encode_response(API_VERSIONS_KEY, 0, correlation_id, body)


# -- building versioned responses -------------------------------------------------------------
# Handlers describe a response once, as nested dicts; :func:`build` makes the ``kio`` dataclass
# of the version the client asked for, keeping the fields that version has and filling the
# ones the handler did not give with the schema's default (or the type's zero value).

#: per ``kio`` class: (field name, converter of a handler's value, default, type) for each
#: field; the default is the schema's, else the type's zero value (``_NO_DEFAULT``: none).
#: Made once per class, so a request's response is built without inspecting a type hint (the
#: typing calls were a fifth of a small produce's time on the server).
_PLANS: dict[type, list[tuple[str, Callable[[Any], Any], Any, Any]]] = {}
_CONVERTERS: dict[Any, Callable[[Any], Any]] = {}


def _field_plan(cls: type) -> list[tuple[str, Callable[[Any], Any], Any, Any]]:
    plan = _PLANS.get(cls)
    if plan is None:
        import dataclasses
        import typing

        hints = typing.get_type_hints(cls)
        plan = []
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default: Any = f.default
            elif f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            else:
                default = _NO_DEFAULT
            tp = hints[f.name]
            if default is _NO_DEFAULT:
                # immutable: None, (), 0, "", b"", a zero id...; an entity without a zero
                # value keeps _NO_DEFAULT, and build() raises if it is needed
                with contextlib.suppress(TypeError):
                    default = _zero(tp)
            plan.append((f.name, _converter(tp), default, tp))
        _PLANS[cls] = plan
    return plan


_NO_DEFAULT = object()


def _zero(tp: Any) -> Any:
    import datetime
    import types
    import typing
    import uuid

    from kio.schema.errors import ErrorCode

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        return None
    if origin is tuple:
        return ()
    if tp is ErrorCode:
        return ErrorCode.none
    if isinstance(tp, type):
        if issubclass(tp, datetime.timedelta):
            return datetime.timedelta(0)
        if issubclass(tp, bool):
            return False
        if issubclass(tp, int):
            return 0
        if issubclass(tp, str):
            return ""
        if issubclass(tp, bytes):
            return b""
        if issubclass(tp, uuid.UUID):
            return uuid.UUID(int=0)
    raise TypeError(f"no zero value for {tp!r}")


def _converter(tp: Any) -> Callable[[Any], Any]:
    """The conversion of a handler's value to field type ``tp`` (what :func:`_convert` does),
    with every decision that depends on ``tp`` alone taken once."""
    found = _CONVERTERS.get(tp)
    if found is None:
        found = _CONVERTERS[tp] = _make_converter(tp)
    return found


def _make_converter(tp: Any) -> Callable[[Any], Any]:
    import datetime
    import types
    import typing

    from kio.schema.errors import ErrorCode

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    union = origin in (typing.Union, types.UnionType)
    nullable = union and type(None) in args
    main: Callable[[Any], Any]
    if union:
        inner = [a for a in args if a is not type(None)]
        main = _converter(inner[0]) if len(inner) == 1 else _same
    elif origin is tuple:
        item = _converter(args[0])

        def main(value: Any) -> Any:
            return tuple([item(v) for v in value])

    else:
        is_error = tp is ErrorCode
        to_delta = isinstance(tp, type) and issubclass(tp, datetime.timedelta)
        to_time = isinstance(tp, type) and issubclass(tp, datetime.datetime)

        def main(value: Any) -> Any:
            if isinstance(value, dict):
                return build(tp, value)
            if is_error:
                return ErrorCode(int(value))
            if to_delta and not isinstance(value, datetime.timedelta):
                return datetime.timedelta(milliseconds=int(value))
            if to_time and not isinstance(value, datetime.datetime):
                return datetime.datetime.fromtimestamp(int(value) / 1000, datetime.UTC)
            return value

    def convert(value: Any) -> Any:
        if value is None:
            # a non-nullable field of this version takes its zero value
            return None if nullable else _zero(tp)
        return main(value)

    return convert


def _same(value: Any) -> Any:
    return value


def _convert(tp: Any, value: Any) -> Any:
    return _converter(tp)(value)


def build(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)`` for a ``kio`` schema class, recursively, version-tolerant."""
    kwargs: dict[str, Any] = {}
    for name, convert, default, tp in _field_plan(cls):
        if name in values:
            kwargs[name] = convert(values[name])
        elif default is not _NO_DEFAULT:
            kwargs[name] = default
        else:
            kwargs[name] = _zero(tp)
    return cls(**kwargs)
