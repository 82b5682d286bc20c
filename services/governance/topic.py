"""Reading the governance topic: the quota requests with their decisions, and the findings.

Called by ``quota_rules`` and ``api_reads`` (governance's side of the API's ports: what ``fedsched gov
quota ...``, ``gov findings`` and ``gov report`` ask the API) and by ``report``. Calls the log's reader
and the wire codec; folds with the pure ``GovState``. A record that is not a catalogue event is skipped.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from events.catalog.errors import EventError
from events.catalog.governance import GovernanceFinding
from events.catalog.topics import GOVERNANCE
from events.log.contract import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode
from events.wire.envelope import Envelope
from services.governance.core.figures import FindingRow
from services.governance.core.state import GovState


def _partition(namespace: str) -> TopicPartition:
    return TopicPartition((f"{namespace}." if namespace else "") + GOVERNANCE.name, 0)


async def envelopes(
    event_log: EventLog, *, start: int = 0, namespace: str = ""
) -> AsyncGenerator[tuple[int, Envelope], None]:
    """Each event of the governance topic from offset ``start`` to its end now, with its offset."""
    reader = await event_log.reader()
    try:
        async for batch in read_to_end(reader, _partition(namespace), start):
            for record in batch:
                try:
                    yield record.offset, decode(record.headers, record.value)
                except EventError:
                    continue
    finally:
        await reader.close()


async def governance_state(event_log: EventLog, *, namespace: str = "") -> GovState:
    """The quota requests and their decisions, read from the governance topic up to its end now."""
    state = GovState()
    async for _, envelope in envelopes(event_log, namespace=namespace):
        state.fold(envelope)
    return state


async def findings(
    event_log: EventLog, *, start: int = 0, namespace: str = ""
) -> AsyncGenerator[tuple[int, FindingRow], None]:
    """Each finding from offset ``start`` on, with its offset, as the report and ``gov findings`` show it."""
    async for offset, envelope in envelopes(event_log, start=start, namespace=namespace):
        f = envelope.data
        if isinstance(f, GovernanceFinding):
            subject = f.job_id or (f"{f.cluster}/{f.node}" if f.node else f.cluster) or f.finding_id
            yield offset, FindingRow(envelope.time_ms, f.kind.value, f.rule, f.tenant, str(subject), f.message)
