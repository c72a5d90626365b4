"""``kafkalog lookup`` and ``kafkalog cat`` on a partition in an S3 bucket print what they
print for the local copy (apart from the location), and leave the bucket alone."""

from __future__ import annotations

from typing import Any

from clirun import kafkalog, kafkalog_here
from provenance import FIXTURES

PARTITION = "kafka-4.0-snapshot-javacode/v2-none-0"


def test_lookup_and_cat_over_s3(s3_store: Any) -> None:
    before = s3_store.listing()
    local, remote = str(FIXTURES / PARTITION), s3_store.uri(PARTITION)
    for args in (
        ("lookup", "--offset", "57"),
        ("lookup", "--timestamp", "1700000003000"),
        ("cat", "--offset", "100", "--max", "5"),
        ("cat", "--timestamp", "1700000002000", "--max", "3"),
    ):
        here = kafkalog_here(args[0], local, *args[1:])
        there = kafkalog_here(args[0], remote, *args[1:])
        assert here.returncode == there.returncode == 0, there.stderr
        assert here.stdout.strip()
        canonical = f"s3://kafkalog-fixtures/fixtures/{PARTITION}"
        assert there.stdout.replace(canonical, local) == here.stdout
        assert "testing:testing" not in there.stdout + there.stderr
    assert s3_store.listing() == before


def test_unresolvable_location_is_a_clear_cli_error() -> None:
    done = kafkalog("cat", "nosuch://bucket/t-0", "--offset", "0")
    assert done.returncode != 0
    assert "nosuch://bucket/t-0" in done.stderr and "pyarrow.fs" in done.stderr
    assert "Traceback" not in done.stderr


def test_verify_and_timeline_over_s3(s3_store: Any, tmp_path: Any) -> None:
    before = s3_store.listing()
    for relative in ("kafka-4.0-snapshot-javacode", "real-kraft-ronem123"):
        local, remote = str(FIXTURES / relative), s3_store.uri(relative)
        here, there = kafkalog_here("verify", local), kafkalog_here("verify", remote)
        assert there.returncode == here.returncode, there.stderr
        canonical = f"s3://kafkalog-fixtures/fixtures/{relative}"
        assert there.stdout.replace(canonical, local) == here.stdout
        assert "segments" in here.stdout or "segment" in here.stdout
        png = tmp_path / f"{relative}.png"
        drawn = kafkalog_here("timeline", remote, "--png", str(png))
        assert drawn.returncode == 0, drawn.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert s3_store.listing() == before
