"""Reading a partition up to its current end, the way every catch-up (audit, replay, rebuild) does.

Called by the audit archiver, projection rebuilds, benchmarks and tests. Works on any ``LogReader``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from events.log.contract import LogReader, LogRecord, TopicPartition


async def read_to_end(
    reader: LogReader, tp: TopicPartition, offset: int = 0, *, max_records: int = 2000, end: int | None = None
) -> AsyncIterator[list[LogRecord]]:
    """Batches of committed records from ``offset`` up to the partition's end as of the call (or
    ``end``, when the caller has just read it)."""
    if end is None:
        end = await reader.end_offset(tp)
    while offset < end:
        batch = await reader.read(tp, offset, max_records=max_records, timeout_s=0.05)
        if batch:
            offset = batch[-1].offset + 1
            yield batch
        elif await reader.caught_up(tp, offset):
            return


@dataclass
class EndWatch:
    """Which partitions have something past a position, for a service that follows many partitions by
    reading each to its end in turn (the archiver, governance): their ends in one round trip, instead of
    one per partition on every pass. On Kafka a partition may end on transaction markers, which no read
    returns: once a read to the end stopped short of it, the partition is not read again until its end
    or the position moves."""

    _markers: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)

    async def ahead(self, reader: LogReader, positions: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """The partitions with (perhaps) records at or past their position, and their ends now."""
        ends = await reader.end_offsets(list(positions))
        return {
            tp: end for tp, end in ends.items() if positions[tp] < end and self._markers.get(tp) != (positions[tp], end)
        }

    def reached(self, tp: TopicPartition, position: int, end: int) -> None:
        """A read to ``end`` stopped at ``position``: short of the end, only markers were left."""
        if position < end:
            self._markers[tp] = (position, end)
        else:
            self._markers.pop(tp, None)
