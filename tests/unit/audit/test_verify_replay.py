"""``audit verify`` over an in-memory log the scheduler core wrote: one pass and several forked workers
give the same report, which is also what the plain single-pass algorithm gives (kept below as the
reference), on an honest log and on a tampered one, with and without a time window."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from collections import defaultdict

import pytest

from events.catalog.decisions import JobPlaced, SchedulingCycleCompleted
from events.catalog.errors import EventError
from events.catalog.governance import PolicyConfigured
from events.catalog.inventory import ClusterKind, ClusterRegistered
from events.catalog.jobs import JobCancelRequested, JobSucceeded
from events.log.contract import TopicPartition
from events.log.memory import MemoryLog
from events.wire.codec import decode, encode
from events.wire.envelope import Envelope
from services.audit import verify as verify_module
from services.audit.record_checks import At, RecordedCycle, RecordedDecision, cycles_in_order, decision_problems
from services.audit.verify import Difference, VerifyReport, load, verify
from services.scheduler.core.decide import INPUT_TOPICS
from services.scheduler.core.outputs import SOURCE, cycle_record, decision_events, digest
from services.scheduler.core.policy import CycleMemo, schedule
from services.scheduler.core.state import SchedulerState
from tests.unit.projections.builders import a_job, a_node

T0 = 1_800_000_000_000


def scheduled_log(jobs: int = 240, nodes: int = 6) -> MemoryLog:
    """A log as the scheduler host writes it: inputs arrive, a cycle decides on what was folded, its
    decisions and cycle record are appended and folded; some jobs end, one is cancelled, the policy
    changes halfway."""
    log = MemoryLog()
    ids = iter(range(10**9))

    def publish(event, at: int) -> None:  # type: ignore[no-untyped-def]
        log.append(
            Envelope(id=f"e{next(ids)}", time_ms=at, data=event, source="urn:test", subject=event.partition_key())
        )

    publish(ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR"), T0)
    for i in range(nodes):
        publish(a_node(node=f"n{i}", gpus=8), T0)
    state, memo = SchedulerState(), CycleMemo()
    positions = {TopicPartition(t, p): 0 for t in INPUT_TOPICS for p in range(len(log.parts[t]))}

    def follow() -> bool:
        outside = False
        for tp in sorted(positions):
            for record in log.parts[tp.topic][tp.partition][positions[tp] :]:
                try:
                    envelope = decode(record.headers, record.value)
                except EventError:
                    pass
                else:
                    state.fold(envelope)
                    outside = outside or envelope.source != SOURCE
                positions[tp] = record.offset + 1
        return outside

    now, submitted, placed = T0, 0, []
    while submitted < jobs:
        now += 1000
        for _ in range(8):
            gpus, milli = (2, 0) if submitted % 5 == 0 else (0, 250)
            publish(a_job(f"j{submitted:04d}", tenant=f"team-{submitted % 3}", gpus=gpus, gpu_milli=milli), now)
            submitted += 1
        for job_id in placed[: len(placed) // 3]:
            publish(JobSucceeded(job_id=job_id, cluster="c1"), now)
        placed = placed[len(placed) // 3 :]
        if submitted == 80:
            publish(JobCancelRequested(job_id="j0079", requester="alice"), now)
            log.append_raw("fedsched.jobs", b"junk", b"{not json", (("ce_type", b"io.fedsched.JobSubmitted"),), now)
        if submitted == jobs // 2:
            publish(
                PolicyConfigured(
                    policy="p", policy_version="policy-v2", configured_by="ops", document={"node_policy": "bestfit"}
                ),
                now,
            )
        if not follow():
            continue
        result = schedule(state.snapshot(now), state.policy_config(), memo)
        events = decision_events(state, result, state.cycles)
        if not events:
            continue
        offsets = [(tp.topic, tp.partition, o) for tp, o in positions.items()]
        for envelope in [*events, cycle_record(state.cycles, offsets, result, events)]:
            log.append(envelope)
            if isinstance(envelope.data, JobPlaced):
                placed.append(envelope.data.job_id)
        follow()
    return log


async def reference_verify(
    event_log: MemoryLog, since_ms: int | None = None, until_ms: int | None = None
) -> VerifyReport:
    """The plain algorithm: one pass; every cycle's replayed decisions, its recorded decision events (their
    bytes and attributes, by id) and its stored digest and count must agree; the record's own problems
    (numbering, decisions no cycle owns) are found by the same pure checks verify uses."""
    decisions: list[RecordedDecision] = []
    records = await load(event_log, INPUT_TOPICS, decisions)  # type: ignore[arg-type]
    report = VerifyReport(events_read=sum(len(v) for v in records.values()))
    located = [
        RecordedCycle(envelope.data, At(tp, offset))
        for tp, items in records.items()
        for offset, envelope in items
        if isinstance(envelope.data, SchedulingCycleCompleted)
    ]
    kept, report.problems = cycles_in_order(located)
    report.problems += decision_problems(decisions, {c.record.cycle_id for c in kept}, SOURCE)
    recorded: dict[str, dict[str, list[RecordedDecision]]] = defaultdict(dict)
    for decision in decisions:
        if decision.envelope.source == SOURCE:
            recorded[decision.envelope.id.split(":", 1)[0]].setdefault(decision.envelope.id, []).append(decision)
    state, memo = SchedulerState(), CycleMemo()
    cursors: dict[TopicPartition, int] = defaultdict(int)
    for located_cycle in kept:
        cycle = located_cycle.record
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
        engine = cycle.engine or "unnamed"
        at = str(located_cycle.at)
        report.cycles += 1
        report.decisions += cycle.decision_count
        report.cycles_by_engine[engine] = report.cycles_by_engine.get(engine, 0) + 1
        differences = []
        theirs = recorded.get(cycle.cycle_id, {})
        mine = {e.id: e for e in replayed}
        for decision_id in sorted(set(mine) | set(theirs)):
            ours = encode(mine[decision_id]).value if decision_id in mine else None
            copies = theirs.get(decision_id, [])
            if not copies:
                differences.append(Difference(cycle.cycle_id, decision_id, None, ours and ours.decode(), engine))
                continue
            for again in copies[1:]:
                differences.append(
                    Difference(cycle.cycle_id, decision_id, again.value.decode(), ours and ours.decode(), engine)
                )
            first = copies[0]
            same = ours is not None and (
                ours == first.value
                and first.envelope.time_ms == mine[decision_id].time_ms
                and first.envelope.subject == mine[decision_id].subject
            )
            if not same:
                differences.append(
                    Difference(cycle.cycle_id, decision_id, first.value.decode(), ours and ours.decode(), engine)
                )
        if config.version != cycle.policy_version:
            differences.append(Difference(cycle.cycle_id, "policy_version", cycle.policy_version, config.version))
        if cycle.decision_count != len(replayed):
            differences.append(
                Difference(cycle.cycle_id, "decision_count", str(cycle.decision_count), str(len(replayed)))
            )
        if digest(replayed) != cycle.decisions_digest:
            differences.append(Difference(cycle.cycle_id, "decisions_digest", cycle.decisions_digest, digest(replayed)))
        if differences:
            report.differing_by_engine[engine] = report.differing_by_engine.get(engine, 0) + 1
            for d in differences:
                d.engine, d.at = engine, d.at or at
            report.differences += differences
        else:
            report.identical_cycles += 1
    return report


def comparable(report: VerifyReport) -> dict[str, object]:
    """The report as the reference and verify must agree on it: differences by cycle, decision and what
    was recorded and replayed (verify's wording of each, and where a decision sits, are checked apart)."""
    out = json_of(report)
    out["differences"] = sorted(
        (d.cycle_id, d.decision_id, d.recorded, d.replayed, d.engine) for d in report.differences
    )
    return out


def tampered(log: MemoryLog) -> MemoryLog:
    """A placement moved to other GPUs, in three cycles spread over the log, and one digest edited."""
    out = MemoryLog()
    out.parts = {t: [list(p) for p in ps] for t, ps in log.parts.items()}
    decisions = out.parts["fedsched.decisions"][0]
    placements = [i for i, r in enumerate(decisions) if dict(r.headers)["ce_type"] == b"io.fedsched.JobPlaced"]
    for i in (placements[2], placements[len(placements) // 2], placements[-3]):
        record = decisions[i]
        envelope = decode(record.headers, record.value)
        data: JobPlaced = envelope.data  # type: ignore[assignment]
        replica = data.replicas[0]
        moved = replica.model_copy(update={"node": "n0" if replica.node != "n0" else "n1"})
        edited = dataclasses.replace(envelope, data=data.model_copy(update={"replicas": (moved, *data.replicas[1:])}))
        decisions[i] = dataclasses.replace(record, value=encode(edited).value)
    cycles = [
        i for i, r in enumerate(decisions) if dict(r.headers)["ce_type"] == b"io.fedsched.SchedulingCycleCompleted"
    ]
    record = decisions[cycles[len(cycles) // 3]]
    envelope = decode(record.headers, record.value)
    edited = dataclasses.replace(envelope, data=envelope.data.model_copy(update={"decisions_digest": "0" * 64}))
    decisions[cycles[len(cycles) // 3]] = dataclasses.replace(record, value=encode(edited).value)
    return out


@pytest.fixture(scope="module")
def honest() -> MemoryLog:
    return scheduled_log()


def json_of(report: VerifyReport) -> dict[str, object]:
    out = report.to_json()
    out.pop("events_per_s")
    out.pop("workers")
    return out


def times(log: MemoryLog) -> list[int]:
    return sorted(
        decode(r.headers, r.value).data.logical_time_ms  # type: ignore[attr-defined]
        for r in log.parts["fedsched.decisions"][0]
        if dict(r.headers)["ce_type"] == b"io.fedsched.SchedulingCycleCompleted"
    )


def test_the_honest_log_verifies_identically_in_one_pass_and_in_workers(honest: MemoryLog) -> None:
    reference = asyncio.run(reference_verify(honest))
    assert reference.cycles >= 20 and reference.identical_pct == 100.0, reference.differences
    for workers in (1, 2, 3):
        report = asyncio.run(verify(honest, workers=workers))  # type: ignore[arg-type]
        assert comparable(report) == comparable(reference) and report.to_json()["workers"] == workers


def test_a_tampered_log_reports_the_same_differences_in_one_pass_and_in_workers(honest: MemoryLog) -> None:
    log = tampered(honest)
    reference = asyncio.run(reference_verify(log))
    assert reference.differences and reference.identical_pct < 100.0
    for workers in (1, 2, 3):
        assert comparable(asyncio.run(verify(log, workers=workers))) == comparable(reference)  # type: ignore[arg-type]


@pytest.mark.parametrize("window", [(0.25, None), (None, 0.6), (0.3, 0.7), (1.1, None)])
def test_since_and_until_keep_their_meaning(honest: MemoryLog, window: tuple[float | None, float | None]) -> None:
    log = tampered(honest)
    at = times(log)

    def moment(share: float | None) -> int | None:
        return None if share is None else at[min(len(at) - 1, int(share * len(at)))] + (1 if share > 1 else 0)

    since, until = moment(window[0]), moment(window[1])
    reference = asyncio.run(reference_verify(log, since, until))
    for workers in (1, 2):
        report = asyncio.run(verify(log, since_ms=since, until_ms=until, workers=workers))  # type: ignore[arg-type]
        assert comparable(report) == comparable(reference)


def test_chunks_cover_every_cycle_once_in_order() -> None:
    cycles = [
        SchedulingCycleCompleted(
            cycle_id=f"cycle-{i:09d}",
            sequence=i,
            input_offsets=(),
            logical_time_ms=T0 + i,
            policy_version="default",
            decision_count=1 + i % 7,
            decisions_digest="0" * 64,
        )
        for i in range(50)
    ]
    for workers in (1, 2, 3, 7, 50):
        for since in (None, T0 + 10, T0 + 49, T0 + 99):
            spans = verify_module._chunks(cycles, since, None, workers)
            assert spans[0][0] == 0 and spans[-1][1] == len(cycles)
            assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
            assert all(a < b for a, b in spans)
            assert len(spans) <= 8 * workers


@pytest.mark.parametrize("when", ["at_once", "midway"])
def test_chunks_a_failed_worker_took_are_replayed_by_the_parent(
    honest: MemoryLog, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    reference = asyncio.run(reference_verify(honest))
    real = verify_module._Replayer.replay
    parent = verify_module.os.getpid()
    calls = itertools.count()

    def failing(self, first: int, stop: int):  # type: ignore[no-untyped-def]
        in_child = verify_module.os.getpid() != parent
        if in_child and (when == "at_once" or next(calls) == 1):
            raise RuntimeError("a worker dies")
        return real(self, first, stop)

    monkeypatch.setattr(verify_module._Replayer, "replay", failing)
    assert comparable(asyncio.run(verify(honest, workers=3))) == comparable(reference)  # type: ignore[arg-type]


def children_of_this_process() -> list[int]:
    me = verify_module.os.getpid()
    out = []
    for entry in verify_module.os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me:
                out.append(int(entry))
    return out


@pytest.mark.skipif(not verify_module.os.path.isdir("/proc"), reason="reads /proc")
def test_an_interrupted_parent_stops_its_workers(honest: MemoryLog, monkeypatch: pytest.MonkeyPatch) -> None:
    real = verify_module._Replayer.replay
    parent = verify_module.os.getpid()
    before = children_of_this_process()

    def failing_in_parent(self, first: int, stop: int):  # type: ignore[no-untyped-def]
        if verify_module.os.getpid() == parent:
            raise KeyboardInterrupt
        return real(self, first, stop)

    monkeypatch.setattr(verify_module._Replayer, "replay", failing_in_parent)
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(verify(honest, workers=3))  # type: ignore[arg-type]
    assert children_of_this_process() == before


@pytest.mark.parametrize(
    ("load", "cycles", "expected"),
    [(1.0, 1000, 4), (0.2, 1000, 4), (2.6, 1000, 2), (4.8, 1000, 1), (9.0, 1000, 1), (1.0, 250, 2), (1.0, 99, 1)],
)
def test_default_workers_use_idle_cpus_only_for_long_logs(
    monkeypatch: pytest.MonkeyPatch, load: float, cycles: int, expected: int
) -> None:
    monkeypatch.setattr(verify_module.os, "sched_getaffinity", lambda _: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(verify_module.os, "getloadavg", lambda: (load, load, load))
    # Earlier tests in the same process may have left threads running (executors, gRPC): pin the count.
    monkeypatch.setattr(verify_module, "_threads", lambda: 1)
    assert verify_module._workers(None, cycles) == expected
    assert verify_module._workers(3, cycles) == min(3, cycles)
    assert verify_module._workers(1, cycles) == 1
    monkeypatch.setattr(verify_module, "_threads", lambda: 2)  # never fork beside another thread
    assert verify_module._workers(None, cycles) == 1


@pytest.mark.parametrize(("others", "expected"), [(0.0, 4), (0.4, 4), (1.7, 2), (3.9, 1)])
def test_default_workers_follow_the_cpu_others_used_while_the_log_was_read_over_the_load_average(
    monkeypatch: pytest.MonkeyPatch, others: float, expected: int
) -> None:
    """A load that just ended still weighs on the one-minute average (bench e2e's services had stopped when
    verify ran): what other processes used while this one read the log is the better measure."""
    monkeypatch.setattr(verify_module.os, "sched_getaffinity", lambda _: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(verify_module.os, "getloadavg", lambda: (3.5, 3.5, 3.5))
    monkeypatch.setattr(verify_module, "_threads", lambda: 1)
    assert verify_module._workers(None, 1000, others) == expected
    assert verify_module._workers(None, 1000, None) == 2  # the average, where nothing was measured


def test_cpu_others_used_is_the_machines_busy_time_less_this_processs_over_the_wall_time() -> None:
    # busy seconds of the machine, seconds of this process, monotonic seconds
    assert verify_module._others_busy((100.0, 10.0, 50.0), (101.5, 10.9, 51.0)) == pytest.approx(0.6)
    assert verify_module._others_busy((100.0, 10.0, 50.0), (100.5, 10.5, 51.0)) == 0.0
    assert verify_module._others_busy((100.0, 10.0, 50.0), (100.1, 10.0, 50.1)) is None  # too short to tell
    assert verify_module._others_busy(None, (100.1, 10.0, 50.1)) is None
    first = verify_module._cpu_clock()
    assert first is not None  # Linux, where the service runs
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:  # work, so that this process's own time moves
        pass
    second = verify_module._cpu_clock()
    assert second is not None
    # The kernel counts in ticks (10 ms), by sampling: half of the work is a safe floor.
    assert second[1] - first[1] >= 0.1 and second[0] >= first[0] and second[2] > first[2]


def recorded_by(log: MemoryLog, engine: str | None, cycles: slice) -> MemoryLog:
    """The log with the cycle records in ``cycles`` (by position) written by another decision engine."""
    out = MemoryLog()
    out.parts = {t: [list(p) for p in ps] for t, ps in log.parts.items()}
    decisions = out.parts["fedsched.decisions"][0]
    at = [i for i, r in enumerate(decisions) if dict(r.headers)["ce_type"] == b"io.fedsched.SchedulingCycleCompleted"]
    for i in at[cycles]:
        envelope = decode(decisions[i].headers, decisions[i].value)
        edited = dataclasses.replace(envelope, data=envelope.data.model_copy(update={"engine": engine}))
        decisions[i] = dataclasses.replace(decisions[i], value=encode(edited).value)
    return out


def test_verify_tells_which_differences_lie_in_cycles_recorded_by_other_decision_code(honest: MemoryLog) -> None:
    """After an upgrade, the cycles the old code recorded may differ for that reason alone: the report
    counts cycles and differing cycles by the engine that recorded them, and each difference names it."""
    log = recorded_by(tampered(honest), None, slice(0, 10))  # the first ten: before engines were named
    log = recorded_by(log, "fedsched-decisions-0", slice(10, 12))
    report = asyncio.run(verify(log, workers=1))  # type: ignore[arg-type]
    assert comparable(report) == comparable(asyncio.run(reference_verify(log)))
    from services.scheduler.core.outputs import DECISION_ENGINE

    by_engine = report.cycles_by_engine
    assert by_engine["unnamed"] == 10 and by_engine["fedsched-decisions-0"] == 2
    assert sum(by_engine.values()) == report.cycles and by_engine[DECISION_ENGINE] == report.cycles - 12
    assert report.other_engines == {"fedsched-decisions-0": 2, "unnamed": 10}
    # Every cycle that differs shows in the differences (one whose digest alone was edited, as such).
    differing = {d.cycle_id for d in report.differences}
    assert sum(report.differing_by_engine.values()) == len(differing) == report.cycles - report.identical_cycles
    assert any(d.decision_id == "decisions_digest" and d.recorded == "0" * 64 for d in report.differences)
    other_differing = report.differing_by_engine.get("unnamed", 0) + report.differing_by_engine.get(
        "fedsched-decisions-0", 0
    )
    assert report.lines()[1] == (
        f"12 cycles were recorded by other decision code (fedsched-decisions-0 2, unnamed 10; this is "
        f"{DECISION_ENGINE}): {other_differing} of them differ, which an upgrade alone can cause"
    )
    listed = zip(report.differences[:20], report.lines()[2:], strict=True)
    assert all(f"(recorded by {d.engine})" in line for d, line in listed)
    assert {d.engine for d in report.differences} <= set(by_engine)


def test_a_report_of_no_cycle_claims_nothing() -> None:
    report = VerifyReport()
    assert report.identical_pct is None and report.to_json()["identical_pct"] is None
    assert report.lines()[0].startswith("nothing verified: no scheduling cycle recorded")
