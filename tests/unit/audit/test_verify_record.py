"""``audit verify`` checks the record itself: an edited, deleted, repeated or forged decision or cycle is
found and named where it sits, even when the cycle record's digest was left as it was.

The log is the one ``test_verify_replay`` builds (the scheduler core deciding as the host does); the
mutations are an intruder's with write access to the log's storage.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events.catalog.decisions import JobPlaced, SchedulingCycleCompleted
from events.catalog.jobs import JobCancelled
from events.log.contract import LogRecord
from events.log.memory import MemoryLog
from events.wire.codec import decode, encode
from events.wire.envelope import Envelope
from services.audit.record_checks import ProblemKind
from services.audit.verify import VerifyReport, verify
from services.scheduler.core.outputs import SOURCE
from tests.unit.audit.test_verify_replay import scheduled_log

DECISIONS = "fedsched.decisions"


@pytest.fixture(scope="module")
def honest() -> MemoryLog:
    return scheduled_log(jobs=96, nodes=4)


def copy(log: MemoryLog) -> MemoryLog:
    out = MemoryLog()
    out.parts = {t: [list(p) for p in ps] for t, ps in log.parts.items()}
    return out


def decisions(log: MemoryLog) -> list[LogRecord]:
    return log.parts[DECISIONS][0]


def of_type(log: MemoryLog, event_type: type) -> list[int]:
    name = event_type.event_type.encode()  # type: ignore[attr-defined]
    return [i for i, r in enumerate(decisions(log)) if dict(r.headers)["ce_type"] == name]


def rewrite(log: MemoryLog, index: int, change: Callable[[Envelope], Envelope]) -> str:
    """Re-encode the decision record at ``index`` after ``change``; returns where it is."""
    record = decisions(log)[index]
    edited = encode(change(decode(record.headers, record.value)))
    decisions(log)[index] = dataclasses.replace(record, value=edited.value, headers=edited.headers)
    return f"{DECISIONS}[0]@{record.offset}"


def blank(log: MemoryLog, index: int) -> str:
    """The record at ``index`` deleted (its offset left as a gap: nothing decodable there)."""
    record = decisions(log)[index]
    decisions(log)[index] = dataclasses.replace(record, value=b"deleted", headers=())
    return f"{DECISIONS}[0]@{record.offset}"


def run(log: MemoryLog) -> VerifyReport:
    return asyncio.run(verify(log, workers=1))  # type: ignore[arg-type]


def test_the_honest_log_has_no_problem(honest: MemoryLog) -> None:
    report = run(honest)
    assert report.ok and report.identical_pct == 100.0 and report.cycles >= 10
    assert report.to_json()["problems"] == []


def test_a_placement_moved_to_another_node_is_named_in_its_own_cycle(honest: MemoryLog) -> None:
    log = copy(honest)
    index = of_type(log, JobPlaced)[0]

    def move(envelope: Envelope) -> Envelope:
        data: JobPlaced = envelope.data  # type: ignore[assignment]
        replica = data.replicas[0]
        moved = replica.model_copy(update={"node": "n3" if replica.node != "n3" else "n2"})
        return dataclasses.replace(envelope, data=data.model_copy(update={"replicas": (moved, *data.replicas[1:])}))

    where = rewrite(log, index, move)
    report = run(log)
    placed_id = decode(decisions(log)[index].headers, decisions(log)[index].value).id
    first = report.differences[0]
    assert (first.decision_id, first.at) == (placed_id, where)
    assert first.cycle_id == placed_id.split(":")[0] and "body differs" in first.detail
    assert not report.ok
    assert f"at {where}" in "\n".join(report.lines())


def test_a_decision_whose_time_was_changed_is_named_with_the_attribute(honest: MemoryLog) -> None:
    log = copy(honest)
    index = of_type(log, JobPlaced)[1]
    where = rewrite(log, index, lambda e: dataclasses.replace(e, time_ms=e.time_ms - 60_000))
    report = run(log)
    named = [d for d in report.differences if d.at == where]
    assert named and "time_ms" in named[0].detail


def test_a_deleted_decision_is_named_by_its_id(honest: MemoryLog) -> None:
    log = copy(honest)
    index = of_type(log, JobPlaced)[2]
    record = decisions(log)[index]
    placed_id = decode(record.headers, record.value).id
    blank(log, index)
    report = run(log)
    assert any(d.decision_id == placed_id and d.at is None for d in report.differences)


def test_a_deleted_cycle_leaves_a_gap_and_orphans_its_decisions(honest: MemoryLog) -> None:
    log = copy(honest)
    index = of_type(log, SchedulingCycleCompleted)[3]
    record = decisions(log)[index]
    cycle: SchedulingCycleCompleted = decode(record.headers, record.value).data  # type: ignore[assignment]
    blank(log, index)
    report = run(log)
    kinds = {p.kind for p in report.problems}
    assert ProblemKind.SEQUENCE_GAP in kinds and ProblemKind.ORPHAN in kinds
    gap = next(p for p in report.problems if p.kind is ProblemKind.SEQUENCE_GAP)
    assert f"sequence {cycle.sequence} missing" in gap.detail
    assert all(p.cycle_id == cycle.cycle_id for p in report.problems if p.kind is ProblemKind.ORPHAN)
    assert not report.ok


def test_a_repeated_cycle_and_its_decisions_are_found(honest: MemoryLog) -> None:
    log = copy(honest)
    at = of_type(log, SchedulingCycleCompleted)
    first_cycle = decode(decisions(log)[at[0]].headers, decisions(log)[at[0]].value)
    again = [r for r in decisions(log)[: at[0] + 1] if decode(r.headers, r.value).id.startswith(first_cycle.id[:15])]
    for record in again:
        log.append_raw(DECISIONS, record.key, record.value, record.headers, record.timestamp_ms)
    report = run(log)
    repeated = [p for p in report.problems if p.kind is ProblemKind.SEQUENCE_REPEATED]
    assert repeated and repeated[0].cycle_id == first_cycle.data.cycle_id  # type: ignore[attr-defined]
    assert any("recorded again" in d.detail for d in report.differences)


def test_a_placement_forged_by_another_source_is_foreign(honest: MemoryLog) -> None:
    log = copy(honest)
    record = decisions(log)[of_type(log, JobPlaced)[0]]
    envelope = decode(record.headers, record.value)
    log.append(dataclasses.replace(envelope, id="forged-1", source="urn:intruder"))
    report = run(log)
    foreign = [p for p in report.problems if p.kind is ProblemKind.FOREIGN]
    assert len(foreign) == 1 and "urn:intruder" in foreign[0].detail
    assert foreign[0].at == f"{DECISIONS}[0]@{len(decisions(log)) - 1}"


def test_a_decision_of_a_cycle_never_recorded_is_an_orphan(honest: MemoryLog) -> None:
    log = copy(honest)
    log.append(
        Envelope(
            id="cycle-999999999:cancel:j0001",
            time_ms=1_800_000_000_000,
            data=JobCancelled(job_id="j0001", run=0, message="forged"),
            source=SOURCE,
            subject="j0001",
        )
    )
    report = run(log)
    orphans = [p for p in report.problems if p.kind is ProblemKind.ORPHAN]
    assert [p.cycle_id for p in orphans] == ["cycle-999999999"]


MUTATIONS = ("edit_body", "edit_time", "delete_decision", "delete_cycle", "repeat_decision", "edit_digest")


@pytest.mark.timeout(600)  # 500 verifies of a 96-job log: about 100 s on a busy 2-core machine
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(MUTATIONS), pick=st.integers(min_value=0, max_value=10_000))
def test_every_mutation_of_the_record_is_detected_and_named(honest: MemoryLog, kind: str, pick: int) -> None:
    log = copy(honest)
    placed = of_type(log, JobPlaced)
    cycles = of_type(log, SchedulingCycleCompleted)
    if kind == "edit_body":
        index = placed[pick % len(placed)]

        def edit(e: Envelope) -> Envelope:
            data: JobPlaced = e.data  # type: ignore[assignment]
            return dataclasses.replace(e, data=data.model_copy(update={"explanation": data.explanation + "!"}))

        where = rewrite(log, index, edit)
    elif kind == "edit_time":
        index = placed[pick % len(placed)]
        where = rewrite(log, index, lambda e: dataclasses.replace(e, time_ms=e.time_ms + 1))
    elif kind == "delete_decision":
        index = placed[pick % len(placed)]
        record = decisions(log)[index]
        where = decode(record.headers, record.value).id  # a deleted record is named by its id
        blank(log, index)
    elif kind == "delete_cycle":
        index = cycles[pick % len(cycles)]
        record = decisions(log)[index]
        where = decode(record.headers, record.value).data.cycle_id  # type: ignore[attr-defined]
        blank(log, index)
    elif kind == "repeat_decision":
        record = decisions(log)[placed[pick % len(placed)]]
        log.append_raw(DECISIONS, record.key, record.value, record.headers, record.timestamp_ms)
        where = f"{DECISIONS}[0]@{len(decisions(log)) - 1}"
    else:
        index = cycles[pick % len(cycles)]
        where = rewrite(
            log, index, lambda e: dataclasses.replace(e, data=e.data.model_copy(update={"decisions_digest": "f" * 64}))
        )
    report = run(log)
    assert not report.ok
    named = [f"{d.at} {d.decision_id} {d.cycle_id}" for d in report.differences]
    named += [f"{p.at} {p.cycle_id} {p.detail}" for p in report.problems]
    assert any(where in text for text in named), (kind, where, named[:5])
