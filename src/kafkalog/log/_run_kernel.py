"""The compiled walk behind :meth:`LogSegment.append_run`: how many of a run of batches the
active segment takes without a roll, and the index entries they get.

An embedded log's buffered appends reach the segment as thousands of one-record batches at
once. Appended one call at a time, each would pass :meth:`LogSegment.try_append`'s checks and
get an index entry every ``index.interval.bytes``; doing that per batch in Python costs more than
encoding the record. This loop makes the same checks and the same entries, batch by batch, and
stops at the first batch that would need anything else (a roll, a full index), which the caller
then appends the usual way: the files are the ones per-call appends write.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_INT32_MAX = np.int64(2**31 - 1)

# what plan_run leaves in ``state``: batches taken, offset and time entries made, and the
# segment's bytes since its last entry, running max timestamp and its offset, and size after them
TAKEN, OFFSET_ENTRIES, TIME_ENTRIES, BYTES_SINCE_ENTRY, MAX_TS, MAX_TS_OFFSET, POSITION = range(7)
STATE_FIELDS = 7


# fmt: off
@njit(cache=True, nogil=True)
def plan_run(  # type: ignore[no-untyped-def]
    sizes, last_offsets, max_timestamps, first, count, max_batch,
    position, segment_bytes, based, roll_after_ms, base_offset, bytes_since_entry, interval,
    max_ts, max_ts_offset, o_entries, o_room, o_last_offset, t_entries, t_room, t_last_ts,
    t_last_offset, out_o_rel, out_o_pos, out_t_ts, out_t_rel, state,
):
    """Walk batches ``first``..``first+count-1`` as ``try_append`` would take them one by one.

    ``o_room``/``t_room`` are the entry counts at which try_append gives up (the offset index
    full; the time index one short of full); ``roll_after_ms`` is segment.ms less the jitter.
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
            or o_entries >= o_room
            or t_entries >= t_room
            or rel < 0
            or rel > _INT32_MAX
        ):
            break
        if mts > max_ts:
            run_ts = mts
            run_offset = last
        else:
            run_ts = max_ts
            run_offset = max_ts_offset
        if bytes_since_entry > interval:
            if (
                (o_entries > 0 and last <= o_last_offset)
                or position > _INT32_MAX
                or (t_entries > 0 and (run_offset < t_last_offset or run_ts < t_last_ts))
                or run_offset - base_offset < 0
                or run_offset - base_offset > _INT32_MAX
            ):
                break
            out_o_rel[no] = rel
            out_o_pos[no] = position
            no += 1
            o_entries += 1
            o_last_offset = last
            if run_ts > t_last_ts:
                out_t_ts[nt] = run_ts
                out_t_rel[nt] = run_offset - base_offset
                nt += 1
                t_entries += 1
                t_last_ts = run_ts
                t_last_offset = run_offset
            bytes_since_entry = size
        else:
            bytes_since_entry += size
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
