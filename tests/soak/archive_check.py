"""The audit archive equals the log, record for record, but for the caller's credential.

Called by the soak's run once the archiver has stopped. Reads every catalogue partition from the log
(read committed, offset 0 to its end) beside the archive's rows of that partition in chain order
(``events.audit.archive.iter_archive``), one page of each at a time, and compares offset, key, value,
headers and timestamp. The ``ce_authorization`` header is left out of the comparison on both sides:
the archive redacts it (issue 19, credentials at rest), so it may be absent, or present with another
value, there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import asyncpg

from events.audit.archive import iter_archive
from events.audit.chain import ArchivedRecord
from events.catalog.topics import TOPICS
from events.log import EventLog, LogRecord, TopicPartition
from events.log.headers import unpack_headers
from events.log.reading import read_to_end
from services.api.intake import AUTH_HEADER

_EXAMPLES = 5


@dataclass
class ArchiveComparison:
    records: int = 0
    archived: int = 0
    problems: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, problem: str) -> None:
        self.count += 1
        if len(self.problems) < 4 * _EXAMPLES:
            self.problems.append(problem)


async def compare(log: EventLog, pool: asyncpg.Pool) -> ArchiveComparison:
    result = ArchiveComparison()
    reader = await log.reader()
    try:
        for spec in TOPICS:
            for partition in range(spec.partitions):
                tp = TopicPartition(spec.name, partition)
                await _partition(result, _records(read_to_end(reader, tp)), iter_archive(pool, tp))
    finally:
        await reader.close()
    return result


async def _records(batches: AsyncIterator[list[LogRecord]]) -> AsyncIterator[LogRecord]:
    async for batch in batches:
        for record in batch:
            yield record


async def _partition(
    result: ArchiveComparison, logged: AsyncIterator[LogRecord], archived: AsyncIterator[ArchivedRecord]
) -> None:
    record = await anext(logged, None)
    copy = await anext(archived, None)
    while record is not None or copy is not None:
        if copy is None or (record is not None and record.offset < copy.offset):
            assert record is not None
            result.records += 1
            result.add(f"{record.topic}[{record.partition}]@{record.offset}: in the log, not in the archive")
            record = await anext(logged, None)
        elif record is None or copy.offset < record.offset:
            result.archived += 1
            result.add(f"{copy.topic}[{copy.partition}]@{copy.offset} (seq {copy.seq}): in the archive, not in the log")
            copy = await anext(archived, None)
        else:
            result.records += 1
            result.archived += 1
            differs = _differences(record, copy)
            if differs:
                result.add(
                    f"{record.topic}[{record.partition}]@{record.offset} (seq {copy.seq}): {', '.join(differs)} differ"
                )
            record, copy = await anext(logged, None), await anext(archived, None)


def _differences(record: LogRecord, copy: ArchivedRecord) -> list[str]:
    out = []
    if record.key != copy.key:
        out.append("key")
    if record.value != copy.value:
        out.append("value")
    if _without_credential(record.headers) != _without_credential(unpack_headers(copy.headers)):
        out.append("headers")
    if record.timestamp_ms != copy.timestamp_ms:
        out.append("timestamp")
    return out


def _without_credential(headers: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
    return tuple((name, value) for name, value in headers if name != AUTH_HEADER)
