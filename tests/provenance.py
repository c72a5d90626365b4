"""Machine-readable view of ``fixtures/PROVENANCE.md``.

PROVENANCE.md describes every fixture file with one bullet line of the form::

    - `<path>` (<size> B, sha256 <hex prefix>…): <description>

where ``<path>`` is relative to the fixture-set directory named in the enclosing section heading
(``## N. `set-dir/` — ...``).  This module parses every such line into a :class:`FileFacts`.

Parsing is strict: a bullet line (any line starting with ``- ``) that does not match one of the
known shapes, or whose description contains an unknown ``; ``-separated segment, raises
:class:`ProvenanceParseError`.  Nothing is silently skipped.

Abbreviations are kept as abbreviations:

* ``sha256_prefix`` is only the hex prefix that was written (before ``…``);
* index / time-index / txn-index / snapshot entry lists may be partial: ``index_entries`` (etc.)
  is always a *prefix* of the true entry list, ``index_tail_entries`` a *suffix* (Part II
  ``[...] … [...]`` notation), and ``entries_complete`` says whether the listing is the full list;
* ``producer_ids_truncated`` / ``leader_epochs_truncated`` flag a trailing ``'…'`` in the list;
* first-record key/value/header values abbreviated as ``'...(227 bytes)'`` / ``'...(100 chars)'``
  are :class:`Field` objects with ``exact=False``, the known leading bytes and the stated length;
* ``text`` is the `` | ``-joined content exactly as written; PROVENANCE cuts it at 200 characters,
  so ``text_maybe_truncated`` is set when it is that long.

Prose paragraphs ("Expected contents", "Scenarios", ...) are *not* parsed.
"""

from __future__ import annotations

import ast
import functools
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = [
    "FIXTURES",
    "KINDS",
    "PROVENANCE_MD",
    "Field",
    "FileFacts",
    "FirstRecord",
    "ProvenanceParseError",
    "SnapshotEntry",
    "TxnEntry",
    "by_kind",
    "field_matches",
    "get",
    "in_set",
    "indexes",
    "iter_bullets",
    "load",
    "logs",
    "parse_line",
    "parse_provenance",
    "preallocated",
    "snapshots",
    "texts",
    "timeindexes",
    "txnindexes",
]


def _default_fixtures() -> Path:
    env = os.environ.get("KAFKALOG_FIXTURES")
    if env:
        return Path(env).resolve()
    # the real writers' files live in the repository, beside this module: a clone has them
    return Path(__file__).resolve().parent / "fixtures"


FIXTURES: Path = _default_fixtures()
PROVENANCE_MD: Path = FIXTURES / "PROVENANCE.md"

KINDS: tuple[str, ...] = (
    "log",  # record batches / message sets (.log, .bin, KRaft .checkpoint snapshot)
    "index",  # offset index (.index)
    "timeindex",  # time index (.timeindex)
    "txnindex",  # aborted-transaction index (.txnindex)
    "snapshot",  # producer-state snapshot (.snapshot)
    "text",  # text file, content given (`` | ``-joined lines)
    "empty",  # "empty (0 bytes)"
    "binary",  # "binary" (no further facts, e.g. bootstrap.checkpoint)
    "record-body",  # a single v2 Record body without length varint
    "other",  # *.preallocated.gz (gzip of a zero-filled preallocated index)
)

TEXT_CUTOFF = 200  # PROVENANCE.md cuts the joined text at this many characters

_ELLIPSES = ("…", "...")


class ProvenanceParseError(ValueError):
    """A bullet line of PROVENANCE.md could not be parsed (or is inconsistent)."""

    def __init__(self, message: str, line_no: int | None = None, line: str | None = None) -> None:
        where = f"PROVENANCE.md line {line_no}: " if line_no is not None else ""
        detail = f"\n    {line}" if line is not None else ""
        super().__init__(f"{where}{message}{detail}")
        self.line_no = line_no
        self.line = line


# --------------------------------------------------------------------------------------------
# value types


@dataclass(frozen=True)
class Field:
    """A first-record key, value or header value as written in PROVENANCE (never null).

    ``data`` is the full value when ``exact`` else only its known leading bytes.  ``length`` is
    the total length (stated for abbreviated values, computed for exact ones) in ``unit``:
    ``'bytes'`` for hex values, ``'chars'`` for text values.
    """

    data: bytes
    exact: bool
    length: int
    unit: Literal["bytes", "chars"]
    is_hex: bool
    written: str  # the literal's content as written, e.g. "hex:0002…...(227 bytes)"

    @property
    def text(self) -> str | None:
        """The (possibly partial) value as text, for text-written values."""
        return None if self.is_hex else self.data.decode("utf-8")

    def matches(self, actual: bytes | None) -> bool:
        """Whether an actual decoded value is consistent with this description."""
        if actual is None:
            return False
        if self.exact:
            return actual == self.data
        if not actual.startswith(self.data):
            return False
        if self.unit == "bytes":
            return len(actual) == self.length
        try:
            return len(actual.decode("utf-8")) == self.length
        except UnicodeDecodeError:
            return False


def field_matches(described: Field | None, actual: bytes | None) -> bool:
    """``None`` describes a null key/value; otherwise delegate to :meth:`Field.matches`."""
    if described is None:
        return actual is None
    return described.matches(actual)


@dataclass(frozen=True)
class FirstRecord:
    """Part II "first record key=... value=... headers=[...]"; ``None`` key/value = null."""

    key: Field | None
    value: Field | None
    headers: tuple[tuple[str, Field | None], ...]

    @property
    def exact(self) -> bool:
        parts = [self.key, self.value, *(v for _, v in self.headers)]
        return all(p is None or p.exact for p in parts)


@dataclass(frozen=True)
class TxnEntry:
    version: int
    pid: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True)
class SnapshotEntry:
    producer_id: int
    epoch: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int | None  # not stated in Part I lines
    coordinator_epoch: int
    current_txn_first_offset: int


@dataclass(frozen=True)
class FileFacts:
    # -- every line
    path: Path  # absolute path of the fixture file
    rel: str  # path relative to FIXTURES, e.g. "kafka-4.0-snapshot-javacode/v2-txn-0/...log"
    set_dir: str  # fixture set directory, e.g. "kafka-4.0-snapshot-javacode"
    set_path: str  # path relative to the set directory, as written in the bullet
    section: int  # PROVENANCE section number (1..15)
    part: int  # 1 or 2 (Part II starts at "# Part II")
    line_no: int  # 1-based line number in PROVENANCE.md
    size: int
    sha256_prefix: str
    kind: str  # one of KINDS
    raw: str  # the original bullet line
    description: str  # the part after "): "
    # -- logs (None = not stated)
    batches: int | None = None
    records: int | None = None
    records_v2_only: bool = False  # Part I: count is "records in v2 batches" only
    codec_counts: dict[str, int] = field(default_factory=dict, hash=False)
    magics: tuple[int, ...] | None = None
    codecs: tuple[str, ...] | None = None
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    producer_ids: tuple[int, ...] | None = None
    producer_ids_truncated: bool = False
    leader_epochs: tuple[int, ...] | None = None
    leader_epochs_truncated: bool = False
    checksum_failures: int | None = None
    decode_errors: int | None = None
    trailing_partial: tuple[int, int] | None = None  # (trailing bytes, declared length)
    first_record: FirstRecord | None = None
    # -- index / timeindex / txnindex / snapshot
    entry_count: int | None = None
    entries_complete: bool = False
    # index: (abs offset, pos); timeindex: (ts, abs offset).  Prefix of the true entry list.
    index_entries: tuple[tuple[int, int], ...] | None = None
    # Part II "[...] … [...]": the listed last entries (a suffix of the true list), else ().
    index_tail_entries: tuple[tuple[int, int], ...] = ()
    # Part I "rel=N": relative offsets aligned with index_entries (None for Part II lines)
    index_rel_offsets: tuple[int, ...] | None = None
    txn_entries: tuple[TxnEntry, ...] | None = None
    snapshot_version: int | None = None
    snapshot_crc_ok: bool | None = None
    snapshot_entries: tuple[SnapshotEntry, ...] | None = None
    # -- text
    text: str | None = None
    text_maybe_truncated: bool = False
    # -- *.preallocated.gz
    preallocated_size: int | None = None
    git_blob_sha1: str | None = None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def base_offset(self) -> int | None:
        """Base offset from a 20-digit segment file name (``00000000000000000020.index``)."""
        m = re.match(r"(\d{20})[.-]", self.name)
        return int(m.group(1)) if m else None

    def count(self, key: str) -> int:
        """A ``codec_counts`` entry, 0 when not listed (e.g. ``count('control')``)."""
        return self.codec_counts.get(key, 0)


# --------------------------------------------------------------------------------------------
# parsing helpers

_HEADER_RE = re.compile(
    r"^- `(?P<path>[^`]+)` \((?P<size>\d+) B, sha256 (?P<sha>[0-9a-f]{1,64})(?:…)?\): (?P<desc>.*)$"
)
_SECTION_RE = re.compile(r"^## (?:(?P<num>\d+)\. )?(?P<title>.*)$")
_SET_DIR_RE = re.compile(r"`([^`/]+)/`")
_INT = r"-?\d+"
_RANGE_RE = re.compile(rf"^(?P<name>offsets|timestamps|ts) (?P<a>{_INT})\.\.(?P<b>{_INT})$")
_ABBREV_RE = re.compile(r"^(?P<prefix>.*)\.\.\.\((?P<n>\d+) (?P<unit>chars|bytes)\)$", re.DOTALL)


def _fail(msg: str) -> ProvenanceParseError:
    return ProvenanceParseError(msg)


def _strip_ellipsis(body: str) -> tuple[str, bool]:
    """Strip a trailing " ..." / " …" marker; returns (body, truncated)."""
    for e in _ELLIPSES:
        if body.endswith(" " + e):
            return body[: -len(e) - 1], True
        if body == e:
            return "", True
    return body, False


def _parse_int_list(body: str, what: str) -> tuple[tuple[int, ...], bool]:
    """``[1, 2, '…']`` -> ((1, 2), True)."""
    if not (body.startswith("[") and body.endswith("]")):
        raise _fail(f"{what}: expected [..] list, got {body!r}")
    inner = body[1:-1].strip()
    if not inner:
        return (), False
    items = [s.strip() for s in inner.split(",")]
    out: list[int] = []
    truncated = False
    for i, item in enumerate(items):
        if item.strip("'\"") in _ELLIPSES:
            if i != len(items) - 1:
                raise _fail(f"{what}: ellipsis not at end of {body!r}")
            truncated = True
        elif re.fullmatch(_INT, item):
            out.append(int(item))
        else:
            raise _fail(f"{what}: bad list item {item!r}")
    return tuple(out), truncated


def _literal_list(body: str, what: str) -> list[object]:
    try:
        value = ast.literal_eval(body)
    except (ValueError, SyntaxError) as exc:
        raise _fail(f"{what}: not a Python list literal: {body!r}") from exc
    if not isinstance(value, list):
        raise _fail(f"{what}: not a list: {body!r}")
    return value


def _int_tuples(body: str, arity: int, what: str) -> tuple[tuple[int, ...], ...]:
    out: list[tuple[int, ...]] = []
    for item in _literal_list(body, what):
        if (
            not isinstance(item, tuple)
            or len(item) != arity
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in item)
        ):
            raise _fail(f"{what}: expected {arity}-tuples of ints, got {item!r}")
        out.append(item)
    return tuple(out)


def _pairs(items: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, int], ...]:
    return tuple((t[0], t[1]) for t in items)


def _head_tail(
    body: str, arity: int, what: str
) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...], bool]:
    """``[(..), ..] … [(..), ..]`` -> (head, tail, elided)."""
    for e in _ELLIPSES:
        sep = f"] {e} ["
        if sep in body:
            left, right = body.split(sep, 1)
            return (
                _int_tuples(left + "]", arity, what),
                _int_tuples("[" + right, arity, what),
                True,
            )
    return _int_tuples(body, arity, what), (), False


def _completeness(count: int, listed: int, elided: bool, what: str) -> bool:
    if listed > count:
        raise _fail(f"{what}: {listed} entries listed but count is {count}")
    return not elided and listed == count


def _read_py_string(s: str, pos: int, what: str) -> tuple[str | None, int]:
    """Read ``None`` or a quoted Python string literal starting at ``pos``."""
    if s.startswith("None", pos):
        return None, pos + 4
    if pos >= len(s) or s[pos] not in "'\"":
        raise _fail(f"{what}: expected None or a quoted string at {s[pos : pos + 20]!r}")
    quote = s[pos]
    i = pos + 1
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            lit = s[pos : i + 1]
            try:
                value = ast.literal_eval(lit)
            except (ValueError, SyntaxError) as exc:
                raise _fail(f"{what}: bad string literal {lit!r}") from exc
            if not isinstance(value, str):
                raise _fail(f"{what}: not a string literal {lit!r}")
            return value, i + 1
        i += 1
    raise _fail(f"{what}: unterminated string literal at {s[pos : pos + 20]!r}")


def _make_field(written: str | None, what: str) -> Field | None:
    if written is None:
        return None
    m = _ABBREV_RE.match(written)
    body = m.group("prefix") if m else written
    if body.startswith("hex:"):
        digits = body[4:]
        if m is None and len(digits) % 2:
            raise _fail(f"{what}: odd-length hex {written!r}")
        digits = digits[: len(digits) - len(digits) % 2]
        try:
            data = bytes.fromhex(digits)
        except ValueError as exc:
            raise _fail(f"{what}: bad hex {written!r}") from exc
        if m is not None and m.group("unit") != "bytes":
            raise _fail(f"{what}: hex value abbreviated in chars: {written!r}")
        length = int(m.group("n")) if m else len(data)
        return Field(data, m is None, length, "bytes", True, written)
    if m is not None and m.group("unit") != "chars":
        raise _fail(f"{what}: text value abbreviated in bytes: {written!r}")
    length = int(m.group("n")) if m else len(body)
    return Field(body.encode("utf-8"), m is None, length, "chars", False, written)


def _parse_first_record(seg: str) -> FirstRecord:
    what = "first record"
    prefix = "first record key="
    if not seg.startswith(prefix):
        raise _fail(f"{what}: expected {prefix!r}: {seg!r}")
    key, pos = _read_py_string(seg, len(prefix), what)
    if not seg.startswith(" value=", pos):
        raise _fail(f"{what}: expected ' value=' after key: {seg!r}")
    value, pos = _read_py_string(seg, pos + len(" value="), what)
    if not seg.startswith(" headers=", pos):
        raise _fail(f"{what}: expected ' headers=' after value: {seg!r}")
    headers: list[tuple[str, Field | None]] = []
    for h in _literal_list(seg[pos + len(" headers=") :], what + " headers"):
        if (
            not isinstance(h, tuple)
            or len(h) != 2
            or not isinstance(h[0], str)
            or not (h[1] is None or isinstance(h[1], str))
        ):
            raise _fail(f"{what}: bad header {h!r}")
        headers.append((h[0], _make_field(h[1], what + " header")))
    return FirstRecord(
        key=_make_field(key, what + " key"),
        value=_make_field(value, what + " value"),
        headers=tuple(headers),
    )


def _set_once(d: dict[str, object], key: str, value: object, seg: str) -> None:
    if key in d:
        raise _fail(f"duplicate segment for {key!r}: {seg!r}")
    d[key] = value


def _parse_log_segments(segments: Iterable[str], out: dict[str, object]) -> None:
    """Parse the ``; ``-separated log segments shared (mostly) by Part I and Part II."""
    counts: dict[str, int] = out.setdefault("codec_counts", {})  # type: ignore[assignment]
    for seg in segments:
        if m := _RANGE_RE.match(seg):
            a, b = int(m.group("a")), int(m.group("b"))
            if m.group("name") == "offsets":
                _set_once(out, "first_offset", a, seg)
                _set_once(out, "last_offset", b, seg)
            else:
                _set_once(out, "min_timestamp", a, seg)
                _set_once(out, "max_timestamp", b, seg)
        elif m := re.fullmatch(r"(\d+) records in v2 batches", seg):
            _set_once(out, "records", int(m.group(1)), seg)
            out["records_v2_only"] = True
        elif m := re.fullmatch(r"(producerIds|leaderEpochs) (\[.*\])", seg):
            values, truncated = _parse_int_list(m.group(2), m.group(1))
            name = "producer_ids" if m.group(1) == "producerIds" else "leader_epochs"
            _set_once(out, name, values, seg)
            out[name + "_truncated"] = truncated
        elif m := re.fullmatch(r"checksum failures: (\d+)", seg):
            _set_once(out, "checksum_failures", int(m.group(1)), seg)
        elif m := re.fullmatch(r"CRC failures (\d+), decode errors (\d+)", seg):
            _set_once(out, "checksum_failures", int(m.group(1)), seg)
            _set_once(out, "decode_errors", int(m.group(2)), seg)
        elif m := re.fullmatch(
            r"trailing (\d+) bytes = partial/truncated entry \(declared len (\d+)\)", seg
        ):
            _set_once(out, "trailing_partial", (int(m.group(1)), int(m.group(2))), seg)
        elif m := re.fullmatch(rf"first offset ({_INT})", seg):
            _set_once(out, "first_offset", int(m.group(1)), seg)
        elif m := re.fullmatch(r"(LogAppendTime|control|transactional):(\d+)", seg):
            if m.group(1) in counts:
                raise _fail(f"duplicate count {seg!r}")
            counts[m.group(1)] = int(m.group(2))
        else:
            raise _fail(f"unknown log segment {seg!r}")


def _parse_counts(body: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    if not body:
        return counts
    for item in body.split(", "):
        m = re.fullmatch(r"([A-Za-z]+|v\d/[a-z0-9]+):(\d+)", item)
        if not m or m.group(1) in counts:
            raise _fail(f"bad entry count {item!r} in ({body})")
        counts[m.group(1)] = int(m.group(2))
    return counts


def _magics_codecs(counts: dict[str, int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    magics: set[int] = set()
    codecs: set[str] = set()
    for key in counts:
        if m := re.fullmatch(r"v(\d)/([a-z0-9]+)", key):
            magics.add(int(m.group(1)))
            codecs.add(m.group(2))
    return tuple(sorted(magics)), tuple(sorted(codecs))


def _parse_log_part1(desc: str) -> dict[str, object]:
    head, *segments = desc.split("; ")
    m = re.fullmatch(r"(\d+) entries/batches \(([^()]*)\)", head)
    if not m:
        raise _fail(f"bad Part I log head {head!r}")
    counts = _parse_counts(m.group(2))
    magics, codecs = _magics_codecs(counts)
    out: dict[str, object] = {
        "kind": "log",
        "batches": int(m.group(1)),
        "records_v2_only": True,
        "codec_counts": counts,
        "magics": magics,
        "codecs": codecs,
    }
    _parse_log_segments(segments, out)
    return out


def _parse_log_part2(desc: str) -> dict[str, object]:
    first_record: FirstRecord | None = None
    marker = "; first record "
    if marker in desc:
        idx = desc.index(marker)
        first_record = _parse_first_record(desc[idx + 2 :])
        desc = desc[:idx]
    head, *segments = desc.split("; ")
    m = re.fullmatch(
        r"(\d+) batches/entries, (\d+) records, magic (\[[^\]]*\]), codecs (\[[^\]]*\])", head
    )
    if not m:
        raise _fail(f"bad Part II log head {head!r}")
    magics, mt = _parse_int_list(m.group(3), "magic")
    codecs_raw = _literal_list(m.group(4), "codecs")
    if mt or not all(isinstance(c, str) for c in codecs_raw):
        raise _fail(f"bad magic/codecs in {head!r}")
    out: dict[str, object] = {
        "kind": "log",
        "batches": int(m.group(1)),
        "records": int(m.group(2)),
        "magics": magics,
        "codecs": tuple(str(c) for c in codecs_raw),
        "codec_counts": {},
        "first_record": first_record,
    }
    _parse_log_segments(segments, out)
    return out


_P1_INDEX_RE = re.compile(r"rel=(\d+) \(abs (\d+)\) pos=(\d+)")
_P1_TIME_RE = re.compile(rf"ts=({_INT}) rel=(\d+) \(abs (\d+)\)")
_P1_TXN_RE = re.compile(
    rf"version=(\d+) pid=({_INT}) firstOffset=({_INT}) lastOffset=({_INT}) "
    rf"lastStableOffset=({_INT})"
)
_P1_SNAP_RE = re.compile(
    rf"producerId=({_INT}) epoch=({_INT}) lastSeq=({_INT}) lastOffset=({_INT}) "
    rf"offsetDelta=({_INT}) coordinatorEpoch=({_INT}) currentTxnFirstOffset=({_INT})"
)
_SNAP_COLUMNS = "(pid, epoch, lastSeq, lastOffset, offsetDelta, ts, coordEpoch, txnFirstOffset)"


def _split_items(body: str, rx: re.Pattern[str], what: str) -> tuple[list[re.Match[str]], bool]:
    body, truncated = _strip_ellipsis(body)
    matches: list[re.Match[str]] = []
    for item in body.split("; ") if body else []:
        m = rx.fullmatch(item)
        if not m:
            raise _fail(f"{what}: bad entry {item!r}")
        matches.append(m)
    return matches, truncated


def _expect_ext(set_path: str, ext: str, kind: str) -> None:
    if not set_path.endswith(ext):
        raise _fail(f"{kind} description for a file not ending in {ext}: {set_path!r}")


def _parse_entries_part1(set_path: str, desc: str) -> dict[str, object]:
    m = re.fullmatch(r"(\d+) entries(?:: (.*))?", desc)
    assert m is not None
    count, body = int(m.group(1)), m.group(2)
    if body is None:
        if set_path.endswith(".index"):
            kind = "index"
        elif set_path.endswith(".timeindex"):
            kind = "timeindex"
        else:
            raise _fail(f"'N entries' for a file that is neither .index nor .timeindex: {set_path}")
        if count != 0:
            raise _fail(f"{count} entries stated without a listing")
        return {
            "kind": kind,
            "entry_count": 0,
            "entries_complete": True,
            "index_entries": (),
            "index_rel_offsets": (),
        }
    if body.startswith("rel="):
        _expect_ext(set_path, ".index", "index")
        items, trunc = _split_items(body, _P1_INDEX_RE, "index")
        entries = tuple((int(x.group(2)), int(x.group(3))) for x in items)
        rels = tuple(int(x.group(1)) for x in items)
        kind = "index"
    elif body.startswith("ts="):
        _expect_ext(set_path, ".timeindex", "timeindex")
        items, trunc = _split_items(body, _P1_TIME_RE, "timeindex")
        entries = tuple((int(x.group(1)), int(x.group(3))) for x in items)
        rels = tuple(int(x.group(2)) for x in items)
        kind = "timeindex"
    else:
        raise _fail(f"unknown entry listing {body!r}")
    return {
        "kind": kind,
        "entry_count": count,
        "entries_complete": _completeness(count, len(entries), trunc, kind),
        "index_entries": entries,
        "index_rel_offsets": rels,
    }


def _parse_entries_part2(set_path: str, desc: str) -> dict[str, object]:
    m = re.fullmatch(r"(\d+) entries \((abs offset, pos|ts, abs offset)\): (.*)", desc)
    assert m is not None
    count = int(m.group(1))
    kind = "index" if m.group(2) == "abs offset, pos" else "timeindex"
    _expect_ext(set_path, "." + kind, kind)
    head, tail, elided = _head_tail(m.group(3), 2, kind)
    return {
        "kind": kind,
        "entry_count": count,
        "entries_complete": _completeness(count, len(head) + len(tail), elided, kind),
        "index_entries": _pairs(head),
        "index_tail_entries": _pairs(tail),
    }


def _parse_txnindex(set_path: str, desc: str) -> dict[str, object]:
    m = re.fullmatch(r"(\d+) aborted-txn entries(?:: (.*))?", desc)
    assert m is not None
    _expect_ext(set_path, ".txnindex", "txnindex")
    count = int(m.group(1))
    items, trunc = _split_items(m.group(2) or "", _P1_TXN_RE, "txnindex")
    entries = tuple(TxnEntry(*(int(g) for g in x.groups())) for x in items)
    return {
        "kind": "txnindex",
        "entry_count": count,
        "entries_complete": _completeness(count, len(entries), trunc, "txnindex"),
        "txn_entries": entries,
    }


def _parse_snapshot(set_path: str, desc: str) -> dict[str, object]:
    _expect_ext(set_path, ".snapshot", "snapshot")
    part1 = r"producer-state snapshot v(\d+), (\d+) producer entries(?:: (.*))?"
    if m := re.fullmatch(part1, desc):
        count = int(m.group(2))
        items, trunc = _split_items(m.group(3) or "", _P1_SNAP_RE, "snapshot")
        entries: list[SnapshotEntry] = []
        for x in items:
            pid, epoch, seq, last, delta, coord, txn = (int(g) for g in x.groups())
            entries.append(SnapshotEntry(pid, epoch, seq, last, delta, None, coord, txn))
        return {
            "kind": "snapshot",
            "snapshot_version": int(m.group(1)),
            "entry_count": count,
            "entries_complete": _completeness(count, len(entries), trunc, "snapshot"),
            "snapshot_entries": tuple(entries),
        }
    m = re.fullmatch(
        r"producer-state snapshot v(\d+) crc_ok=(True|False), (\d+) entries "
        + re.escape(_SNAP_COLUMNS)
        + r": (.*)",
        desc,
    )
    if not m:
        raise _fail(f"bad snapshot description {desc!r}")
    count = int(m.group(3))
    head, tail, elided = _head_tail(m.group(4), 8, "snapshot")
    if tail:
        raise _fail("snapshot entry list with a tail part is not supported")
    return {
        "kind": "snapshot",
        "snapshot_version": int(m.group(1)),
        "snapshot_crc_ok": m.group(2) == "True",
        "entry_count": count,
        "entries_complete": _completeness(count, len(head), elided, "snapshot"),
        "snapshot_entries": tuple(SnapshotEntry(*t) for t in head),
    }


def _parse_description(set_path: str, size: int, desc: str) -> dict[str, object]:
    """Dispatch on the description shape; returns FileFacts keyword arguments."""
    if desc == "empty (0 bytes)":
        if size != 0:
            raise _fail(f"'empty (0 bytes)' but size {size}")
        return {"kind": "empty"}
    if desc == "binary":
        return {"kind": "binary"}
    if desc == "single v2 Record body (no length varint), see notes":
        return {"kind": "record-body"}
    if m := re.fullmatch(r"text: `(.*)`", desc):
        text = m.group(1)
        return {"kind": "text", "text": text, "text_maybe_truncated": len(text) >= TEXT_CUTOFF}
    if m := re.fullmatch(
        r"gzip of the exact (\d+)-byte preallocated on-disk file "
        r"\(entries followed by zero fill\), git blob SHA-1 ([0-9a-f]{40})",
        desc,
    ):
        if not set_path.endswith(".preallocated.gz"):
            raise _fail(f"preallocated description for {set_path!r}")
        return {"kind": "other", "preallocated_size": int(m.group(1)), "git_blob_sha1": m.group(2)}
    if re.match(r"\d+ entries/batches \(", desc):
        return _parse_log_part1(desc)
    if re.match(r"\d+ batches/entries, ", desc):
        return _parse_log_part2(desc)
    if re.fullmatch(r"\d+ entries(?:: .*)?", desc):
        return _parse_entries_part1(set_path, desc)
    if re.match(r"\d+ entries \((?:abs offset, pos|ts, abs offset)\): ", desc):
        return _parse_entries_part2(set_path, desc)
    if re.match(r"\d+ aborted-txn entries", desc):
        return _parse_txnindex(set_path, desc)
    if desc.startswith("producer-state snapshot "):
        return _parse_snapshot(set_path, desc)
    raise _fail(f"unknown description shape {desc[:60]!r}")


def _resolve_set_dir(dirs: list[str], set_path: str, root: Path) -> str:
    if len(dirs) == 1:
        return dirs[0]
    found = [d for d in dirs if (root / d / set_path).is_file()]
    if len(found) != 1:
        raise _fail(
            f"section names several set dirs {dirs}; {set_path!r} exists in {found or 'none'}"
        )
    return found[0]


def _check_set_path(set_path: str) -> None:
    parts = set_path.split("/")
    if set_path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _fail(f"bad relative path {set_path!r}")


def parse_line(
    line: str,
    *,
    set_dirs: list[str],
    section: int,
    part: int,
    line_no: int,
    root: Path,
) -> FileFacts:
    """Parse one bullet line; raises :class:`ProvenanceParseError` on any mismatch."""
    try:
        m = _HEADER_RE.match(line)
        if not m:
            raise _fail("bullet line does not match '- `path` (N B, sha256 hex…): ...'")
        set_path, size, desc = m.group("path"), int(m.group("size")), m.group("desc")
        _check_set_path(set_path)
        set_dir = _resolve_set_dir(set_dirs, set_path, root)
        kwargs = _parse_description(set_path, size, desc)
    except ProvenanceParseError as exc:
        if exc.line_no is not None:
            raise
        raise ProvenanceParseError(str(exc), line_no, line) from None
    rel = f"{set_dir}/{set_path}"
    return FileFacts(
        path=root / set_dir / set_path,
        rel=rel,
        set_dir=set_dir,
        set_path=set_path,
        section=section,
        part=part,
        line_no=line_no,
        size=size,
        sha256_prefix=m.group("sha"),
        raw=line,
        description=desc,
        **kwargs,  # type: ignore[arg-type]
    )


def iter_bullets(text: str) -> Iterator[tuple[int, str]]:
    """All bullet lines (``- ...``) with their 1-based line numbers."""
    for no, line in enumerate(text.splitlines(), start=1):
        if line.startswith("- "):
            yield no, line


def parse_provenance(text: str, root: Path | None = None) -> dict[str, FileFacts]:
    """Parse PROVENANCE.md text; keys are paths relative to ``root`` (default FIXTURES)."""
    root = FIXTURES if root is None else root
    facts: dict[str, FileFacts] = {}
    part = 1
    section: int | None = None
    set_dirs: list[str] = []
    for no, line in enumerate(text.splitlines(), start=1):
        if line.startswith("# Part II"):
            part = 2
        elif line.startswith("## "):
            m = _SECTION_RE.match(line)
            assert m is not None
            num = m.group("num")
            section = int(num) if num else None
            set_dirs = _SET_DIR_RE.findall(m.group("title")) if num else []
            if section is not None and not set_dirs:
                raise ProvenanceParseError("numbered section without a `set-dir/`", no, line)
        elif line.startswith("- "):
            if section is None:
                raise ProvenanceParseError("bullet outside a numbered set section", no, line)
            f = parse_line(
                line, set_dirs=set_dirs, section=section, part=part, line_no=no, root=root
            )
            if f.rel in facts:
                raise ProvenanceParseError(
                    f"{f.rel} already described on line {facts[f.rel].line_no}", no, line
                )
            facts[f.rel] = f
    return facts


# --------------------------------------------------------------------------------------------
# public accessors


@functools.cache
def load() -> dict[str, FileFacts]:
    """All bullet facts of FIXTURES/PROVENANCE.md keyed by path relative to FIXTURES (cached).

    Do not mutate the returned dict.
    """
    return parse_provenance(PROVENANCE_MD.read_text(encoding="utf-8"), FIXTURES)


def get(rel: str) -> FileFacts:
    """Facts for one file, by path relative to FIXTURES."""
    return load()[rel]


def by_kind(kind: str) -> list[FileFacts]:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {KINDS}")
    return [f for f in load().values() if f.kind == kind]


def in_set(set_dir: str) -> list[FileFacts]:
    return [f for f in load().values() if f.set_dir == set_dir.rstrip("/")]


def logs() -> list[FileFacts]:
    return by_kind("log")


def indexes() -> list[FileFacts]:
    return by_kind("index")


def timeindexes() -> list[FileFacts]:
    return by_kind("timeindex")


def txnindexes() -> list[FileFacts]:
    return by_kind("txnindex")


def snapshots() -> list[FileFacts]:
    return by_kind("snapshot")


def texts() -> list[FileFacts]:
    return by_kind("text")


def preallocated() -> list[FileFacts]:
    """The ``*.preallocated.gz`` copies of zero-filled active-segment indexes."""
    return [f for f in load().values() if f.preallocated_size is not None]


@functools.cache
def fixture_partitions() -> tuple[Path, ...]:
    """Every partition directory (``topic-partition`` holding segment logs) in the tree."""
    from kafkalog.log.layout import is_segment_log, parse_partition_dir

    out = []
    for root, _dirs, names in os.walk(FIXTURES):
        path = Path(root)
        if any(is_segment_log(n) for n in names):
            try:
                parse_partition_dir(path.name)
            except ValueError:
                continue
            out.append(path)
    return tuple(sorted(out))
