"""The cleaner's memory is bounded by the dedupe buffer and a constant (issue 24 §6), whatever
the log's size: the traced peak (Python and numpy allocations) while cleaning a log four times
larger, with the same dedupe buffer and more keys than it holds (so four times the rounds),
is the same. A reader that allocated per chunk read, per round, or per batch kept would show
here as a peak that grows with the log."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from kafkalog.log import Log, TopicConfig
from kafkalog.log.cleaner import CleanerOptions
from kafkalog.records import Record, encode_batch

CONFIG = TopicConfig(
    cleanup_policy="compact", segment_bytes=64 * 1024 * 1024, file_delete_delay_ms=0
)
DEDUPE = 96 * 1024  # 4096 slots: 3686 keys a round


def build(directory: Path, batches: int) -> int:
    """``batches`` batches of 100 records (~12 KB), each key written twice."""
    keys = batches * 100 // 2
    value = b"v" * 90
    with Log(directory, CONFIG) as log:
        for b in range(batches):
            recs = [
                Record(-1, 1000, b"key-%08d" % ((b * 100 + i) % keys), value) for i in range(100)
            ]
            log.append(encode_batch(recs))
        log.roll()
        return log.size_in_bytes()


def peak_while_cleaning(directory: Path) -> tuple[int, int]:
    with Log(directory, CONFIG) as log:
        tracemalloc.start()
        try:
            result = log.compact(now=10**12, options=CleanerOptions(dedupe_buffer_size=DEDUPE))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    return peak, result.rounds


def test_peak_memory_does_not_grow_with_the_log(tmp_path: Path) -> None:
    # a first cleaning loads the compiled passes (allocations that would count for one log)
    build(tmp_path / "warm" / "t-0", 4)
    peak_while_cleaning(tmp_path / "warm" / "t-0")
    small = build(tmp_path / "small" / "t-0", 140)
    large = build(tmp_path / "large" / "t-0", 560)
    assert small > 1_500_000 and large > 4 * small * 0.95
    peak_small, rounds_small = peak_while_cleaning(tmp_path / "small" / "t-0")
    peak_large, rounds_large = peak_while_cleaning(tmp_path / "large" / "t-0")
    # the large log's keys took four times the rounds: the map was full in both
    assert rounds_large >= 3 * rounds_small >= 3
    assert peak_large <= peak_small + 64 * 1024, (peak_small, peak_large)
    # and the bound: the dedupe buffer plus the cleaning's fixed buffers (~3 MB: a 1 MiB read
    # chunk, one append's output, a chunk's headers and one batch's record scratch)
    assert peak_large <= DEDUPE + 4 * 1024 * 1024, peak_large
