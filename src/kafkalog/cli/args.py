"""Argument types shared by the commands: a bad number is an argparse usage error naming the
option, not an empty output or a traceback further in."""

from __future__ import annotations

import argparse
import datetime as dt
from collections.abc import Callable


def int_between(low: int, high: int | None = None) -> Callable[[str], int]:
    """An ``argparse`` type for an integer in ``[low, high]`` (no upper bound when None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def epoch_millis(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (UTC when no zone is given); ValueError for
    anything else."""
    if text.lstrip("-").isdigit():
        return int(text)
    when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def time_arg(text: str) -> int:
    """An ``argparse`` type for a time: epoch milliseconds or ISO 8601 (UTC when no zone)."""
    try:
        return epoch_millis(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither epoch milliseconds nor an ISO 8601 time"
        ) from None
