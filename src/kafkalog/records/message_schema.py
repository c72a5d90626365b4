"""One interpreter of Kafka's JSON message-definition format.

Kafka describes every internal record (offset commits, group metadata, transaction state, KRaft
metadata records, snapshot headers...) in JSON files from which its build generates Java
classes. kafkalog vendors those files unchanged (``records/schemas/``, Apache-2.0, see the
``NOTICE`` there) and reads them here at run time, so a record layout is never hand-written and
a new Kafka schema is a file copy: versions, ``flexibleVersions`` (compact lengths and tagged
fields), ``nullableVersions``, ``taggedVersions``, nested and common structs and arrays.

A decoded message is a ``dict`` keyed by the field names as Kafka's JSON converters write them
(``lowerCaseFirst`` of the schema name: ``GroupId`` -> ``groupId``), holding Python values:
``int``, ``bool``, ``float``, ``str``, ``bytes``, ``uuid.UUID``, lists and nested dicts.
:meth:`MessageSchema.to_json` renders such a dict the way Kafka's generated ``JsonConverter``
does (the text ``kafka-dump-log.sh`` prints).
"""

from __future__ import annotations

import base64
import decimal
import json
import struct
import uuid
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from kafkalog.errors import CorruptRecordError

_MAX_ELEMENTS = 1 << 24  # no length field is trusted beyond the bytes that are left anyway

_FIXED = {
    "bool": struct.Struct(">?"),
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "uint16": struct.Struct(">H"),
    "int32": struct.Struct(">i"),
    "uint32": struct.Struct(">I"),
    "int64": struct.Struct(">q"),
    "float64": struct.Struct(">d"),
}
_VARIABLE = ("string", "bytes", "records")


@dataclass(frozen=True)
class Versions:
    """A version range as the schema files write it: ``"0+"``, ``"1-3"``, ``"2"``, ``"none"``."""

    low: int
    high: int  # inclusive; -1 with low 0 means empty

    @staticmethod
    def parse(text: str | None, default: Versions | None = None) -> Versions:
        if text is None:
            return default if default is not None else Versions(0, -1)
        text = text.strip()
        if text in ("", "none"):
            return Versions(0, -1)
        if text.endswith("+"):
            return Versions(int(text[:-1]), 1 << 15)
        if "-" in text:
            low, high = text.split("-")
            return Versions(int(low), int(high))
        return Versions(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high


@dataclass
class Field:
    """One field of a struct, with the versions it exists, is nullable or is tagged in."""

    name: str  # as Kafka's JSON converter writes it
    type: str  # "int32", "string", "[]int32", "[]SomeStruct", "SomeStruct"...
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any
    struct: StructSpec | None  # the element/field struct for struct and []struct types

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass
class StructSpec:
    name: str
    fields: list[Field] = field(default_factory=list)


def _lower_first(name: str) -> str:
    return name[:1].lower() + name[1:]


def _strip_comments(text: str) -> str:
    """Remove the ``//`` comments of Kafka's schema files (outside of string literals)."""
    out: list[str] = []
    for line in text.splitlines():
        in_string = False
        escaped = False
        cut = len(line)
        for i, ch in enumerate(line):
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
            elif ch == "/" and line[i + 1 : i + 2] == "/":
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


class MessageSchema:
    """A message definition (one vendored JSON file) that encodes and decodes its versions."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.name: str = spec["name"]
        self.type: str = spec.get("type", "data")
        self.api_key: int | None = spec.get("apiKey")
        self.valid_versions = Versions.parse(spec.get("validVersions"))
        self.flexible_versions = Versions.parse(spec.get("flexibleVersions"))
        self._common: dict[str, StructSpec] = {}
        common = spec.get("commonStructs", [])
        for c in common:  # declared first so fields may refer to them in any order
            self._common[c["name"]] = StructSpec(c["name"])
        for c in common:
            self._common[c["name"]].fields = self._fields(c.get("fields", []))
        self.root = StructSpec(self.name, self._fields(spec.get("fields", [])))

    def _fields(self, specs: list[dict[str, Any]]) -> list[Field]:
        fields = []
        for f in specs:
            # a tagged-only field may leave "versions" out: it exists where it is tagged
            versions = Versions.parse(f.get("versions") or f.get("taggedVersions"))
            ftype: str = f["type"]
            element = ftype[2:] if ftype.startswith("[]") else ftype
            struct_spec: StructSpec | None = None
            if "fields" in f:
                struct_spec = StructSpec(element, self._fields(f["fields"]))
            elif element not in _FIXED and element not in _VARIABLE and element != "uuid":
                struct_spec = self._common.get(element)
                if struct_spec is None:
                    raise ValueError(f"schema {self.name}: unknown type {ftype!r}")
            fields.append(
                Field(
                    name=_lower_first(f["name"]),
                    type=ftype,
                    versions=versions,
                    nullable=Versions.parse(f.get("nullableVersions")),
                    tagged=Versions.parse(f.get("taggedVersions")),
                    tag=None if f.get("tag") is None else int(f["tag"]),
                    default=f.get("default"),
                    struct=struct_spec,
                )
            )
        return fields

    # -- defaults --------------------------------------------------------------------------
    def default_value(self, f: Field, version: int) -> Any:
        """The field's value when absent: its schema default, else the type's zero."""
        d = f.default
        if d == "null":
            return None
        if f.is_array:
            return []
        if f.struct is not None:
            return self._default_struct(f.struct, version)
        t = f.type
        if t == "bool":
            return d is True or (isinstance(d, str) and d.lower() == "true")
        if t in _FIXED and t != "float64":
            return int(d, 0) if isinstance(d, str) and d else int(d or 0)
        if t == "float64":
            return float(d or 0.0)
        if t == "uuid":
            return uuid.UUID(int=0)
        if t == "string":
            return "" if d is None else str(d)
        return b""

    def _default_struct(self, spec: StructSpec, version: int) -> dict[str, Any]:
        return {
            f.name: self.default_value(f, version) for f in spec.fields if version in f.versions
        }

    # -- decoding ------------------------------------------------------------------------------
    def decode(
        self, data: bytes | memoryview, version: int, *, what: str = "", exact: bool = True
    ) -> dict[str, Any]:
        """The message of ``version`` in ``data``; CorruptRecordError (naming ``what`` and the
        byte position) on anything that does not fit, or on bytes left over when ``exact``
        (the consumer protocol's embedded messages allow a newer version's extra fields)."""
        if version not in self.valid_versions:
            raise CorruptRecordError(
                f"version {version} of {self.name} is unknown "
                f"(known: {self.valid_versions.low}-{self.valid_versions.high})",
                path=what or self.name,
            )
        reader = _Reader(memoryview(data).cast("B"), what or self.name)
        value = self._read_struct(reader, self.root, version)
        if exact and reader.pos != len(reader.buf):
            raise CorruptRecordError(
                path=reader.what,
                reason=f"{len(reader.buf) - reader.pos} bytes left after {self.name} v{version}",
                position=reader.pos,
            )
        return value

    def _read_struct(self, r: _Reader, spec: StructSpec, version: int) -> dict[str, Any]:
        flexible = version in self.flexible_versions
        out: dict[str, Any] = {}
        tagged: dict[int, Field] = {}
        for f in spec.fields:
            if version not in f.versions:
                continue
            if flexible and version in f.tagged:
                assert f.tag is not None
                tagged[f.tag] = f
                out[f.name] = self.default_value(f, version)
                continue
            out[f.name] = self._read_field(r, f, version, flexible)
        if flexible:
            for _ in range(r.uvarint_count()):
                tag = r.uvarint()
                size = r.uvarint_count()
                end = r.pos + size
                tf = tagged.get(tag)
                if tf is None:
                    r.take(size)  # an unknown tagged field: skipped, as Kafka does
                    continue
                out[tf.name] = self._read_field(r, tf, version, flexible)
                if r.pos != end:
                    raise CorruptRecordError(
                        path=r.what,
                        reason=f"tagged field {tf.name} of {spec.name} is {size} bytes "
                        f"but its value is {r.pos - end + size}",
                        position=r.pos,
                    )
        return out

    def _read_field(self, r: _Reader, f: Field, version: int, flexible: bool) -> Any:
        nullable = version in f.nullable
        if f.is_array:
            n = r.uvarint_count(nullable=True) if flexible else r.int32_count()
            if n < 0:
                if not nullable:
                    raise CorruptRecordError(
                        path=r.what, reason=f"null array {f.name}, not nullable", position=r.pos
                    )
                return None
            return [self._read_element(r, f, f.element, version, flexible) for _ in range(n)]
        if f.struct is not None:
            if nullable:
                present = r.fixed("int8")
                if present < 0:
                    return None
            return self._read_struct(r, f.struct, version)
        return self._read_element(r, f, f.type, version, flexible, nullable)

    def _read_element(
        self,
        r: _Reader,
        f: Field,
        t: str,
        version: int,
        flexible: bool,
        nullable: bool = False,
    ) -> Any:
        if f.struct is not None:
            return self._read_struct(r, f.struct, version)
        if t in _FIXED:
            return r.fixed(t)
        if t == "uuid":
            return uuid.UUID(bytes=bytes(r.take(16)))
        if t == "string":
            n = r.uvarint_count(nullable=True) if flexible else r.fixed("int16")
            if n < 0:
                if not nullable:
                    raise CorruptRecordError(
                        path=r.what, reason=f"null string {f.name}, not nullable", position=r.pos
                    )
                return None
            raw = r.take(n)
            try:
                return bytes(raw).decode("utf-8")
            except UnicodeDecodeError:
                raise CorruptRecordError(
                    path=r.what, reason=f"string {f.name} is not UTF-8", position=r.pos - n
                ) from None
        # bytes, records
        n = r.uvarint_count(nullable=True) if flexible else r.fixed("int32")
        if n < 0:
            if not nullable:
                raise CorruptRecordError(
                    path=r.what, reason=f"null bytes {f.name}, not nullable", position=r.pos
                )
            return None
        return bytes(r.take(n))

    # -- encoding ------------------------------------------------------------------------------
    def encode(self, value: dict[str, Any], version: int) -> bytes:
        """The bytes of ``value`` as ``version`` (absent fields take their defaults)."""
        if version not in self.valid_versions:
            raise ValueError(f"version {version} of {self.name} is unknown")
        out = bytearray()
        self._write_struct(out, self.root, value, version)
        return bytes(out)

    def _write_struct(
        self, out: bytearray, spec: StructSpec, value: dict[str, Any], version: int
    ) -> None:
        flexible = version in self.flexible_versions
        tagged: list[tuple[int, bytes]] = []
        for f in spec.fields:
            if version not in f.versions:
                continue
            v = value[f.name] if f.name in value else self.default_value(f, version)
            if flexible and version in f.tagged:
                if _equal(v, self.default_value(f, version)):
                    continue
                buf = bytearray()
                self._write_field(buf, f, v, version, flexible)
                assert f.tag is not None
                tagged.append((f.tag, bytes(buf)))
                continue
            self._write_field(out, f, v, version, flexible)
        if flexible:
            _put_uvarint(out, len(tagged))
            for tag, raw in sorted(tagged):
                _put_uvarint(out, tag)
                _put_uvarint(out, len(raw))
                out += raw

    def _write_field(self, out: bytearray, f: Field, v: Any, version: int, flex: bool) -> None:
        nullable = version in f.nullable
        if v is None and not (nullable or (f.default == "null")):
            raise ValueError(f"{self.name}.{f.name} is not nullable in version {version}")
        if f.is_array:
            if v is None:
                _put_uvarint(out, 0) if flex else out.extend(_FIXED["int32"].pack(-1))
                return
            _put_uvarint(out, len(v) + 1) if flex else out.extend(_FIXED["int32"].pack(len(v)))
            for item in v:
                self._write_element(out, f, f.element, item, version, flex)
            return
        if f.struct is not None:
            if nullable:
                out.extend(_FIXED["int8"].pack(-1 if v is None else 1))
                if v is None:
                    return
            self._write_struct(out, f.struct, v, version)
            return
        self._write_element(out, f, f.type, v, version, flex)

    def _write_element(
        self, out: bytearray, f: Field, t: str, v: Any, version: int, flex: bool
    ) -> None:
        if f.struct is not None:
            self._write_struct(out, f.struct, v, version)
        elif t in _FIXED:
            out += _FIXED[t].pack(v)
        elif t == "uuid":
            out += (v if isinstance(v, uuid.UUID) else uuid.UUID(str(v))).bytes
        else:
            raw = None if v is None else (v.encode("utf-8") if isinstance(v, str) else bytes(v))
            if raw is None:
                if flex:
                    _put_uvarint(out, 0)
                else:
                    out += _FIXED["int16" if t == "string" else "int32"].pack(-1)
                return
            if flex:
                _put_uvarint(out, len(raw) + 1)
            else:
                out += _FIXED["int16" if t == "string" else "int32"].pack(len(raw))
            out += raw

    # -- Kafka's JSON ----------------------------------------------------------------------
    def to_json_tree(self, value: dict[str, Any], version: int) -> dict[str, Any]:
        """``value`` as Kafka's generated ``JsonConverter.write`` builds it: the fields of this
        version in schema order, tagged fields only when not their default, bytes as base64
        and UUIDs in Kafka's URL-safe base64."""
        return self._json_struct(self.root, value, version)

    def to_json(self, value: dict[str, Any], version: int) -> str:
        return kafka_json(self.to_json_tree(value, version))

    def _json_struct(self, spec: StructSpec, value: dict[str, Any], version: int) -> dict[str, Any]:
        flexible = version in self.flexible_versions
        out: dict[str, Any] = {}
        for f in spec.fields:
            if version not in f.versions:
                continue
            v = value.get(f.name, self.default_value(f, version))
            if flexible and version in f.tagged and _equal(v, self.default_value(f, version)):
                continue
            out[f.name] = self._json_value(f, v, version)
        return out

    def _json_value(self, f: Field, v: Any, version: int) -> Any:
        if v is None:
            return None
        if f.is_array:
            return [self._json_scalar(f, f.element, item, version) for item in v]
        return self._json_scalar(f, f.type, v, version)

    def _json_scalar(self, f: Field, t: str, v: Any, version: int) -> Any:
        if f.struct is not None:
            return self._json_struct(f.struct, v, version)
        if t == "uuid":
            return kafka_uuid(v)
        if t in ("bytes", "records"):
            return _JavaBytes(bytes(v))
        if t == "float64":
            return _JavaDouble(float(v))
        return v


def _equal(a: Any, b: Any) -> bool:
    return bool(a == b)


class _JavaBytes(bytes):
    """Bytes rendered as Jackson's BinaryNode: standard base64 with padding."""


class _JavaDouble(float):
    """A double rendered as Java's ``Double.toString``."""


def _java_double(d: float) -> str:
    """Java's ``Double.toString``: plain between 1e-3 and 1e7, else ``d.dddE<n>``, with the
    shortest digits that read back as the same double (as Python's ``repr`` picks them)."""
    if d != d or d in (float("inf"), float("-inf")):
        return _str("NaN" if d != d else ("Infinity" if d > 0 else "-Infinity"))
    if d == 0 or 1e-3 <= abs(d) < 1e7:
        text = f"{d!r}"
        return text if "." in text else text + ".0"
    sign, digits, exponent = decimal.Decimal(repr(d)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    power = exponent + len(text) - 1
    mantissa = text[0] + "." + (text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{power}"


def kafka_json(tree: Any) -> str:
    """Compact JSON as Jackson's ``ObjectNode.toString`` writes it (no spaces, UTF-8 text)."""
    if isinstance(tree, dict):
        return "{" + ",".join(f"{_str(k)}:{kafka_json(v)}" for k, v in tree.items()) + "}"
    if isinstance(tree, list):
        return "[" + ",".join(kafka_json(v) for v in tree) + "]"
    if isinstance(tree, _JavaBytes):
        return _str(base64.b64encode(tree).decode("ascii"))
    if isinstance(tree, _JavaDouble):
        return _java_double(tree)
    if tree is True:
        return "true"
    if tree is False:
        return "false"
    if tree is None:
        return "null"
    if isinstance(tree, str):
        return _str(tree)
    return str(tree)


def _str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def plain_json(tree: Any) -> Any:
    """The tree with Kafka's renderings (base64 bytes, Java doubles) as plain JSON values."""
    if isinstance(tree, dict):
        return {k: plain_json(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [plain_json(v) for v in tree]
    if isinstance(tree, _JavaBytes):
        return base64.b64encode(tree).decode("ascii")
    if isinstance(tree, _JavaDouble):
        return float(tree)
    return tree


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def parse_kafka_uuid(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _put_uvarint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


class _Reader:
    """Bounded reads over one record's bytes: every length is checked against what is left."""

    def __init__(self, buf: memoryview, what: str) -> None:
        self.buf = buf
        self.pos = 0
        self.what = what

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.buf):
            raise CorruptRecordError(
                path=self.what,
                reason=f"{n} bytes needed, {len(self.buf) - self.pos} left",
                position=self.pos,
            )
        view = self.buf[self.pos : self.pos + n]
        self.pos += n
        return view

    def fixed(self, t: str) -> Any:
        s = _FIXED[t]
        return s.unpack(self.take(s.size))[0]

    def uvarint(self) -> int:
        shift = 0
        result = 0
        while True:
            if self.pos >= len(self.buf):
                raise CorruptRecordError(
                    path=self.what, reason="truncated varint", position=self.pos
                )
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise CorruptRecordError(
                    path=self.what, reason="varint too long", position=self.pos
                )

    def uvarint_count(self, nullable: bool = False) -> int:
        """A compact length (``n + 1``, 0 for null when ``nullable``) or a plain count."""
        n = self.uvarint()
        if nullable:
            n -= 1
        self._bound(n)
        return n

    def int32_count(self) -> int:
        n: int = self.fixed("int32")
        self._bound(n)
        return n

    def _bound(self, n: int) -> None:
        if n > len(self.buf) - self.pos or n > _MAX_ELEMENTS:
            raise CorruptRecordError(
                path=self.what,
                reason=f"length {n} exceeds the {len(self.buf) - self.pos} bytes left",
                position=self.pos,
            )


@cache
def schema(name: str) -> MessageSchema:
    """The vendored definition ``name`` (e.g. ``"OffsetCommitValue"``), parsed once."""
    text = resources.files("kafkalog.records").joinpath("schemas", f"{name}.json").read_text()
    return MessageSchema(json.loads(_strip_comments(text)))


@cache
def schema_names() -> tuple[str, ...]:
    folder = resources.files("kafkalog.records").joinpath("schemas")
    return tuple(sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".json")))
