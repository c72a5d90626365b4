"""Kafka's log cleaner: compacted topics keep the latest record of each key (Kafka's
``LogCleaner``, ``LogCleanerManager``, ``SkimpyOffsetMap``, ``CleanedTransactionMetadata`` and
``MemoryRecords.filterTo``, written anew from their documented behaviour).

- :mod:`~kafkalog.log.cleaner.dirty` — the dirty section and ratio, segment groups;
- :mod:`~kafkalog.log.cleaner.offset_map` — key digest -> latest offset, memory-bounded;
- :mod:`~kafkalog.log.cleaner.txn` — aborted transactions and markers while walking;
- :mod:`~kafkalog.log.cleaner.batch_filter` — what a batch keeps, and its bytes;
- :mod:`~kafkalog.log.cleaner.cleaning` — one round: map, groups, ``.cleaned``, swap;
- :mod:`~kafkalog.log.cleaner.manager` — partitions being cleaned, and those given up on
  (uncleanable: damaged);
- :mod:`~kafkalog.log.cleaner.api` — :func:`clean_log`, :func:`clean_filthiest`, the
  ``cleaner-offset-checkpoint``.
"""

from kafkalog.log.cleaner.api import (
    CleanerOptions,
    CleanResult,
    clean_filthiest,
    clean_log,
    dirty_section_of,
)
from kafkalog.log.cleaner.batch_filter import FilterStats
from kafkalog.log.cleaner.cleaning import CleaningAborted
from kafkalog.log.cleaner.dirty import DirtySection
from kafkalog.log.cleaner.manager import CleanerManager, CleaningInProgress, Uncleanable
from kafkalog.log.cleaner.offset_map import OffsetMap
from kafkalog.log.cleaner_checkpoint import (
    checkpoint_path,
    create_checkpoint,
    forget_partition,
    read_checkpoint,
)

__all__ = [
    "CleanResult",
    "CleanerManager",
    "CleanerOptions",
    "CleaningAborted",
    "CleaningInProgress",
    "DirtySection",
    "FilterStats",
    "OffsetMap",
    "Uncleanable",
    "checkpoint_path",
    "clean_filthiest",
    "clean_log",
    "create_checkpoint",
    "dirty_section_of",
    "forget_partition",
    "read_checkpoint",
]
