"""Reading a partition up to its current end, the way every catch-up (audit, replay, rebuild) does.

Called by the audit archiver, projection rebuilds, benchmarks and tests. Works on any ``LogReader``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from events.log.contract import LogReader, LogRecord, TopicPartition


async def read_to_end(
    reader: LogReader, tp: TopicPartition, offset: int = 0, *, max_records: int = 2000
) -> AsyncIterator[list[LogRecord]]:
    """Batches of committed records from ``offset`` up to the partition's end as of the call."""
    end = await reader.end_offset(tp)
    while offset < end:
        batch = await reader.read(tp, offset, max_records=max_records, timeout_s=0.05)
        if batch:
            offset = batch[-1].offset + 1
            yield batch
        elif await reader.caught_up(tp, offset):
            return
