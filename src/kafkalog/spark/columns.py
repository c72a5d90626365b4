"""A user-supplied schema as a choice of columns: ``.schema("offset long, timestamp timestamp")``.

PySpark's Python Data Source API has no column pruning: Spark asks a Python source for every
column it declares. But a user may give the schema themselves, and Spark then expects exactly
those columns. So a schema naming some of the Kafka columns, with their types, is read as "decode
and ship only these": key and value bytes nobody asked for are never copied. Any other schema
(an unknown column, another type) is refused with the columns allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kafkalog.spark.options import KAFKA_COLUMNS, OptionError

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
HEADERS = ", headers array<struct<key:string,value:binary>>"


def full_schema(include_headers: bool, columns: tuple[str, ...] | None = None) -> str:
    """Spark's Kafka source's columns, as DDL (``headers`` with ``includeHeaders=true``), or
    only ``columns`` (the ``columns`` option) in the order given."""
    if columns is not None:
        if "headers" in columns and not include_headers:
            raise OptionError("option columns names headers: set includeHeaders=true too")
        return ", ".join(f"{name} {KAFKA_COLUMNS[name]}" for name in columns)
    return SCHEMA + (HEADERS if include_headers else "")


@dataclass(frozen=True)
class Columns:
    """What a read produces: ``(name in the output, Kafka column)`` in the output's order."""

    fields: tuple[tuple[str, str], ...]

    @property
    def sources(self) -> frozenset[str]:
        return frozenset(source for _, source in self.fields)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.fields]


def _allowed(include_headers: bool) -> dict[str, DataType]:
    """The Kafka columns and their types (built here: parsing DDL needs a JVM, and this runs in
    Spark's Python workers too)."""
    out: dict[str, DataType] = {
        "key": BinaryType(),
        "value": BinaryType(),
        "topic": StringType(),
        "partition": IntegerType(),
        "offset": LongType(),
        "timestamp": TimestampType(),
        "timestampType": IntegerType(),
    }
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        out["headers"] = ArrayType(header)
    return out


def choose_columns(schema: StructType | None, include_headers: bool) -> Columns:
    """The columns ``schema`` asks for, checked against the Kafka columns (names compared
    case-insensitively, as Spark does; types exactly). ``None``: all of them."""
    allowed = _allowed(include_headers)
    if schema is None:
        return Columns(tuple((name, name) for name in allowed))
    by_lower = {name.lower(): name for name in allowed}
    fields: list[tuple[str, str]] = []
    problems: list[str] = []
    seen: set[str] = set()
    for field in schema.fields:
        source = by_lower.get(field.name.lower())
        if source is None:
            problems.append(f"unknown column {field.name!r}")
        elif source in seen:
            problems.append(f"column {field.name!r} given twice")
        elif field.dataType != allowed[source]:
            problems.append(
                f"column {field.name!r} has type {field.dataType.simpleString()}, "
                f"not {allowed[source].simpleString()}"
            )
        else:
            seen.add(source)
            fields.append((field.name, source))
    if not fields and not problems:
        problems.append("no column")
    if problems:
        hint = "" if include_headers else " (headers with option includeHeaders=true)"
        raise OptionError(
            f"the schema given to format('kafkalog') must name some of its columns with their "
            f"types: {'; '.join(problems)}. Allowed: {full_schema(include_headers)}{hint}"
        )
    return Columns(tuple(fields))
