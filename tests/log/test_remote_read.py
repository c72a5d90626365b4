"""Partition logs read through ``s3://`` URIs (pyarrow's S3 filesystem against a real S3
endpoint on loopback) agree with the same directories read from the local disk, entry for entry,
and reading changes nothing in the bucket."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from kafkalog import files
from kafkalog.log import Log
from kafkalog.log.logdir import LogDir, partition_directories
from provenance import FIXTURES, fixture_partitions


def _summary(log: Log) -> dict[str, Any]:
    """Everything a reader learns from a log: segments, bounds, every entry and record, the
    time lookups of every timestamp present (and around it), the last stable offset."""
    entries = []
    stamps: set[int] = set()
    for e in log.batches():
        records = []
        if not (e.magic < 2 and e.compression.label == "zstd"):
            for r in e.records():
                records.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
                stamps.update((r.timestamp - 1, r.timestamp, r.timestamp + 1))
        entries.append((e.position, e.base_offset, e.last_offset, e.is_control, tuple(records)))
    present = sorted(t for t in stamps if t >= 0)
    probes = [*present[:: max(1, len(present) // 30)], -1, -2, -3]  # each is a round trip
    offsets = range(log.log_start_offset, log.log_end_offset)
    return {
        "segments": [(s.base_offset, s.size) for s in log.segments],
        "bounds": (log.log_start_offset, log.log_end_offset),
        "entries": entries,
        "times": [(t, log.offsets_for_times(t)) for t in probes],
        "lso": log.last_stable_offset(),
        "read": [log.read(o, 4096)[:64] for o in offsets[:: max(1, len(offsets) // 20)]],
    }


@pytest.mark.parametrize(
    "directory", list(fixture_partitions()), ids=lambda p: str(p.relative_to(FIXTURES))
)
def test_remote_log_reads_as_local(s3_store: Any, directory: Path) -> None:
    remote = files.resolve(s3_store.uri(directory.relative_to(FIXTURES).as_posix()))
    assert remote.startswith("s3://kafkalog-fixtures/fixtures/") and "testing" not in remote
    local_log, remote_log = Log(directory, writable=False), Log(remote, writable=False)
    try:
        expected = _summary(local_log)
        assert _summary(remote_log) == expected
        assert remote_log.topic_id == local_log.topic_id
    finally:
        local_log.close()
        remote_log.close()


def test_remote_data_directory_listing_and_logdir(s3_store: Any) -> None:
    before = s3_store.listing()
    for top in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        remote = files.resolve(s3_store.uri(top.name))
        local_parts = partition_directories(top) if _has_partitions(top) else {}
        if not local_parts:
            continue
        remote_parts = partition_directories(remote)
        assert sorted(remote_parts) == sorted(local_parts)
        assert all(d == f"{remote}/{Path(local_parts[tp]).name}" for tp, d in remote_parts.items())
        with LogDir(top) as local, LogDir(remote) as over_s3:
            assert over_s3.partitions() == local.partitions()
            assert over_s3.had_clean_shutdown == local.had_clean_shutdown
            assert over_s3.log_start_offsets == local.log_start_offsets
            for tp in local.partitions()[:3]:
                a, b = local.log(*tp), over_s3.log(*tp)
                assert (b.log_start_offset, b.log_end_offset) == (
                    a.log_start_offset,
                    a.log_end_offset,
                )
    assert s3_store.listing() == before  # a reader changes no object


def _has_partitions(path: Path) -> bool:
    try:
        return bool(partition_directories(path))
    except FileNotFoundError:
        return False


def test_files_calls_agree_local_and_remote(s3_store: Any) -> None:
    local = FIXTURES / "kafka-4.0-snapshot-javacode" / "v2-txn-0"
    remote = files.resolve(s3_store.uri("kafka-4.0-snapshot-javacode/v2-txn-0"))
    assert sorted(files.listdir(remote)) == sorted(files.listdir(str(local)))
    assert sorted(files.scandir(remote)) == sorted(files.scandir(str(local)))
    assert files.isdir(remote) and not files.isdir(remote + "/nothing-here")
    for name in files.listdir(str(local)):
        lp, rp = str(local / name), f"{remote}/{name}"
        assert files.exists(rp) and files.getsize(rp) == files.getsize(lp)
        assert files.read_bytes(rp) == files.read_bytes(lp)
        assert files.read_bytes(rp, limit=5) == files.read_bytes(lp)[:5]
        handle = files.open_read(rp)
        try:
            size = handle.size()
            assert handle.pread(10, max(0, size - 4)) == files.read_bytes(lp)[max(0, size - 4) :]
        finally:
            handle.close()
        assert files.mtime_ms(rp) > 1_600_000_000_000  # the object's upload time
    with pytest.raises(FileNotFoundError):
        files.open_read(remote + "/00000000000000000099.log")
    with pytest.raises(FileNotFoundError):
        files.getsize(remote + "/nothing")
    assert not files.exists(remote + "/nothing")


def test_locations_resolve_to_plain_strings(tmp_path: Path) -> None:
    assert files.resolve(str(tmp_path)) == str(tmp_path)
    assert files.resolve("relative/dir").endswith("/relative/dir")
    spaced = tmp_path / "a dir"
    assert files.resolve(spaced.as_uri()) == str(spaced)  # file:// with percent-encoding
    assert not files.is_remote(spaced.as_uri()) and not files.is_remote(str(spaced))
    assert files.is_remote("s3://b/k") and files.is_remote("gs://b/k")
    with pytest.raises(files.RemoteLocationError, match="nosuch://b/d"):
        files.resolve("nosuch://b/d")


def test_remote_log_cannot_be_opened_for_writing(s3_store: Any) -> None:
    remote = files.resolve(s3_store.uri("kafka-4.0-snapshot-javacode/v2-txn-0"))
    with pytest.raises(files.RemoteLocationError, match="read-only"):
        Log(remote)
    with pytest.raises(files.RemoteLocationError, match="read-only"):
        LogDir(files.resolve(s3_store.uri("kafka-4.0-snapshot-javacode")), writable=True)


def test_remote_open_lists_once_and_opens_segments_on_first_read(
    s3_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    relative = "real-kraft-ronem123/__consumer_offsets-31"  # two segments
    remote = files.resolve(s3_store.uri(relative))
    opened: list[str] = []
    real_open = files.open_read

    def counting(path: str) -> files.ReadHandle:
        if files.is_remote(path):
            opened.append(path)
        return real_open(path)

    monkeypatch.setattr(files, "open_read", counting)
    with Log(remote, writable=False) as log, Log(FIXTURES / relative, writable=False) as local:
        assert len(log.segments) == 2
        # sizes came with the listing; only the active segment is read (for the log end)
        assert [p for p in opened if p.endswith(".log")] == [log.segments[1].log.path]
        assert [s.size for s in log.segments] == [s.size for s in local.segments]
        first = log.segments[0]
        got = [(r.offset, r.value) for r in log.records(first.base_offset)]
        assert got == [(r.offset, r.value) for r in local.records(first.base_offset)]
        assert first.log.path in opened


def test_a_store_failing_mid_read_names_file_and_position(s3_store: Any) -> None:
    remote = files.resolve(s3_store.uri("kafka-4.0-snapshot-javacode/v2-none-0"))
    path = f"{remote}/00000000000000000000.log"
    handle = files.open_read(path)
    real = handle._file  # type: ignore[attr-defined]

    class Broken:
        def read_at(self, length: int, position: int) -> bytes:
            raise OSError("connection reset by peer")

        def close(self) -> None:
            real.close()

    handle._file = Broken()  # type: ignore[attr-defined]
    with pytest.raises(files.RemoteLocationError, match=r"at byte 100 of s3://.*0000\.log"):
        handle.pread(10, 100)
    handle.close()
    with pytest.raises(files.RemoteLocationError, match="cannot stat"):
        files.getsize(
            files.resolve(
                "s3://testing:testing@nobucket/x?endpoint_override=http://127.0.0.1:9"
                "&region=us-east-1"
            )
        )


def test_a_file_above_the_named_location_is_read_with_its_store_settings(s3_store: Any) -> None:
    """A partition named by an ``s3://`` URI with its endpoint and credentials: its data
    directory's ``log-start-offset-checkpoint`` lies above it and is read from the same store
    with the same settings (with pyarrow's defaults it would ask the public cloud and wait for
    its time-out, or read another store)."""
    top = FIXTURES / "kafka-4.0-snapshot-javacode"
    partition = files.resolve(s3_store.uri((top / "v2-none-0").relative_to(FIXTURES).as_posix()))
    checkpoint = partition.rsplit("/", 1)[0] + "/log-start-offset-checkpoint"
    started = time.monotonic()
    assert files.read_bytes(checkpoint) == (top / "log-start-offset-checkpoint").read_bytes()
    assert time.monotonic() - started < 2.0  # no time-out waited for on the way
