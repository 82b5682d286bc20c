"""Dead letters: a record that could not be read, kept whole with the reason, so nothing is lost.

Called by ``events.hosting.consumer`` when decoding fails. Pure. The dead-letter record keeps the original
value and headers byte for byte (so it can be replayed after a fix) and adds ``fedsched_dlq_*``
headers: the reason (naming the field), its code, the source position and the consumer group.
"""

from __future__ import annotations

from events.catalog.errors import EventError
from events.catalog.topics import DEAD_LETTERS
from events.log.contract import LogRecord, OutRecord

REASON = "fedsched_dlq_reason"
CODE = "fedsched_dlq_code"
SOURCE = "fedsched_dlq_source"
GROUP = "fedsched_dlq_group"


def dead_letter(record: LogRecord, error: EventError, group_id: str) -> OutRecord:
    source = f"{record.topic}/{record.partition}/{record.offset}"
    added = (
        (REASON, str(error).encode()),
        (CODE, error.reason_code.encode()),
        (SOURCE, source.encode()),
        (GROUP, group_id.encode()),
    )
    return OutRecord(
        DEAD_LETTERS.name,
        value=record.value,
        key=source.encode(),
        headers=tuple(record.headers) + added,
    )
