"""The seeded random campaigns of the JVM source, short: bounded reads against the brute force
with the log changed between two runs of the same query (tests/spark/jvm_campaign.py), and reads
of a partition a writer appends to, rolls and deletes by retention meanwhile
(tests/spark/live_campaign.py). More seeds by hand: ``KAFKALOG_CAMPAIGN_SEEDS=0-40`` here, or
each module's own ``python3 tests/spark/<module>.py FIRST LAST``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jvm_campaign
import live_campaign
import pytest

#: answers kept while files look settled: 0 ms, so the second run of a query right after a
#: change is the one a kept plan or summary would answer wrongly
SETTLE = ("spark.kafkalog.jvm.planCache.settleMs", "spark.kafkalog.batchSummaries.settleMs")


def _seeds(default: str) -> list[int]:
    first, _, last = os.environ.get("KAFKALOG_CAMPAIGN_SEEDS", default).partition("-")
    return list(range(int(first), int(last or first) + 1))


@pytest.fixture()
def eager(spark: Any) -> Iterator[Any]:
    from kafkalog.spark.source import path_in_use

    assert path_in_use(spark) == "jvm", "register() did not put the JVM source in front"
    for key in SETTLE:
        spark.conf.set(key, "0")
    try:
        yield spark
    finally:
        for key in SETTLE:
            spark.conf.unset(key)


def test_bounded_reads_before_and_after_a_change(eager: Any, tmp_path: Path) -> None:
    eager.conf.set("spark.kafkalog.jvm.fallback", "false")  # the Java decoder alone
    cache: dict[str, Path] = {}
    found: list[str] = []
    for seed in _seeds("3"):
        found += jvm_campaign.campaign(eager, seed, tmp_path, cache, queries=2)
    assert not found, "\n".join(found)


def test_reads_under_a_live_writer(eager: Any, tmp_path: Path) -> None:
    found: list[str] = []
    for seed in _seeds("2"):
        found += live_campaign.campaign(eager, seed, tmp_path, seconds=3.0)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("fmt", ["kafkalog_python", "kafkalog"])
def test_a_stream_under_a_live_writer(spark: Any, tmp_path: Path, fmt: str) -> None:
    """The Python stream source and the JVM's, from the earliest offset while the writer
    appends, rolls and deletes: every record once, to the writer's end (or an error naming the
    offsets retention removed first)."""
    found: list[str] = []
    for seed in _seeds("1"):
        found += live_campaign.stream_campaign(spark, seed, tmp_path, 3.0, fmt)
    assert not found, "\n".join(found)
