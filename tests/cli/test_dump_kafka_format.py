"""``kafkalog dump`` against the lines of Kafka's DumpLogSegments.scala (dumpLog), case by case."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from kafkalog.cli import dump
from provenance import FIXTURES

V2_NONE = bytes.fromhex(
    "0000000000000064000000600000000702bfafce330000000000020000018bcfe568000000018bcfe568"
    "7bffffffffffffffffffffffffffff0000000320000000086b6579310c76616c756531002600f6010201"
    "04763204046831047631046832011200cf0f04046b330100"
)
JAVACODE = FIXTURES / "kafka-4.0-snapshot-javacode"


def run_dump(*argv: str) -> tuple[int, list[str], list[str]]:
    parser = argparse.ArgumentParser()
    dump.add_parser(parser.add_subparsers())
    args = parser.parse_args(["dump", *argv])
    out, err = io.StringIO(), io.StringIO()
    rc = dump.run(args, out, err)
    return rc, out.getvalue().splitlines(), err.getvalue().splitlines()


def test_skip_record_metadata_null_key_has_no_indent(tmp_path: Path) -> None:
    """dumpLog prints ``prefix`` ("| ") only before the key; the payload part is always
    `` payload: V``, so a null-key record's line is `` payload: V``."""
    seg = tmp_path / "00000000000000000100.log"
    seg.write_bytes(V2_NONE)
    rc, out, _ = run_dump("--print-data-log", "--skip-record-metadata", "--files", str(seg))
    assert rc == 0
    assert out[3:] == ["| key: key1 payload: value1", " payload: v2", "| key: k3"]


def test_legacy_record_line_prints_the_message_validity(tmp_path: Path) -> None:
    """``isValid: ${r.isValid}`` is the legacy message's own CRC check, not a constant."""
    data = bytearray((JAVACODE / "v1-none-0" / "00000000000000000000.log").read_bytes())
    data[-3] ^= 0xFF  # a value byte of the last message: its CRC no longer matches
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(bytes(data))
    rc, out, _ = run_dump("--deep-iteration", "--files", str(seg))
    assert rc == 1  # unlike Kafka's tool, a CRC failure sets the status
    assert out[-2].endswith("crc: 4088787588 isvalid: false")
    assert out[-1] == (
        "| offset: 111 CreateTime: 1700000009000 keySize: 4 valueSize: 6 "
        "isValid: false crc: 4088787588}"
    )
    assert out[-3].endswith("isValid: true crc: " + out[-4].split("crc: ")[1].split()[0] + "}")


def test_a_decoder_option_implies_print_data_log(tmp_path: Path) -> None:
    """``shouldPrintDataLog`` is true when --key-decoder-class or --value-decoder-class is given."""
    seg = tmp_path / "00000000000000000100.log"
    seg.write_bytes(V2_NONE)
    for option in ("--key-decoder", "--value-decoder"):
        rc, out, _ = run_dump(option, "string", "--files", str(seg))
        assert rc == 0
        assert out[3].endswith("headerKeys: [] key: key1 payload: value1")
        assert out[4].endswith("headerKeys: [h1,h2] payload: v2")


def test_max_bytes_at_int_max_still_reports_invalid_bytes(tmp_path: Path) -> None:
    """dumpLog prints the trailing-bytes line when ``maxBytes == Integer.MAX_VALUE``, so giving
    the default explicitly changes nothing; any other --max-bytes suppresses it."""
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(V2_NONE + V2_NONE[:50])
    _, out, _ = run_dump("--max-bytes", str(2**31 - 1), "--files", str(seg))
    assert out[-1] == f"Found 50 invalid bytes at the end of {seg.name}"
    _, out, _ = run_dump("--max-bytes", str(2**31 - 2), "--files", str(seg))
    assert out[-1].startswith("baseOffset: 100 ")
