"""Pruning bounds from the filter objects Spark hands ``pushFilters`` (as Spark 4.3 builds them
for the queries named), without Spark."""

from __future__ import annotations

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    In,
    IsNotNull,
    Not,
    StringStartsWith,
)

from kafkalog.spark.pushdown import bounds_from_filters


def test_null_safe_equality_prunes_like_equality() -> None:
    # offset <=> 5 and partition <=> 1 and topic <=> 'a'
    b = bounds_from_filters(
        [
            EqualNullSafe(("offset",), 5),
            EqualNullSafe(("partition",), 1),
            EqualNullSafe(("topic",), "a"),
        ]
    )
    assert (b.offset_lo, b.offset_hi) == (5, 6)
    assert b.allows_partition("a", 1) and not b.allows_partition("a", 0)
    assert not b.allows_partition("b", 1)


def test_not_null_safe_equality_does_not_prune() -> None:
    b = bounds_from_filters([Not(EqualNullSafe(("offset",), 5))])  # not (offset <=> 5)
    assert (b.offset_lo, b.offset_hi) == (0, 2**63 - 1)


def test_in_list_with_null_prunes_on_its_values() -> None:
    # offset in (3, 7, 7, null): Spark drops the duplicate, keeps the null
    b = bounds_from_filters([In(("offset",), (3, 7, None)), In(("partition",), (2, None))])
    assert (b.offset_lo, b.offset_hi) == (3, 8)
    assert b.allows_partition("t", 2) and not b.allows_partition("t", 0)
    # not (offset in (3, null)) matches no row at all, but is not pruned on
    b = bounds_from_filters([Not(In(("offset",), (3, None)))])
    assert (b.offset_lo, b.offset_hi) == (0, 2**63 - 1)


def test_topic_prefix_prunes_partitions() -> None:
    # topic like 'ord%' and startswith(topic, 'orders')
    b = bounds_from_filters(
        [
            IsNotNull(("topic",)),
            StringStartsWith(("topic",), "ord"),
            StringStartsWith(("topic",), "orders"),
        ]
    )
    assert b.allows_partition("orders", 0) and b.allows_partition("orders-eu", 3)
    assert not b.allows_partition("ordinal", 0) and not b.allows_partition("x-orders", 0)
    assert bounds_from_filters([EqualTo(("topic",), "a")]).topic_prefixes == []
