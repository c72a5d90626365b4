"""Which partitions a read names, and what ``load()`` checks of them before any action.

Light on purpose: PySpark asks a Python worker for the schema at ``load()``, and that worker
imports this and the options (no log layer, no numba: bench/RESULTS.md, time to the first
answer), so a missing path, an unknown topic or an incomplete offsets JSON fails there, with
one line in the user's terms, instead of at the first action inside a long error. The planner
(``plan.py``) and the stream use the same selection. ``check_at_load`` needs no Spark: another
front end (a JVM data source calling the planner) runs it the same way.
"""

from __future__ import annotations

import logging
import os
import re

from kafkalog import files
from kafkalog.log.layout import WrongLevelError, missing_path_hint
from kafkalog.log.layout import partition_directories as _partitions_under
from kafkalog.spark.options import OptionError, ReadOptions

logger = logging.getLogger("kafkalog.spark")

#: topics a Kafka admin client does not list (internal ones, and KRaft's metadata log, which is
#: no topic at all); a pattern never selects them, but subscribe and assign name them
INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"}
)

#: what ``path`` must hold, said when it does not
EXPECTED = (
    "a Kafka data directory (a broker's log.dirs entry: <topic>-<partition> directories of "
    "segment files) or one partition directory (00000000000000000000.log and its indexes)"
)


class UnknownPartitionError(OptionError):
    """A subscribed topic or an assigned partition that ``path`` does not hold (not data loss:
    nothing of it was ever there to lose)."""


def check_at_load(opts: ReadOptions) -> None:
    """What ``load()`` can check without opening a log, raising :class:`OptionError` with the
    user's terms: ``path`` is a directory holding Kafka partitions; the subscribed topics and
    assigned partitions are there (unless ``failOnDataLoss=false``, which reads what is there
    and warns at planning, as a stream waiting for a topic to be created needs); per-partition
    offsets JSON names every partition read."""
    found = partition_directories(opts.path, opts.location)
    named = (opts.subscribe, opts.subscribe_pattern, opts.assign) != (None, None, None)
    if not found and not named:
        raise OptionError(
            f"option path={_shown(opts)!r} holds no Kafka partitions; expected {EXPECTED}"
        )
    chosen = select_partitions(found, opts, warn=False)
    check_partitions_named(set(chosen), opts)


def _shown(opts: ReadOptions) -> str:
    return files.redacted(opts.location or opts.path)


def partition_directories(path: str, location: str = "") -> dict[tuple[str, int], str]:
    """Every partition under ``path``: a data directory, or one partition directory."""
    shown = files.redacted(location or path)
    try:
        return _partitions_under(path)
    except FileNotFoundError:
        if not files.is_remote(path) and files.exists(path):
            raise OptionError(
                f"option path={shown!r} is a file, not a directory; expected {EXPECTED}"
            ) from None
        hint = missing_path_hint(path)
        if not hint and not files.is_remote(path) and not os.path.isabs(path):
            hint = f" (relative to the driver's working directory {os.getcwd()})"
        raise OptionError(f"option path={shown!r}: no such directory{hint}") from None
    except WrongLevelError as e:  # the parent of a data directory named like a partition
        raise OptionError(f"option path={shown!r}: {e}") from None


def select_partitions(
    found: dict[tuple[str, int], str], opts: ReadOptions, *, warn: bool = True
) -> dict[tuple[str, int], str]:
    """The partitions of ``found`` the read names (``subscribe``, ``subscribePattern``,
    ``assign``, else all). One named but not found is an :class:`UnknownPartitionError`, or
    with ``failOnDataLoss=false`` a warning (when ``warn``) and no rows from it."""
    if opts.subscribe is not None:
        wanted = set(opts.subscribe)
        chosen = {tp: d for tp, d in found.items() if tp[0] in wanted}
        missing = wanted - {t for t, _ in chosen}
        if missing and opts.fail_on_data_loss:
            raise UnknownPartitionError(
                f"option subscribe: no topic {_listed(sorted(missing))} in {_shown(opts)} "
                f"(its topics: {_listed(sorted({t for t, _ in found}))}; failOnDataLoss=false "
                "reads the others)"
            )
        if missing and warn:  # failOnDataLoss=false: read what is there, but never in silence
            logger.warning(
                "kafkalog: subscribed topic(s) %s not found in %s: no rows from them "
                "(failOnDataLoss=false)",
                sorted(missing),
                _shown(opts),
            )
        return chosen
    if opts.subscribe_pattern is not None:
        # Spark 4's Kafka source lists topics with its admin client (the default since 3.4,
        # spark.sql.streaming.kafka.useDeprecatedOffsetFetching=false) and keeps those where
        # the pattern is found anywhere in the name (ConsumerStrategy.SubscribePatternStrategy:
        # ``findFirstIn``), never internal topics: the same here
        rx = re.compile(opts.subscribe_pattern)
        return {
            tp: d for tp, d in found.items() if tp[0] not in INTERNAL_TOPICS and rx.search(tp[0])
        }
    if opts.assign is not None:
        chosen = {}
        for topic, parts in opts.assign.items():
            for p in parts:
                if (topic, p) in found:
                    chosen[(topic, p)] = found[(topic, p)]
                    continue
                if opts.fail_on_data_loss:
                    have = sorted(q for t, q in found if t == topic)
                    there = f"its partitions: {_listed(have)}" if have else "no such topic"
                    raise UnknownPartitionError(
                        f"option assign: no partition {topic}-{p} in {_shown(opts)} ({there}; "
                        "failOnDataLoss=false reads the others)"
                    )
                if warn:
                    logger.warning(
                        "kafkalog: assigned partition %s-%d not found in %s: no rows from it "
                        "(failOnDataLoss=false)",
                        topic,
                        p,
                        _shown(opts),
                    )
        return chosen
    return dict(found)


def _listed(names: list[str] | list[int]) -> str:
    return ", ".join(map(str, names)) or "none"


def check_partitions_named(chosen: set[tuple[str, int]], opts: ReadOptions) -> None:
    """Per-partition JSON must name exactly the partitions read, as Spark requires
    (KafkaOffsetReaderAdmin.fetchPartitionOffsets and fetchSpecificTimestampBasedOffsets assert
    it): a partition left out is an error there, not a silent earliest or latest here."""
    specs = [
        ("startingOffsetsByTimestamp", opts.starting_by_timestamp),
        ("endingOffsetsByTimestamp", opts.ending_by_timestamp),
    ]
    if opts.starting_by_timestamp is None:
        specs.append(("startingOffsets", opts.starting_offsets))
    if opts.ending_by_timestamp is None:
        specs.append(("endingOffsets", opts.ending_offsets))
    for name, spec in specs:
        if not isinstance(spec, dict):
            continue
        named = {(t, p) for t, parts in spec.items() for p in parts}
        if named != chosen:
            missing, extra = sorted(chosen - named), sorted(named - chosen)
            raise OptionError(
                f"option {name} must give every partition read, and no other (-2 earliest, "
                f"-1 latest): missing {_names(missing)}; not read {_names(extra)}"
            )


def _names(tps: list[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps) or "none"
