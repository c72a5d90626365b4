"""``kafkalog ingest`` on awkward input: bad lines late in a file, bad timestamps, a BOM,
non-string keys, missing columns, nanosecond and binary Parquet columns."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from clirun import kafkalog_here


def _cat(part: Path) -> list[dict[str, object]]:
    done = kafkalog_here("cat", str(part))
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_bad_line_after_the_first_chunk_leaves_nothing_appended(tmp_path: Path) -> None:
    src = tmp_path / "big.jsonl"
    lines = [json.dumps({"k": i, "ts": 1_700_000_000_000 + i}) for i in range(50_001)]
    src.write_text("\n".join([*lines, "oops"]) + "\n")
    done = kafkalog_here("ingest", str(src), "--data", str(tmp_path / "d"), "--topic", "t",
                    "--key-field", "k", "--timestamp-field", "ts")  # fmt: skip
    assert done.returncode == 2
    assert f"{src} line 50002: not JSON" in done.stderr
    assert _cat(tmp_path / "d" / "t-0") == []


def test_bad_timestamps_name_the_line(tmp_path: Path) -> None:
    for text in ('{"ts":"garbage"}', '{"ts":NaN}', '{"ts":99999999999999999999999}', '{"ts":-5}'):
        src = tmp_path / "x.jsonl"
        src.write_text('{"ts": 1}\n' + text + "\n")
        data = tmp_path / "d"
        done = kafkalog_here("ingest", str(src), "--data", str(data), "--topic", "t",
                        "--timestamp-field", "ts")  # fmt: skip
        assert done.returncode == 2, (text, done.stderr)
        assert f"{src} line 2:" in done.stderr, done.stderr
        assert "internal error" not in done.stderr
        assert not data.exists()


def test_bom_and_json_keys(tmp_path: Path) -> None:
    src = tmp_path / "a.jsonl"
    src.write_bytes(b'\xef\xbb\xbf{"k":"a"}\r\n{"k":true}\r\n{"k":{"a":1}}\r\n')
    done = kafkalog_here("ingest", str(src), "--data", str(tmp_path / "d"), "--topic", "t",
                    "--key-field", "k")  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = _cat(tmp_path / "d" / "t-0")
    assert [r["value"] for r in got] == ['{"k":"a"}', '{"k":true}', '{"k":{"a":1}}']
    assert [r["key"] for r in got] == ["a", "true", '{"a":1}']


def test_missing_column_is_a_clear_error_and_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "c.csv"
    src.write_text("a,b\n1,2\n")
    data = tmp_path / "d"
    done = kafkalog_here(
        "ingest", str(src), "--data", str(data), "--topic", "t", "--key-field", "no"
    )
    assert done.returncode == 2, done.stderr
    assert "'no' is not a column" in done.stderr and str(src) in done.stderr
    assert not data.exists()
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2,3\n")
    done = kafkalog_here("ingest", str(bad), "--data", str(data), "--topic", "t")
    assert done.returncode == 2 and str(bad) in done.stderr, done.stderr


def test_parquet_nanoseconds_and_binary(tmp_path: Path) -> None:
    src = tmp_path / "p.parquet"
    pq.write_table(
        pa.table(
            {
                "id": [1, 2],
                "blob": pa.array([b"\x00\xff", b"x"], pa.binary()),
                "ts": pa.array([1_700_000_000_000_000_001, 5], pa.timestamp("ns")),
            }
        ),
        src,
    )
    done = kafkalog_here("ingest", str(src), "--data", str(tmp_path / "d"), "--topic", "t",
                    "--key-field", "id", "--timestamp-field", "ts")  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = _cat(tmp_path / "d" / "t-0")
    assert [r["timestamp"] for r in got] == [1_700_000_000_000, 0]
    values = [json.loads(str(r["value"])) for r in got]
    assert [v["blob"] for v in values] == ["base64:AP8=", "x"]
