"""Layer 5: the ``kafkalog`` command."""

from kafkalog.cli.main import main

__all__ = ["main"]
