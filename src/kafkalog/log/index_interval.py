"""Kafka's ``index.interval.bytes`` rule, written once for every path that appends to a segment.

A segment adds an ``.index`` entry (and a ``.timeindex`` entry, when the largest timestamp is
new) once more than ``index.interval.bytes`` have been written since its last one. Every path
that writes batches asks :func:`entry_due`: ``LogSegment.append`` (the general path),
``LogSegment.try_append`` (the per-call fast path), ``LogSegment.recover`` and
``rebuild_time_index`` (one batch at a time), and :func:`plan_run`, the walk of a run of buffered
batches that ``LogSegment.append_run`` runs compiled (``_run_kernel``, numba, which compiles
:func:`entry_due` into it). The index classes own the entries themselves (their checks, bytes,
counts and last entry); this module only decides which appends get one.

Plain Python, importing nothing, so that importing the segment does not load numba; the walk
lives here, next to the rule, because numba keys its on-disk cache of a compiled function on the
file that defines it: a change to the rule recompiles the walk.
"""

from __future__ import annotations

_INT32_MAX = 2**31 - 1


def entry_due(bytes_since_last_entry: int, size: int, interval: int) -> tuple[bool, int]:
    """Whether an append of ``size`` bytes gets index entries, and the bytes written since the
    last entry once it is in.

    Kafka's LogSegment.append: the append gets entries (its last offset at its first byte's
    position) when *more than* ``interval`` bytes went in since the last entry (so with 0,
    every append after the segment's first); the count then starts again from this append.
    """
    if bytes_since_last_entry > interval:
        return True, size
    return False, bytes_since_last_entry + size


# what plan_run leaves in ``state``: batches taken, offset and time entries made, and the
# segment's bytes since its last entry, running max timestamp and its offset, and size after them
TAKEN, OFFSET_ENTRIES, TIME_ENTRIES, BYTES_SINCE_ENTRY, MAX_TS, MAX_TS_OFFSET, POSITION = range(7)
STATE_FIELDS = 7


# fmt: off
def plan_run(  # type: ignore[no-untyped-def]
    sizes, last_offsets, max_timestamps, first, count, max_batch,
    position, segment_bytes, based, roll_after_ms, base_offset, bytes_since_entry, interval,
    max_ts, max_ts_offset, o_entries, o_room, o_last_offset, t_entries, t_room, t_last_ts,
    t_last_offset, out_o_offset, out_o_pos, out_t_ts, out_t_offset, state,
):
    """Walk batches ``first``..``first+count-1`` as ``LogSegment.try_append`` would take them
    one by one, and stop at the first it would not take (a roll due, an index full, an entry
    the index would refuse), which the caller appends the usual way.

    ``o_entries``/``t_entries`` and ``o_room``/``t_room`` are the indexes' ``entries`` and
    ``room()``; ``o_last_offset`` and ``t_last_ts``/``t_last_offset`` their last entries. The
    entries made (absolute offsets) go to the ``out_`` arrays, for the indexes'
    ``append_entries``/``maybe_append_entries``, which check them again; the tests in this walk
    are try_append's (the indexes' ``has_room``, and ``accepts`` for an entry), so that the run
    stops where one append at a time would have gone the general way. ``roll_after_ms`` is
    segment.ms less the segment's jitter. Compiled by ``_run_kernel``.
    """
    no = 0
    nt = 0
    b = first
    end = first + count
    while b < end:
        size = sizes[b]
        last = last_offsets[b]
        mts = max_timestamps[b]
        rel = last - base_offset
        if (
            size > max_batch
            or position + size > segment_bytes
            or mts - based > roll_after_ms
            or no >= o_room  # OffsetIndex.has_room_for(last)
            or rel < 0
            or rel > _INT32_MAX
            or nt >= t_room  # TimeIndex.has_room()
        ):
            break
        if mts > max_ts:
            run_ts = mts
            run_offset = last
        else:
            run_ts = max_ts
            run_offset = max_ts_offset
        due, since = entry_due(bytes_since_entry, size, interval)
        if due:
            if (
                # OffsetIndex.accepts(last, position)
                (o_entries > 0 and last <= o_last_offset)
                or position > _INT32_MAX
                # TimeIndex.accepts(run_ts, run_offset)
                or (t_entries > 0 and (run_offset < t_last_offset or run_ts < t_last_ts))
                or (
                    run_ts > t_last_ts
                    and (run_offset - base_offset < 0 or run_offset - base_offset > _INT32_MAX)
                )
            ):
                break
            out_o_offset[no] = last
            out_o_pos[no] = position
            no += 1
            o_entries += 1
            o_last_offset = last
            if run_ts > t_last_ts:
                out_t_ts[nt] = run_ts
                out_t_offset[nt] = run_offset
                nt += 1
                t_entries += 1
                t_last_ts = run_ts
                t_last_offset = run_offset
        bytes_since_entry = since
        max_ts = run_ts
        max_ts_offset = run_offset
        position += size
        b += 1
    state[TAKEN] = b - first
    state[OFFSET_ENTRIES] = no
    state[TIME_ENTRIES] = nt
    state[BYTES_SINCE_ENTRY] = bytes_since_entry
    state[MAX_TS] = max_ts
    state[MAX_TS_OFFSET] = max_ts_offset
    state[POSITION] = position
# fmt: on
