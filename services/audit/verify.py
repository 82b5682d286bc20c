"""``fedsched audit verify``: re-execute every recorded scheduling cycle from the log and compare.

Called by the audit CLI and the demo. Calls the log ports; the work is pure (``SchedulerState`` and the
policy core).

For each ``SchedulingCycleCompleted``, in sequence order: fold every input record below the cycle's
recorded offsets (the fold does not depend on how partitions interleave), rebuild the snapshot at the
cycle's logical time, run the policy then in force, derive the decision events exactly as the
scheduler does, and compare their digest with the recorded one. A difference is reported with the
decision ids that differ, what was recorded and what the replay gives.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from events.catalog.decisions import SchedulingCycleCompleted
from events.codec import decode, encode
from events.envelope import Envelope
from events.errors import EventError
from events.log.contract import EventLog, TopicPartition
from events.log.reading import read_to_end
from services.scheduler.host import INPUT_TOPICS
from services.scheduler.outputs import SOURCE, decision_events, digest
from services.scheduler.policy import CycleMemo, schedule
from services.scheduler.state import SchedulerState


@dataclass
class Difference:
    cycle_id: str
    decision_id: str
    recorded: str | None
    replayed: str | None


@dataclass
class VerifyReport:
    cycles: int = 0
    decisions: int = 0
    identical_cycles: int = 0
    events_read: int = 0
    seconds: float = 0.0
    differences: list[Difference] = field(default_factory=list)

    @property
    def identical_pct(self) -> float:
        return 100.0 if self.cycles == 0 else 100.0 * self.identical_cycles / self.cycles

    def to_json(self) -> dict[str, object]:
        return {
            "cycles": self.cycles,
            "decisions": self.decisions,
            "identical_pct": round(self.identical_pct, 4),
            "events_read": self.events_read,
            "events_per_s": round(self.events_read / self.seconds) if self.seconds else None,
            "differences": [d.__dict__ for d in self.differences[:1000]],
        }


async def load(event_log: EventLog, topics: tuple[str, ...]) -> dict[TopicPartition, list[tuple[int, Envelope]]]:
    reader = await event_log.reader()
    out: dict[TopicPartition, list[tuple[int, Envelope]]] = {}
    try:
        for topic in topics:
            for partition in range(await event_log.partitions(topic)):
                tp = TopicPartition(topic, partition)
                items: list[tuple[int, Envelope]] = []
                async for batch in read_to_end(reader, tp, max_records=5000):
                    for record in batch:
                        try:
                            items.append((record.offset, decode(record.headers, record.value)))
                        except EventError:
                            continue  # unreadable records were unreadable for the scheduler too
                out[tp] = items
    finally:
        await reader.close()
    return out


async def verify(
    event_log: EventLog,
    *,
    topics: tuple[str, ...] = INPUT_TOPICS,
    since_ms: int | None = None,
    until_ms: int | None = None,
) -> VerifyReport:
    started = time.perf_counter()
    records = await load(event_log, topics)
    report = VerifyReport(events_read=sum(len(v) for v in records.values()))
    cycles: list[Envelope] = []
    recorded: dict[str, dict[str, str]] = defaultdict(dict)
    for items in records.values():
        for _, envelope in items:
            if isinstance(envelope.data, SchedulingCycleCompleted):
                cycles.append(envelope)
            elif envelope.source == SOURCE and ":" in envelope.id:
                recorded[envelope.id.split(":", 1)[0]][envelope.id] = encode(envelope).value.decode()
    cycles.sort(key=lambda e: e.data.sequence)  # type: ignore[attr-defined]
    state = SchedulerState()
    memo = CycleMemo()
    cursors: dict[TopicPartition, int] = defaultdict(int)
    for envelope in cycles:
        cycle: SchedulingCycleCompleted = envelope.data  # type: ignore[assignment]
        for point in cycle.input_offsets:
            tp = TopicPartition(point.topic, point.partition)
            items = records.get(tp, [])
            index = cursors[tp]
            while index < len(items) and items[index][0] < point.offset:
                state.fold(items[index][1])
                index += 1
            cursors[tp] = index
        if (since_ms is not None and cycle.logical_time_ms < since_ms) or (
            until_ms is not None and cycle.logical_time_ms > until_ms
        ):
            continue
        config = state.policy_config()
        result = schedule(state.snapshot(cycle.logical_time_ms), config, memo)
        replayed = decision_events(state, result, cycle.sequence)
        report.cycles += 1
        report.decisions += cycle.decision_count
        if digest(replayed) == cycle.decisions_digest and config.version == cycle.policy_version:
            report.identical_cycles += 1
            continue
        mine = {e.id: encode(e).value.decode() for e in replayed}
        theirs = recorded.get(cycle.cycle_id, {})
        for decision_id in sorted(set(mine) | set(theirs)):
            if mine.get(decision_id) != theirs.get(decision_id):
                report.differences.append(
                    Difference(cycle.cycle_id, decision_id, theirs.get(decision_id), mine.get(decision_id))
                )
        if config.version != cycle.policy_version:
            report.differences.append(
                Difference(cycle.cycle_id, "policy_version", cycle.policy_version, config.version)
            )
    report.seconds = time.perf_counter() - started
    return report
