"""What ``fedsched audit verify`` checks in the record itself, beside re-deciding each cycle.

Called by ``services.audit.verify``. Pure: it reads decoded envelopes and the bytes they were read from.

A replay that gives the digest a cycle record stores proves nothing about the decision events next to
it: an intruder who edits a ``JobPlaced`` leaves the cycle's digest alone. So verify holds three things
to agree, per cycle: the events the replay derives, the decision events as recorded in the log (byte
for byte, with their CloudEvents attributes), and the digest and count the cycle record stores. And,
over the whole log:

- cycle sequence numbers run 0, 1, 2, ... with no gap and no repeat, each under its own cycle id;
- every decision event belongs to exactly one recorded cycle (its id is ``<cycle id>:...``), appears
  once, and was written by the scheduler: a ``JobPlaced`` (or any other decision type) from another
  source, or naming a cycle that was never recorded, is a forgery or a leftover of a deleted cycle.

Every problem names where it is in the log (topic, partition, offset), the cycle and what differs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from events.catalog.decisions import (
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    JobReplicasAdded,
    JobRetriesExhausted,
    JobRetryScheduled,
    JobRunClosed,
    SchedulingCycleCompleted,
)
from events.log.contract import TopicPartition
from events.wire.envelope import Envelope

DECISION_TYPES = (
    JobPlaced,
    JobReplicasAdded,
    JobQueued,
    JobPreemptionRequested,
    JobRetryScheduled,
    JobRetriesExhausted,
    JobRunClosed,
)
"""Events only the scheduler's cycles write (it also writes ``JobCancelled`` for a job cancelled while
waiting, which connectors write too: that one is a decision when its source is the scheduler's)."""


@dataclass(frozen=True, slots=True)
class At:
    """Where a record was read."""

    tp: TopicPartition
    offset: int

    def __str__(self) -> str:
        return f"{self.tp}@{self.offset}"


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """A decision event as the log holds it: the bytes of its body and its decoded envelope."""

    at: At
    envelope: Envelope
    value: bytes


@dataclass(frozen=True, slots=True)
class RecordedCycle:
    record: SchedulingCycleCompleted
    at: At


class ProblemKind(StrEnum):
    SEQUENCE_GAP = "sequence_gap"
    SEQUENCE_REPEATED = "sequence_repeated"
    CYCLE_ID = "cycle_id_mismatch"
    ORPHAN = "orphan_decision"
    FOREIGN = "foreign_decision"
    REPEATED = "repeated_decision"


@dataclass(frozen=True, slots=True)
class Problem:
    """Something wrong with the record that no replay is needed to see."""

    kind: ProblemKind
    at: str
    cycle_id: str | None
    detail: str

    def __str__(self) -> str:
        cycle = f" {self.cycle_id}" if self.cycle_id else ""
        return f"{self.kind.value} at {self.at}{cycle}: {self.detail}"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind.value, "at": self.at, "cycle_id": self.cycle_id, "detail": self.detail}


def is_decision(envelope: Envelope, scheduler_source: str) -> bool:
    """Whether the scheduler's cycles alone may have written this event."""
    if isinstance(envelope.data, SchedulingCycleCompleted):
        return False
    return envelope.source == scheduler_source or isinstance(envelope.data, DECISION_TYPES)


def cycle_of(decision_id: str) -> str:
    return decision_id.partition(":")[0]


def cycles_in_order(cycles: Iterable[RecordedCycle]) -> tuple[list[RecordedCycle], list[Problem]]:
    """The cycles to re-execute (the first record of each sequence number, in sequence order) and what is
    wrong with their numbering: a gap (a deleted cycle), a repeat (a duplicated or forged one), an id that
    is not its sequence's."""
    ordered = sorted(cycles, key=lambda c: (c.record.sequence, c.at.tp.topic, c.at.tp.partition, c.at.offset))
    kept: list[RecordedCycle] = []
    problems: list[Problem] = []
    expected = 0
    for cycle in ordered:
        record = cycle.record
        if kept and record.sequence == kept[-1].record.sequence:
            problems.append(
                Problem(
                    ProblemKind.SEQUENCE_REPEATED,
                    str(cycle.at),
                    record.cycle_id,
                    f"sequence {record.sequence} recorded again (first at {kept[-1].at})",
                )
            )
            continue
        if record.sequence != expected:
            missing = f"{expected}" if record.sequence == expected + 1 else f"{expected}-{record.sequence - 1}"
            problems.append(
                Problem(
                    ProblemKind.SEQUENCE_GAP,
                    str(cycle.at),
                    record.cycle_id,
                    f"cycle sequence {missing} missing before sequence {record.sequence}",
                )
            )
        if record.cycle_id != f"cycle-{record.sequence:09d}":
            problems.append(
                Problem(
                    ProblemKind.CYCLE_ID,
                    str(cycle.at),
                    record.cycle_id,
                    f"the cycle id is not sequence {record.sequence}'s (cycle-{record.sequence:09d})",
                )
            )
        kept.append(cycle)
        expected = record.sequence + 1
    return kept, problems


def decision_problems(
    decisions: Iterable[RecordedDecision], cycle_ids: set[str], scheduler_source: str
) -> list[Problem]:
    """Decision events that no recorded cycle owns, or that the scheduler did not write (a repeat of one a
    cycle owns is that cycle's difference: see ``compare``)."""
    problems: list[Problem] = []
    for decision in decisions:
        envelope = decision.envelope
        owner = cycle_of(envelope.id) if ":" in envelope.id else None
        if envelope.source != scheduler_source:
            problems.append(
                Problem(
                    ProblemKind.FOREIGN,
                    str(decision.at),
                    owner,
                    f"{envelope.data.event_type} {envelope.id} was written by {envelope.source}, not the scheduler",
                )
            )
        elif owner is None or owner not in cycle_ids:
            problems.append(
                Problem(
                    ProblemKind.ORPHAN,
                    str(decision.at),
                    owner,
                    f"{envelope.data.event_type} {envelope.id} belongs to no recorded cycle",
                )
            )
    return problems


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One decision whose record differs from the replay: ``recorded`` and ``replayed`` are JSON bodies
    (None where one side has no such decision), ``at`` where the record is (None where it is missing)."""

    decision_id: str
    recorded: str | None
    replayed: str | None
    at: str | None
    detail: str


def compare(replayed: Sequence[tuple[Envelope, bytes]], recorded: dict[str, list[RecordedDecision]]) -> list[Mismatch]:
    """The decisions of one cycle as replayed (envelopes with their encoded bodies, in publishing order)
    against the decision events recorded under that cycle's id, by decision id."""
    out: list[Mismatch] = []
    mine = {envelope.id: (envelope, value) for envelope, value in replayed}
    for decision_id in sorted(set(mine) | set(recorded)):
        ours = mine.get(decision_id)
        theirs = recorded.get(decision_id, [])
        replayed_text = None if ours is None else ours[1].decode()
        if not theirs:
            out.append(Mismatch(decision_id, None, replayed_text, None, "replayed, but not in the log"))
            continue
        first = theirs[0]
        for again in theirs[1:]:
            out.append(
                Mismatch(
                    decision_id,
                    again.value.decode(errors="replace"),
                    replayed_text,
                    str(again.at),
                    f"recorded again (first at {first.at})",
                )
            )
        recorded_text = first.value.decode(errors="replace")
        if ours is None:
            out.append(Mismatch(decision_id, recorded_text, None, str(first.at), "in the log, but not replayed"))
            continue
        detail = _differs(ours[0], ours[1], first)
        if detail:
            out.append(Mismatch(decision_id, recorded_text, replayed_text, str(first.at), detail))
    return out


def _differs(envelope: Envelope, value: bytes, recorded: RecordedDecision) -> str:
    if recorded.value != value:
        return "the recorded event's body differs from the replay's"
    theirs = recorded.envelope
    for name in ("time_ms", "source", "subject", "tenant", "correlation_id", "causation_id"):
        if getattr(theirs, name) != getattr(envelope, name):
            return f"the recorded event's {name} is {getattr(theirs, name)!r}, the replay's {getattr(envelope, name)!r}"
    if type(theirs.data) is not type(envelope.data):
        return f"the recorded event's type is {theirs.data.event_type}, the replay's {envelope.data.event_type}"
    return ""
