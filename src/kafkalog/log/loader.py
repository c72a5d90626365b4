"""Loading and recovery of a partition directory (Kafka's LogLoader, spec §7.9), apart from
the running log (:mod:`kafkalog.log.log`): interrupted swaps completed or undone, temporary and
``.deleted`` files removed, segments opened and those with damaged indexes rebuilt, recovery
from the recovery point after an unclean shutdown, and the producer state rebuilt from the
newest snapshot (:func:`rebuild_producer_state`).

Every segment is recovered with the producer state as it stood at its base offset, so the
``.txnindex`` entries it rebuilds are the ones the broker wrote.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING

from kafkalog import files
from kafkalog.errors import (
    CorruptIndexError,
    CorruptRecordError,
    DamagedLogError,
    KafkalogError,
    unreadable_file,
)
from kafkalog.log.config import TopicConfig
from kafkalog.log.damage import (
    LostSegment,
    Problem,
    check_tail,
    end_past_damage,
    first_problem,
    log_cut,
)
from kafkalog.log.layout import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    is_offset_prefix,
    is_segment_log,
    offset_from_filename,
    segment_file,
)
from kafkalog.log.local_log import LocalLog
from kafkalog.log.producer_state import ProducerStateManager
from kafkalog.log.segment import LogSegment
from kafkalog.records import RecordBatch
from kafkalog.records.types import DEFAULT_LIMITS, Limits

#: partition directories that are not the live partition (a deleted topic's, a move's)
_NOT_LIVE = ("-delete", "-future", "-stray")

if TYPE_CHECKING:
    from kafkalog.log.checkpoints import LeaderEpochCache

logger = logging.getLogger("kafkalog.log")

# KRaft snapshots marked for deletion are left to the metadata log's own recovery (LogLoader)
_KRAFT_SNAPSHOT_DELETED = ".checkpoint.deleted"
_SNAPSHOT_TMP = ".snapshot.tmp"  # a snapshot write cut short by a crash


def rebuild_producer_state(
    log: LocalLog, state: ProducerStateManager, log_start: int, last_offset: int
) -> None:
    """Kafka's UnifiedLog.rebuildProducerState: the newest snapshot in (log start, last
    offset] (newer ones deleted), then the batches from there up to ``last_offset``, with
    snapshots taken at the last two segments' base offsets and at ``last_offset``."""
    state.truncate_and_reload(log_start, last_offset)
    bases = log.segments.bases
    to_snapshot = {last_offset, *bases[-2:]}
    if last_offset > state.map_end_offset:
        for seg, _ in log.segments.from_floor(state.map_end_offset):
            base = seg.base_offset
            if base >= last_offset:
                break
            start = max(base, state.map_end_offset, log_start)
            state.map_end_offset = start
            if base in to_snapshot:
                state.take_snapshot()
            replay_segment(log, seg, state, start, last_offset)
    state.map_end_offset = last_offset
    state.take_snapshot()


def replay_segment(
    log: LocalLog, seg: LogSegment, state: ProducerStateManager, start: int, end: int
) -> None:
    """Apply to ``state`` the batches of ``seg`` holding offsets in [start, end)."""
    found = seg.translate_offset(start) if start > seg.base_offset else None
    position = found.position if found is not None else 0
    with contextlib.suppress(KafkalogError):  # a damaged tail is recovery's business
        for batch in seg.entries(position):
            if not isinstance(batch, RecordBatch) or batch.last_offset < start:
                continue  # (magic 0 and 1 carry no producer state)
            if batch.base_offset >= end:
                break
            state.update(batch, log.limits)


class LogLoader:
    """Fills the segment set of a :class:`LocalLog` from its directory and recovers it; see
    :meth:`load`. It works on the local log and the producer state it is given, never on the
    :class:`~kafkalog.log.log.Log` facade that owns them."""

    def __init__(self, log: LocalLog, producer_state: ProducerStateManager) -> None:
        self.log = log
        self.producer_state = producer_state
        self.leader_epochs: LeaderEpochCache | None = None
        self.log_start_checkpoint = 0
        #: the active segment's end as :meth:`_drop_segments_below_log_start` found it (the
        #: same walk :meth:`load` needs next: a read-only open walked it twice)
        self._active_end: tuple[LogSegment, int] | None = None

    def load(
        self, recovery_point: int, log_start: int | None, clean: bool
    ) -> LeaderEpochCache | None:
        """Kafka's LogLoader.load (spec §7.9): complete or undo interrupted swaps, open every
        segment (recovering those whose indexes are missing or corrupt), recover from the
        recovery point after an unclean shutdown, then rebuild the producer state. The local
        log's offsets are set; the leader-epoch cache it loaded is returned."""
        self.log_start_checkpoint = log_start or 0
        sizes = None if self.log.writable else files.listed_sizes(self.log.directory)
        names = sorted(files.listdir(self.log.directory) if sizes is None else sizes)
        swapped: set[str] = set()
        if self.log.writable:
            self._refuse_unreadable(names)
            names = self._remove_temp_files(names)
        else:
            names, swapped = self._swapped_view(names, sizes)
        logs = sorted((offset_from_filename(n), n) for n in names if is_segment_log(n))
        orphans: dict[int, list[str]] = {}
        for n in names:
            stem, _, suffix = n.partition(".")
            index_file = "." + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
            if index_file and is_offset_prefix(stem) and stem + LOG_SUFFIX not in names:
                orphans.setdefault(int(stem), []).append(n)
        rebuilds: list[tuple[int, LogSegment, str]] = []
        unreadable: list[LostSegment] = []
        for k, (base, name) in enumerate(logs):
            suffix = SWAP_SUFFIX if name in swapped else ""
            try:
                seg = self.log.open_segment(
                    base,
                    exists=True,
                    listed_size=None if sizes is None else sizes[name + suffix],
                    suffix=suffix,
                )
            except (IsADirectoryError, PermissionError) as e:
                # a .log that cannot be opened (a directory by its name, no permission): its
                # offsets are as good as lost until it is readable again; a read across them
                # says so naming it (Kafka takes the whole log directory offline)
                path = os.path.join(self.log.directory, name + suffix)
                upper = logs[k + 1][0] - 1 if k + 1 < len(logs) else None
                unreadable.append(LostSegment(base, upper, path, e.strerror or type(e).__name__))
                continue
            damage = self._index_damage(seg) if self.log.writable else None
            if damage is not None:
                rebuilds.append((k, seg, damage))
            self.log.segments.add(seg)
        self.log.lost = sorted(
            lost_segments(self.log, orphans, set(names)) + unreadable, key=lambda x: x.first
        )
        self._say_orphans_at_start(orphans, set(names))
        recovering = self.log.writable and not clean and not self._marked_for_deletion()
        problems: dict[int, Problem | None] = {}
        if self.log.writable:
            if self.log.lost:
                raise self.log.lost[0].error(self.log.directory)
            self._check_partition_metadata()
            # damage that stops the open is found before anything is written (an index
            # rebuilt, a snapshot taken): a refused open leaves the files as they were
            problems = self._check_recovery(recovery_point) if recovering else {}
            for leftovers in orphans.values():
                for n in leftovers:  # an index whose segment lies behind the log start
                    os.remove(os.path.join(self.log.directory, n))
        for k, seg, damage in rebuilds:
            if damage == "time index":
                seg.rebuild_time_index()  # the offset and transaction indexes are right
                continue
            below = k + 1 < len(logs) and logs[k + 1][0] <= (log_start or 0)
            try:
                problem = self.checked_problem(seg, is_last=k == len(logs) - 1)
            except DamagedLogError:
                if not below:
                    raise
                # wholly below the log start: no record of it can be read, and Kafka opens
                # such a log; left as it is (retention deletes it)
            else:
                self.recover_segment(seg, problem)
        self._load_leader_epochs()
        if self.log.writable:
            self._ensure_partition_metadata()
        if recovering:
            self._recover(recovery_point, problems)
        if log_start is not None:
            self._drop_segments_below_log_start(log_start)
        if not self.log.segments:
            if not self.log.writable:
                start = log_start or 0
                self.log.recovery_point = self.log.log_start_offset = self.log.log_end_offset = (
                    start
                )
                return self.leader_epochs
            self.log.segments.add(self.log.open_segment(log_start or 0, exists=False))
        active = self.log.segments.active
        assert active is not None
        if self.log.writable:
            active.offset_index.get().resize(self.log.config.segment_index_bytes)
            active.time_index.get().resize(self.log.config.segment_index_bytes)
        try:
            known = self._active_end
            self.log.log_end_offset = (
                known[1]
                if known is not None and known[0] is active
                else self.log.read_next_offset(active)
            )
        except CorruptRecordError as e:
            if not self.log.writable:
                self.log.damage_at_end = (
                    e
                    if isinstance(e, DamagedLogError)
                    else DamagedLogError.found(
                        e.reason,
                        path=e.path or active.log.path,
                        position=e.position or 0,
                        partition=self.log.directory,
                    )
                )
                # damage in the last segment: the open goes on (a read through the damage
                # raises, or skips it when asked to), the end after the last valid batch
                self.log.log_end_offset = end_past_damage(active)
                self.log.log_start_offset = max(log_start or 0, self.log.segments.bases[0])
                self.log.recovery_point = self.log.log_end_offset
                return self.leader_epochs
            # marked clean, yet the last segment does not end on a whole valid batch (zeros a
            # preallocating writer left, a file appended to behind the log's back): recovered
            # as after a crash, which cuts only a torn tail and raises on anything else
            self.recover_segment(active, self.checked_problem(active, is_last=True))
            self.log.log_end_offset = self.log.read_next_offset(active)
        try:
            # a partition about to be deleted is not recovered (see _marked_for_deletion)
            torn = None if self._marked_for_deletion() else self._torn_end(active)
        except DamagedLogError as e:
            if self.log.writable:
                raise
            # as above: a read-only open goes on, a read through the damage raises it
            self.log.damage_at_end = e
            self.log.log_end_offset = end_past_damage(active)
            self.log.log_start_offset = max(log_start or 0, self.log.segments.bases[0])
            self.log.recovery_point = self.log.log_end_offset
            return self.leader_epochs
        if torn is not None:
            if self.log.writable:
                # marked clean, yet the file ends in a torn tail whose walk passed (a batch
                # cut off, an absurd size at the next offset): cut as after a crash, so an
                # append never lands after bytes no reader can step over
                self.recover_segment(active, torn)
                self.log.log_end_offset = self.log.read_next_offset(active)
            else:
                active.log.size = torn.position  # reads (a fetch too) stop before it
        first_base = self.log.segments.bases[0]
        self.log.log_start_offset = max(log_start or 0, first_base)
        self.log.recovery_point = (
            self.log.log_end_offset if clean else min(recovery_point, self.log.log_end_offset)
        )
        if self.leader_epochs is not None:
            self.leader_epochs.truncate_from_end(self.log.log_end_offset)
            self.leader_epochs.truncate_from_start(self.log.log_start_offset)
        if self.log.writable:
            state = self.producer_state
            state.remove_stray_snapshots(list(self.log.segments.bases))
            rebuild_producer_state(
                self.log, state, self.log.log_start_offset, self.log.log_end_offset
            )
        return self.leader_epochs

    def _ensure_partition_metadata(self) -> None:
        """A new partition gets a topic id in ``partition.metadata``, as a broker writes it:
        its topic's, where another partition of the topic in the same data directory has one
        (a topic has one id; Kafka refuses a partition whose id differs), else a new one."""
        from kafkalog.log.checkpoints import PartitionMetadata, new_topic_id

        path = os.path.join(self.log.directory, "partition.metadata")
        if not os.path.exists(path):
            PartitionMetadata.write(path, self._sibling_topic_id() or new_topic_id())

    def _check_partition_metadata(self) -> None:
        """A ``partition.metadata`` there but unreadable refuses the open, before anything is
        written: Kafka does not load such a partition, and a writer that went on would serve
        the topic under a new id each start (clients keyed by topic id see it recreated)."""
        from kafkalog.log.checkpoints import PartitionMetadata

        path = os.path.join(self.log.directory, "partition.metadata")
        if not os.path.exists(path):
            return
        try:
            PartitionMetadata.read(path)
        except KafkalogError as e:
            raise DamagedLogError(
                f"{getattr(e, 'reason', None) or e}: the partition's topic id cannot be read "
                "(Kafka does not load such a partition); restore the file from a backup, or "
                "remove it and a writable open writes the topic's id again (a sibling "
                "partition's, else a new one)",
                path=getattr(e, "path", None) or path,
                position=getattr(e, "position", None) or 0,
            ) from e

    def _sibling_topic_id(self) -> str | None:
        """The topic id another partition directory of this topic beside this one holds."""
        from kafkalog.log.checkpoints import PartitionMetadata
        from kafkalog.log.layout import parse_partition_dir

        directory = os.path.abspath(self.log.directory)
        parent = os.path.dirname(directory)
        try:
            topic, _ = parse_partition_dir(os.path.basename(directory))
            names = sorted(os.listdir(parent))
        except (ValueError, OSError):
            return None
        for name in names:
            if name == os.path.basename(directory) or name.endswith(_NOT_LIVE):
                continue  # a deleted topic's directory holds the old topic's id
            try:
                if parse_partition_dir(name)[0] != topic:
                    continue
                return PartitionMetadata.read(
                    os.path.join(parent, name, "partition.metadata")
                ).topic_id
            except (ValueError, OSError, KafkalogError):
                continue
        return None

    @staticmethod
    def _index_damage(seg: LogSegment) -> str | None:
        """What of a segment's indexes must be rebuilt: None, ``"time index"`` (only the
        ``.timeindex`` is missing) or ``"all"`` (an index missing, or one whose length is not
        whole entries, or a ``.txnindex`` failing Kafka's sanity check). A ``stat`` each, so
        opening a large log stays cheap."""
        missing_time = False
        for path, entry_size in ((seg.offset_index.path, 8), (seg.time_index.path, 12)):
            try:
                if os.path.getsize(path) % entry_size:
                    return "all"
            except FileNotFoundError:
                if entry_size == 8:
                    return "all"  # Kafka's sanityCheck: NoSuchFileException, recoverSegment
                missing_time = True  # (Kafka starts it empty; a rebuilt one finds times)
        # Kafka's LogSegment.sanityCheck also checks the transaction index, and the loader
        # rebuilds a segment whose .txnindex fails it (CorruptIndexException)
        try:
            if os.path.getsize(seg.txn_index.path):
                seg.txn_index.sanity_check()
        except FileNotFoundError:
            pass
        except CorruptIndexError:
            return "all"
        return "time index" if missing_time else None

    def _marked_for_deletion(self) -> bool:
        """A ``<topic>-<partition>.<id>-delete`` directory: Kafka's LogLoader skips recovering
        it (it is about to go), so nothing in it is cut or rebuilt."""
        return os.path.basename(os.path.normpath(self.log.directory)).endswith("-delete")

    def _drop_segments_below_log_start(self, log_start: int) -> None:
        """Kafka's ``deleteSegmentsIfLogStartGreaterThanLogEnd``: when the log ends before the
        checkpointed log start offset (segment files deleted behind the broker's back), every
        segment goes and the leader-epoch cache is cleared; the caller then starts an empty
        segment at the log start offset. Read-only, the segments are only left out of view."""
        active = self.log.segments.active
        if active is None:
            return
        try:
            end = self.log.read_next_offset(active)
            self._active_end = (active, end)  # load() takes it rather than walking again
        except CorruptRecordError:
            # a torn tail (cut below, after a copy) or damage (refused below; a read-only open
            # goes on past it): the end before it decides, not an error here, or a zero tail
            # under a clean-shutdown marker would take a data directory's partition offline
            end = end_past_damage(active)
        if end >= log_start:
            return
        for seg in list(self.log.segments):
            if self.log.writable:
                self.log.delete_segment(seg)
            else:
                seg.close_handlers()
        self.log.segments.clear()
        if self.leader_epochs is not None:
            self.leader_epochs.clear()
            if self.log.writable:
                self.leader_epochs.write(
                    os.path.join(self.log.directory, "leader-epoch-checkpoint")
                )

    def _say_orphans_at_start(self, orphans: dict[int, list[str]], names: set[str]) -> None:
        """Index files left below the first segment without their ``.log`` (nor a
        ``.deleted`` one): what a crash between the files of a retention's deletion leaves, or
        the first segments lost; the log starts at its first segment either way (Kafka's
        loader warns of each orphaned index file and deletes it, as a writable open here
        does), and a reader says so rather than start later in silence."""
        first = self.log.segments.first
        for base in sorted(orphans):
            stem = orphans[base][0].partition(".")[0]
            if first is not None and base >= first.base_offset:
                break
            if any(stem + ".log" + s in names for s in (".deleted", ".cleaned", ".swap")):
                continue
            logger.warning(
                "kafkalog: %s: %s left without its .log below the first segment (%s): its "
                "records were deleted by retention (a crash between its files) or lost; the "
                "log starts at %s",
                self.log.directory,
                ", ".join(orphans[base]),
                "none" if first is None else segment_file("", first.base_offset, ".log"),
                "its end" if first is None else first.base_offset,
            )

    def _refuse_unreadable(self, names: list[str]) -> None:
        """A writable open reads, rewrites or removes every file of the partition Kafka's
        loader knows: one it cannot (a directory by its name, no read permission) is refused
        before anything is written, naming it (an OSError halfway through recovery would leave
        some segments recovered, and name no byte). One directory scan (its entries' types
        need no ``stat``); read permission is asked only where it can be refused (not root)."""
        known = set(names)
        check_access = hasattr(os, "geteuid") and os.geteuid() != 0
        with os.scandir(self.log.directory) as entries:
            for entry in entries:
                n = entry.name
                if n not in known:
                    continue
                stem, _, suffix = n.partition(".")
                if not (
                    is_offset_prefix(stem)
                    and suffix in ("log", "index", "timeindex", "txnindex", "snapshot")
                ) and n not in ("leader-epoch-checkpoint", "partition.metadata"):
                    continue
                try:
                    regular = entry.is_file()
                except OSError:
                    continue  # gone meanwhile
                why = "not a regular file" if not regular else None
                if regular and check_access and not os.access(entry.path, os.R_OK):
                    why = "no read permission"
                if why is not None:
                    raise unreadable_file(entry.path, why, then="; nothing was changed")

    def _swap_plan(
        self, names: list[str], sizes: dict[str, int] | None
    ) -> tuple[list[str], set[str]]:
        """Kafka's loader passes 1 and 2 without touching anything: the ``.swap`` files that
        complete an operation (those at or above the lowest ``.cleaned`` offset belong to an
        unfinished split, KAFKA-6264) and the other files they replace, which are all files
        whose name starts with an offset in [lowest swap base, highest swap end): a cleaner
        run merges several segments into one ``.swap``, so the old ones must go, not only
        the one of the same name."""
        cleaned = [offset_from_filename(n) for n in names if n.endswith(CLEANED_SUFFIX)]
        min_cleaned = min(cleaned, default=None)
        swaps = [
            n
            for n in names
            if n.endswith(SWAP_SUFFIX)
            and (min_cleaned is None or offset_from_filename(n) < min_cleaned)
        ]
        low: int | None = None
        high: int | None = None
        for n in swaps:
            if not is_segment_log(n[: -len(SWAP_SUFFIX)]):
                continue
            base = offset_from_filename(n)
            seg = LogSegment(
                self.log.directory,
                base,
                self.log.config,
                writable=False,  # only read: no index file is created for the swap
                suffix=SWAP_SUFFIX,
                clock=self.log.clock,
                limits=self.log.limits,
                listed_size=None if sizes is None else sizes[n],
            )
            try:
                damage = swap_damage(seg)
                if damage is not None:
                    raise damage
                end = seg.read_next_offset()
            finally:
                seg.close_handlers()
            low = base if low is None else min(low, base)
            high = end if high is None else max(high, end)
        replaced: set[str] = set()
        if low is not None and high is not None:
            for n in names:
                prefix, dot, _ = n.partition(".")
                swap = n.endswith(SWAP_SUFFIX)
                if dot and is_offset_prefix(prefix) and not swap and low <= int(prefix) < high:
                    replaced.add(n)
        return swaps, replaced

    def _swapped_view(
        self, names: list[str], sizes: dict[str, int] | None
    ) -> tuple[list[str], set[str]]:
        """Read-only: the file names as Kafka's loader will leave them after completing an
        interrupted swap, and which of them are still on disk with a ``.swap`` suffix."""
        swaps, replaced = self._swap_plan(names, sizes)
        targets = {n[: -len(SWAP_SUFFIX)] for n in swaps}
        kept = {n for n in names if n not in replaced and not n.endswith(SWAP_SUFFIX)}
        old_logs = sorted(n for n in replaced if is_segment_log(n))
        if old_logs:
            # never silent: the records of the segments replaced that the swap does not hold
            # (a cleaner's: superseded keys; a stray file's: any) are read by no one
            logger.warning(
                "kafkalog: %s: read %s in place of %s: a log cleaner's output a crash left "
                "unswapped, which Kafka's loader completes at its next start; a record of "
                "those segments that it does not hold is not read (`kafkalog verify` lists it)",
                self.log.directory,
                ", ".join(sorted(swaps)),
                ", ".join(old_logs),
            )
        return sorted(kept | targets), targets

    def _remove_temp_files(self, names: list[str]) -> list[str]:
        """Kafka's loader passes 1-3: delete ``.deleted`` and ``.cleaned`` files and the
        ``.swap`` files of an unfinished split, delete the files a finished swap replaces,
        then rename the swap files into place. Returns the names left."""
        swaps, replaced = self._swap_plan(names, None)
        for n in names:
            drop = n.endswith((DELETED_SUFFIX, CLEANED_SUFFIX)) or (
                n.endswith(SWAP_SUFFIX) and n not in swaps
            )
            if (
                (drop and not n.endswith(_KRAFT_SNAPSHOT_DELETED)) or n.endswith(_SNAPSHOT_TMP)
            ) or n in replaced:
                os.remove(os.path.join(self.log.directory, n))
        for n in swaps:
            os.replace(
                os.path.join(self.log.directory, n),
                os.path.join(self.log.directory, n[: -len(SWAP_SUFFIX)]),
            )
        left = sorted(files.listdir(self.log.directory))
        # a deletion finished: a segment renamed ``.deleted`` file by file (its ``.log``
        # first) whose index files a crash left unrenamed is deleted whole, as Kafka's loader
        # deletes stray index files; kept, they would read as a lost segment (its ``.log``
        # gone) and refuse the partition. Only where the ``.log.deleted`` was seen and no
        # ``.log`` of that base is left (a swap of the same base put one back)
        deleted = {n.partition(".")[0] for n in names if n.endswith(LOG_SUFFIX + DELETED_SUFFIX)}
        stray = [
            n
            for n in left
            if n.partition(".")[0] in deleted
            and n.partition(".")[0] + LOG_SUFFIX not in left
            and "." + n.partition(".")[2] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        ]
        for n in stray:
            logger.warning(
                "kafkalog: %s: %s deleted: an index file of a segment whose deletion a crash "
                "interrupted (its .log was already renamed .deleted)",
                self.log.directory,
                n,
            )
            os.remove(os.path.join(self.log.directory, n))
        return [n for n in left if n not in stray]

    def _recovered_segments(self, recovery_point: int) -> list[tuple[LogSegment, int | None]]:
        # a segment wholly below the log start holds no record a reader can get: its damage
        # costs nothing, and Kafka opens such a log (only what is at or above it is checked)
        return [
            (seg, following)
            for seg, following in self.log.segments.from_floor(recovery_point)
            if following is None or following > self.log_start_checkpoint
        ]

    def _check_recovery(self, recovery_point: int) -> dict[int, Problem | None]:
        """Every segment recovery will read, checked: a torn tail found, damage raised."""
        return {
            seg.base_offset: self.checked_problem(seg, is_last=following is None)
            for seg, following in self._recovered_segments(recovery_point)
        }

    def _recover(self, recovery_point: int, problems: dict[int, Problem | None]) -> None:
        """Kafka's recoverLog: recover every segment from the one holding the recovery point;
        a truncated segment makes every later one go (spec §7.9). ``problems``: what
        :meth:`_check_recovery` found, before anything was changed (damage anywhere stops
        the open with the files as they were; Kafka's recoverLog would empty a segment whose
        recovery fails, cut at the first invalid batch and delete every later segment; here
        only a torn tail is cut)."""
        log = self.log
        for seg, _ in self._recovered_segments(recovery_point):
            problem = problems.get(seg.base_offset)
            if seg.base_offset not in problems:
                problem = self.checked_problem(seg, is_last=seg is log.segments.active)
            truncated = self.recover_segment(seg, problem)
            if truncated > 0:
                for later in log.segments.higher(seg.base_offset):
                    log.delete_segment(later)
                break

    def _torn_end(self, active: LogSegment) -> Problem | None:
        """The torn tail the last segment ends in, found by a walk with every CRC checked from
        the index entry of its last offset (damage there raises), or None."""
        end = self.log.log_end_offset
        start = active.scan_start(max(active.base_offset, end - 1))
        if start > active.size:
            return None
        # from the last whole batch on: a clean close vouches for the batches before it, as
        # Kafka's clean open checks none of them (damage there is a read's to find, and must
        # not take the partition offline: serve's __consumer_offsets reads around it)
        for entry in active._walk(start):
            start = entry.position
        problem = first_problem(active, start, None if start else active.base_offset)
        if problem is None:
            return None
        check_tail(active, problem, is_last=True, directory=self.log.directory)
        return problem

    def checked_problem(self, seg: LogSegment, *, is_last: bool) -> Problem | None:
        """Where ``seg`` stops being whole, valid batches (None: nowhere), once it is known to
        be a torn tail; damage raises :class:`~kafkalog.errors.DamagedLogError` here, before
        recovery changes anything."""
        problem = first_problem(seg)
        if problem is not None:
            check_tail(seg, problem, is_last=is_last, directory=self.log.directory)
        return problem

    def recover_segment(self, seg: LogSegment, torn_tail: Problem | None) -> int:
        """Kafka's LogLoader.recoverSegment: a throw-away producer state rebuilt up to the
        segment's base offset (so a transaction begun in an earlier segment and aborted in
        this one gets its true first offset and LSO in ``.txnindex``), the segment recovered
        with it, and a snapshot at its end so the next segment need not replay this one.

        Recovery cuts the ``.log`` at its first invalid batch; it is only given a segment whose
        problem :meth:`checked_problem` found to be a torn tail (``torn_tail``), and says what
        it cuts in a WARNING."""
        log = self.log
        if torn_tail is not None:
            log_cut(torn_tail, seg)
        state = ProducerStateManager(log.directory, writable=log.writable)
        rebuild_producer_state(log, state, self.log_start_checkpoint, seg.base_offset)
        truncated = seg.recover(self.leader_epochs, state)
        state.take_snapshot()
        return truncated

    def _load_leader_epochs(self) -> None:
        from kafkalog.log.checkpoints import LeaderEpochCache

        path = os.path.join(self.log.directory, "leader-epoch-checkpoint")
        try:
            self.leader_epochs = LeaderEpochCache.from_file(path)
        except (IsADirectoryError, PermissionError) as e:
            if self.log.writable:  # it could not be written again either
                raise unreadable_file(
                    path, e.strerror, then=" (a writable open then rebuilds it from the batches)"
                ) from e
            self.leader_epochs = LeaderEpochCache()  # as for one that cannot be parsed
        except KafkalogError as e:
            self.leader_epochs = LeaderEpochCache()
            if self.log.writable:
                # Kafka fails the log's load; a writer here rebuilds the cache from every
                # batch's partition leader epoch (the checkpoint written next holds them all:
                # an empty cache would answer OffsetsForLeaderEpoch as if the log had none)
                rebuilt = self._epochs_from_batches(self.leader_epochs)
                logger.warning(
                    "%s: cannot read the leader-epoch checkpoint (%s); %s",
                    path,
                    e,
                    "rebuilt it from the batches' partition leader epochs"
                    if rebuilt
                    else "rebuilt it from the batches up to damage in the log",
                )

    def _epochs_from_batches(self, cache: LeaderEpochCache) -> bool:
        """Every epoch's first offset, from the v2 batches' headers (a batch's partition
        leader epoch, as Kafka's recovery assigns it); False when damage stopped the walk."""
        for seg in self.log.segments:
            try:
                for batch in seg.entries(0):
                    epoch = batch.partition_leader_epoch if isinstance(batch, RecordBatch) else -1
                    if epoch >= 0 and (cache.latest_epoch is None or epoch > cache.latest_epoch):
                        cache.assign(epoch, batch.base_offset)
            except KafkalogError:
                return False  # the damage is the log's own error to report
        return True


def lost_segments(
    log: LocalLog, orphans: dict[int, list[str]], names: set[str]
) -> list[LostSegment]:
    """The segments lost from ``log`` (see :class:`LostSegment`), from the index files left
    without their ``.log`` (``orphans``: base offset -> names), given every name in the
    directory. An orphan beside a ``.deleted``, ``.cleaned`` or ``.swap`` file of its
    ``.log`` is a deletion or swap under way (the loader finishes it), not a loss."""
    out: list[LostSegment] = []
    bases = log.segments.bases
    for base in sorted(orphans):
        stem = orphans[base][0].partition(".")[0]
        if any(stem + ".log" + s in names for s in (".deleted", ".cleaned", ".swap")):
            continue
        floor = log.segments.floor(base)
        if floor is None:
            continue  # before the first segment: deleted from the front (retention)
        try:
            end = floor.read_next_offset()
        except KafkalogError:
            continue  # a damaged segment: its own error says so
        if end > base:
            continue  # a segment covers the offsets (a cleaned one, say)
        later = [b for b in bases if b > base]
        out.append(
            LostSegment(
                base,
                later[0] - 1 if later else None,
                os.path.join(log.directory, orphans[base][0]),
            )
        )
    return out


def swap_damage(seg: LogSegment) -> DamagedLogError | None:
    """The damage of a ``.swap`` segment (opened with ``suffix=SWAP_SUFFIX``), or None.

    A ``.swap`` is a cleaner's (or split's) output, flushed whole before it was named so: one
    that is not whole, valid batches is damage, and completing it would put it in place of
    readable segments (Kafka's loader would). A writable open refuses it; ``verify`` names it."""
    problem = first_problem(seg)
    if problem is None:
        return None
    return DamagedLogError(
        f"{problem.describe()}: a .swap file (a log cleaner's finished output, which a writable "
        "open puts in place of the segments it covers) that is not whole, valid batches; the "
        "swap is not completed and nothing is changed: move it out of the partition directory "
        "(`kafkalog repair DIR` moves it to a quarantine folder; the segments it would replace "
        "stay as they are)",
        path=problem.path,
        position=problem.position,
    )


def swap_file_damage(
    directory: str, name: str, limits: Limits = DEFAULT_LIMITS
) -> DamagedLogError | None:
    """:func:`swap_damage` of the ``.log.swap`` file ``name`` in ``directory``, read only and
    closed again: what ``verify`` reports and ``repair`` moves aside."""
    seg = LogSegment(
        directory,
        offset_from_filename(name),
        TopicConfig(),
        writable=False,
        suffix=SWAP_SUFFIX,
        limits=limits,
    )
    try:
        return swap_damage(seg)
    finally:
        seg.close_handlers()
