"""A crash at each step of a cleaning's swap (SIGKILL of a child process) leaves a log that
loads to the records before the cleaning or after it: Kafka's loader rule for ``.cleaned``
(removed), ``.swap`` (completed) and ``.deleted`` (removed) files, which kafkalog's loader
applies. Every key keeps its latest value whichever it is, and no record is made up."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalog.log import Log, TopicConfig
from kafkalog.records import Record

CHILD = Path(__file__).parent / "helpers" / "cleaner_crash_child.py"
PROPS = {
    "cleanup.policy": "compact",
    "segment.bytes": "100000",
    "file.delete.delay.ms": "60000",
    "delete.retention.ms": "1000",
}


def build(directory: Path) -> None:
    log = Log(directory, TopicConfig.from_properties(PROPS))
    for i in range(60):
        key = b"k%d" % (i % 9)
        log.append_records([Record(-1, 1000 + i, key, None if i % 13 == 5 else b"v%d" % i)])
        if i % 15 == 14:
            log.roll()  # four small segments: one group, so old segments go one by one
    log.roll()
    log.append_records([Record(-1, 5000, b"k0", b"active")])
    log.close()


def clean(directory: Path) -> None:
    """A cleaning that runs to its end, as the child does when its step never comes: in this
    process (no crash to survive, so no process to start and import kafkalog into)."""
    with Log(directory, TopicConfig.from_properties(PROPS)) as log:
        log.compact(now=10_000)


def records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    with Log(directory, TopicConfig.from_properties(PROPS)) as log:
        return [(r.offset, r.key, r.value) for r in log.records()]


def latest(recs: list[tuple[int, bytes | None, bytes | None]]) -> dict[bytes | None, bytes | None]:
    return {k: v for _, k, v in recs}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list, list]:
    root = tmp_path_factory.mktemp("crash")
    source = root / "src" / "t-0"
    build(source)
    before = records(source)
    done = root / "done" / "t-0"
    shutil.copytree(source.parent, done.parent)
    clean(done)
    return source, before, records(done)


STEPS = [
    "cleaned-written",
    "swap-renamed",
    "old-deleted:0",
    "old-deleted:15",
    "old-deleted:45",
    "swapped",
    "checkpointed",
]


@pytest.mark.parametrize("step", STEPS)
def test_a_crash_at_each_step_loads_to_the_records_before_or_after(
    step: str, shapes: tuple[Path, list, list], tmp_path: Path
) -> None:
    source, before, after = shapes
    assert len(after) < len(before)
    work = tmp_path / "d" / "t-0"
    shutil.copytree(source.parent, work.parent)
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(work), step, json.dumps(PROPS)], capture_output=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    loaded = records(work)
    assert latest(loaded) == latest(before) == latest(after)
    assert set(loaded) <= set(before)  # nothing made up
    expect = before if step == "cleaned-written" else after
    assert loaded == expect
    names = os.listdir(work)
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    # and the next cleaning finishes what the crash interrupted
    clean(work)
    assert records(work) == after


#: every batch indexed: a cleaned-away segment's ``.timeindex`` keys its own last batch
#: (segments of 1600 bytes: the first two, ~750 bytes each, are cleaned as one group, the
#: third, which supersedes them, as another)
SPARSE_PROPS = {**PROPS, "index.interval.bytes": "1", "segment.bytes": "1600"}


def build_survivors_around_a_keyed_offset(directory: Path, keep_last: bool = True) -> None:
    """Two segments cleaned into one ``.swap`` named like the first: the first keeps offsets
    0-2, the second only its last record (19), so the swap's last batch (19) follows one
    ending at 2, while the first segment's own ``.timeindex`` (still in place until the swap
    completes) keys offset 9, which the cleaning removed. Kafka's loader completes such a
    swap; judging the swap's last batch by the *replaced* segment's index (the evidence of
    :mod:`kafkalog.log.last_batch`) called it damaged and refused the partition (seen in
    ``kafkalog serve``'s ``__consumer_offsets`` after a SIGKILL mid-swap:
    tests/server/serve_campaign.py)."""
    log = Log(directory, TopicConfig.from_properties(SPARSE_PROPS))
    for i in range(10):
        log.append_records([Record(-1, 1000 + i, b"u%d" % i, b"first %d" % i)])
    log.roll()
    for i in range(10):
        log.append_records([Record(-1, 1010 + i, b"w%d" % i, b"second %d" % i)])
    log.roll()
    superseded = [b"u%d" % i for i in range(3, 10)] + [
        b"w%d" % i for i in range(9 + (not keep_last))
    ]
    for i, key in enumerate(superseded):
        log.append_records([Record(-1, 2000 + i, key, b"later")])
    log.roll()
    log.append_records([Record(-1, 3000, b"active", b"")])
    log.close()


@pytest.mark.parametrize("step", ["swap-renamed", "old-deleted:0", "old-deleted:10"])
def test_a_crash_mid_swap_loads_when_a_replaced_index_keys_a_cleaned_offset(
    step: str, tmp_path: Path
) -> None:
    source = tmp_path / "src" / "t-0"
    build_survivors_around_a_keyed_offset(source)
    with Log(source, TopicConfig.from_properties(SPARSE_PROPS)) as log:
        before = [(r.offset, r.key, r.value) for r in log.records()]
    done = tmp_path / "done" / "t-0"
    shutil.copytree(source.parent, done.parent)
    with Log(done, TopicConfig.from_properties(SPARSE_PROPS)) as log:
        log.compact(now=10_000)
        after = [(r.offset, r.key, r.value) for r in log.records()]
    assert [o for o, _, _ in after][:4] == [0, 1, 2, 19]  # the shape this test is about
    work = tmp_path / "d" / "t-0"
    shutil.copytree(source.parent, work.parent)
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(work), step, json.dumps(SPARSE_PROPS)],
        capture_output=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert [n for n in os.listdir(work) if n.endswith(".swap")]  # the swap left to complete
    with Log(work, TopicConfig.from_properties(SPARSE_PROPS)) as log:
        loaded = [(r.offset, r.key, r.value) for r in log.records()]
    assert loaded == after and latest(loaded) == latest(before)
    assert not [n for n in os.listdir(work) if n.endswith((".cleaned", ".swap"))]


def test_a_crash_between_a_replaced_segments_renames_loads(tmp_path: Path) -> None:
    """SIGKILL while a replaced segment's files are renamed ``.deleted`` one by one (its
    ``.log`` renamed, its indexes not yet), the cleaned output ending below that segment's
    base (every record of it superseded): the loader finishes the deletion, indexes included
    (Kafka's loader deletes such stray index files too), where it called the segment's
    offsets lost and refused the partition (``kafkalog serve``'s compacted topic after a kill
    in the seeded campaign, tests/server/serve_campaign.py)."""
    source = tmp_path / "src" / "t-0"
    build_survivors_around_a_keyed_offset(source, keep_last=False)
    done = tmp_path / "done" / "t-0"
    shutil.copytree(source.parent, done.parent)
    with Log(done, TopicConfig.from_properties(SPARSE_PROPS)) as log:
        log.compact(now=10_000)
        after = [(r.offset, r.key, r.value) for r in log.records()]
    assert [o for o, _, _ in after][:4] == [0, 1, 2, 20]  # nothing of segment 10 kept
    work = tmp_path / "d" / "t-0"
    shutil.copytree(source.parent, work.parent)
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(work), "old-deleted:10", json.dumps(SPARSE_PROPS)],
        capture_output=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    # as if the kill came after the .log's rename, before its indexes'
    stem = "00000000000000000010"
    for suffix in (".index", ".timeindex"):
        (work / f"{stem}{suffix}.deleted").rename(work / f"{stem}{suffix}")
    assert (work / f"{stem}.log.deleted").exists()
    with Log(work, TopicConfig.from_properties(SPARSE_PROPS)) as log:
        loaded = [(r.offset, r.key, r.value) for r in log.records()]
    assert loaded == after
    assert not [n for n in os.listdir(work) if n.startswith(stem) and "snapshot" not in n]
