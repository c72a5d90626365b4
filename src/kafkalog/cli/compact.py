"""``kafkalog compact``: clean compacted partitions as Kafka's log cleaner does.

Every partition of a data directory (or the one partition directory given) whose topic is
compacted is cleaned to the end of its dirty section (several rounds when its keys do not fit
``--dedupe-buffer-size``), the data directory's ``cleaner-offset-checkpoint`` moved, and for
``cleanup.policy=compact,delete`` retention run after. ``--dry-run`` writes nothing and says
what the (first) cleaning would remove.

Topic configurations live in the cluster's metadata, not in the partition directories:
``__consumer_offsets`` and ``__transaction_state`` are compacted (Kafka's defaults for them);
other topics take ``--config`` (``cleanup.policy=compact`` at least), and a directory
``kafkalog serve`` keeps has its topics' overrides in ``.kafkalog-serve.json``, which are
applied over them. A partition whose topic is not compacted is listed as skipped. A data
directory a running broker holds is refused.

A partition that cannot be cleaned (damage: the error names file and byte) is left as it was
and reported as uncleanable, as Kafka's cleaner marks it, and the others are cleaned; the exit
status is then 1 (`kafkalog repair` moves the damage aside, then compact again).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import IO, Any

from kafkalog.cli.args import time_arg
from kafkalog.cli.served_configs import StoredConfigs
from kafkalog.log.lock import LockedError

INTERNAL_COMPACTED = ("__consumer_offsets", "__transaction_state")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compact",
        help="clean compacted partitions as Kafka's log cleaner does (latest value per key)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  kafkalog compact data --config cleanup.policy=compact --dry-run\n"
        "  kafkalog compact data/__consumer_offsets-7 --json",
    )
    p.add_argument("path", help="a data directory (every partition) or one partition directory")
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config for the topics not compacted by default (repeatable)",
    )
    p.add_argument("--dry-run", action="store_true", help="write nothing; say what would go")
    p.add_argument("--json", action="store_true", help="one JSON object per partition")
    p.add_argument(
        "--now",
        type=time_arg,
        default=None,
        metavar="TIMESTAMP",
        help="the cleaning's clock (epoch ms or ISO 8601; default: now): delete horizons, lags",
    )
    p.add_argument(
        "--dedupe-buffer-size",
        type=int,
        default=None,
        metavar="BYTES",
        help="the offset map's memory (log.cleaner.dedupe.buffer.size, default 134217728)",
    )
    p.set_defaults(run=run)


def _config_for(topic: str, given: dict[str, str], stored: dict[str, str]) -> Any:
    from kafkalog.log import TopicConfig

    props = dict(given)
    if topic in INTERNAL_COMPACTED:
        props["cleanup.policy"] = "compact"
    props.update(stored)
    return TopicConfig.from_properties(props, ignore_unmodelled=True)


def _shown(bar: Any, name: str) -> Any:
    """A cleaning's progress callback drawing ``bar``: the offset map, then the rewrite."""
    phase = [""]

    def show(what: str, done: int, total: int) -> None:
        if what != phase[0]:
            phase[0] = what
            bar.reset(total=total)
            bar.set_description(f"{name} {what}")
        bar.n = done
        bar.refresh()

    return show


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from kafkalog.cli import progress as bars
    from kafkalog.cli.verify import partitions_in
    from kafkalog.errors import KafkalogError
    from kafkalog.log import Log
    from kafkalog.log.cleaner import CleanerOptions
    from kafkalog.log.logdir import refuse_if_broker

    out = out or sys.stdout
    given: dict[str, str] = {}
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            raise KafkalogError(f"--config {item!r} is not KEY=VALUE")
        given[key.strip()] = value
    now = int(time.time() * 1000) if args.now is None else args.now
    options = CleanerOptions(
        **(
            {}
            if args.dedupe_buffer_size is None
            else {"dedupe_buffer_size": args.dedupe_buffer_size}
        )
    )
    partitions = sorted(partitions_in(args.path).items())
    totals = {"partitions": 0, "skipped": 0, "bytesBefore": 0, "bytesAfter": 0}
    stored = StoredConfigs()
    totals["uncleanable"] = 0
    for (topic, partition), directory in partitions:
        data_dir = os.path.dirname(directory)
        refuse_if_broker(data_dir)
        config = _config_for(topic, given, stored.of(data_dir, topic))
        name = f"{topic}-{partition}"
        if not config.compact:
            totals["skipped"] += 1
            reason = f"cleanup.policy={','.join(config.cleanup_policy)}"
            row = {"type": "partition", "partition": name, "skipped": True, "reason": reason}
            _say(args.json, row, f"{name}: skipped ({reason}: not compacted)", out)
            continue
        try:
            with Log(directory, config, writable=not args.dry_run) as log:
                bar = bars.bar(name, total=None)
                try:
                    result = log.compact(
                        now=now, options=options, progress=_shown(bar, name), dry_run=args.dry_run
                    )
                finally:
                    bar.close()
                active_base, log_end = log.segments[-1].base_offset, log.log_end_offset
        except LockedError as e:
            # another process holds the partition (a cleaning in progress): passed by, as
            # Kafka's cleaner passes by a partition being cleaned
            totals["skipped"] += 1
            row = {"type": "partition", "partition": name, "skipped": True, "reason": str(e)}
            _say(args.json, row, f"{name}: skipped (in use: {e})", out)
            continue
        except (KafkalogError, OSError) as e:
            # Kafka's cleaner marks such a partition uncleanable and cleans the others
            totals["uncleanable"] += 1
            row = {"type": "partition", "partition": name, "uncleanable": True, "error": str(e)}
            _say(args.json, row, f"{name}: uncleanable, left as it was: {e}", out)
            continue
        totals["partitions"] += 1
        totals["bytesBefore"] += result.size_before
        totals["bytesAfter"] += result.size_after
        row = {"type": "partition", **result.as_dict(), "partition": name, "skipped": False}
        if args.json:
            print(json.dumps(row), file=out)
        else:
            s = result.stats
            verb = "would remove" if args.dry_run else "removed"
            more = " (more rounds would follow)" if result.more_rounds else ""
            if result.rounds == 0 and result.end_offset <= active_base < log_end:
                # Why: "offsets [0, 0) cleaned in 0 round(s)" over a log of records read as a
                # cleaner that does nothing; Kafka's never cleans the active segment either
                more = (
                    f" (nothing to clean: offsets [{active_base}, {log_end}) are the active "
                    "segment, which Kafka's cleaner never cleans until it rolls)"
                )
            print(
                f"{name}: offsets [{result.first_dirty}, {result.end_offset}) cleaned in "
                f"{result.rounds} round(s){more}; {verb} {s.records_superseded} superseded "
                f"records, {s.tombstones_removed} tombstones, {s.aborted_removed} aborted "
                f"records, {s.markers_removed} markers, {s.keyless_removed} keyless; "
                f"{result.size_before} -> {result.size_after} bytes",
                file=out,
            )
    if args.json:
        print(
            json.dumps({"type": "summary", "dryRun": args.dry_run, "now": now, **totals}), file=out
        )
    else:
        verb = "would be" if args.dry_run else "are"
        bad = f", {totals['uncleanable']} uncleanable" if totals["uncleanable"] else ""
        print(
            f"{totals['partitions']} partitions cleaned, {totals['skipped']} skipped{bad}; "
            f"{totals['bytesBefore']} bytes {verb} {totals['bytesAfter']}",
            file=out,
        )
    return 1 if totals["uncleanable"] else 0


def _say(as_json: bool, row: dict[str, object], text: str, out: IO[str]) -> None:
    """One partition's line: its JSON row under --json, else the sentence for a person."""
    print(json.dumps(row) if as_json else text, file=out)
