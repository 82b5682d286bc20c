"""The soak's judgements catch what they are for: each invariant fails on a history that breaks it, and
passes on one that does not. Pure and quick; the soak itself is ``test_soak``."""

from __future__ import annotations

import pytest

from tests.soak import cost, fencing, invariants
from tests.soak.chaos import LeaderStop
from tests.soak.history import DecisionRecord, History, Placement, Seen
from tests.soak.load import Outcome
from tests.soak.plan import JobDraw, SoakPlan

pytestmark = [pytest.mark.timeout(30)]


def draw(request_id: str) -> JobDraw:
    return JobDraw(0, request_id, "grpc", "team-a", 1, 0, 5, "standard")


def seen(at: str, id_: str = "", kind: str = "JobSubmitted", time_ms: int = 0) -> Seen:
    return Seen(at, id_ or at, kind, time_ms)


def placed(job: str, at: str, cycle: str = "cycle-000000001", time_ms: int = 0, milli: int = 1000) -> Placement:
    return Placement(seen(at, f"{cycle}:place:{job}", "JobPlaced", time_ms), cycle, "sim-a", "sim-a-n-000", milli)


def a_history() -> History:
    """One request, one job, placed once and ended once, in one cycle numbered 0."""
    history = History()
    history.submitted["r1"].append(("j1", seen("fedsched.jobs[0]@0", "submit-j1")))
    history.tenant_of["j1"] = ("team-a", "default")
    history.placements[("j1", 1)].append(placed("j1", "fedsched.decisions[0]@0", "cycle-000000000", time_ms=1_000))
    history.run_ends[("j1", 1)].append(seen("fedsched.jobs[0]@1", "end-j1", "JobSucceeded", 61_000))
    history.job_ends["j1"].append(seen("fedsched.jobs[0]@1", "end-j1", "JobSucceeded", 61_000))
    history.decisions += [
        DecisionRecord(0, "JobPlaced", "cycle-000000000:place:j1", "cycle-000000000", job_id="j1"),
        DecisionRecord(1, "SchedulingCycleCompleted", "cycle-000000000:completed", "cycle-000000000", 0, 1),
    ]
    history.rates["sim-a"] = {"A100": 3_600_000}
    history.node_model[("sim-a", "sim-a-n-000")] = "A100"
    return history


def outcomes(job_id: str | None = "j1") -> dict[str, Outcome]:
    return {"r1": Outcome(draw("r1"), job_id=job_id, attempts=1)}


def test_a_history_that_keeps_every_promise_breaks_no_invariant() -> None:
    history = a_history()
    ends, redelivered = invariants.runs_end_at_most_once(history)
    found = invariants.every(
        [
            invariants.one_job_per_request(outcomes(), history),
            invariants.runs_placed_once(history),
            ends,
            invariants.jobs_ended(outcomes(), history),
            invariants.cycles_contiguous(history),
        ]
    )
    assert found == [] and redelivered == 0


def test_a_request_without_a_submission_is_lost_and_one_with_two_jobs_is_doubled() -> None:
    history = a_history()
    history.submitted.clear()
    assert [v.invariant for v in invariants.one_job_per_request(outcomes(), history)] == [
        "request id gave no job (lost)"
    ]
    history.submitted["r1"] += [("j1", seen("fedsched.jobs[0]@0")), ("j2", seen("fedsched.jobs[3]@7"))]
    (doubled,) = invariants.one_job_per_request(outcomes(), history)
    assert doubled.invariant == "request id gave more than one job (doubled)"
    assert "['j1', 'j2']" in doubled.evidence[0] and "fedsched.jobs[3]@7" in doubled.evidence[0]


def test_the_same_submission_delivered_twice_is_one_job() -> None:
    history = a_history()
    history.submitted["r1"].append(("j1", seen("fedsched.jobs[0]@5", "submit-j1")))
    assert invariants.one_job_per_request(outcomes(), history) == []
    assert invariants.tally(outcomes(), history, 0).redelivered == 1


def test_a_run_placed_twice_and_a_run_ended_by_two_events_are_doubled() -> None:
    history = a_history()
    history.placements[("j1", 1)].append(placed("j1", "fedsched.decisions[0]@9", "cycle-000000004"))
    history.run_ends[("j1", 1)].append(seen("fedsched.jobs[0]@8", "fail-j1", "JobFailed"))
    (twice,) = invariants.runs_placed_once(history)
    assert twice.invariant == "run placed more than once (doubled)" and "cycle-000000004" in twice.evidence[0]
    (ended_twice,), _ = invariants.runs_end_at_most_once(history)
    assert "JobSucceeded" in ended_twice.evidence[0] and "JobFailed" in ended_twice.evidence[0]
    assert invariants.tally(outcomes(), history, 0).doubled == 2


def test_a_second_run_needs_the_first_stopped_by_the_scheduler() -> None:
    history = a_history()
    history.placements[("j1", 2)].append(placed("j1", "fedsched.decisions[0]@9"))
    (unstopped,) = invariants.runs_placed_once(history)
    assert unstopped.invariant == "new run placed while the previous one was not stopped by the scheduler"
    history.run_ends[("j1", 1)] = [seen("fedsched.jobs[0]@1", "pre-j1", "JobPreempted")]
    assert invariants.runs_placed_once(history) == []


def test_a_gap_a_repeat_and_a_stray_decision_in_the_cycles_are_each_named() -> None:
    history = a_history()
    history.decisions += [
        DecisionRecord(2, "JobQueued", "cycle-000000001:queue:j2", "cycle-000000001", job_id="j2"),
        DecisionRecord(3, "JobQueued", "cycle-000000000:queue:j3", "cycle-000000000", job_id="j3"),  # a zombie's
        DecisionRecord(4, "SchedulingCycleCompleted", "cycle-000000001:completed", "cycle-000000001", 1, 1),
        DecisionRecord(5, "SchedulingCycleCompleted", "cycle-000000001:completed", "cycle-000000001", 1, 0),
        DecisionRecord(6, "SchedulingCycleCompleted", "cycle-000000003:completed", "cycle-000000003", 3, 0),
    ]
    found = {v.invariant: v.evidence for v in invariants.cycles_contiguous(history)}
    assert [e.split(":")[0] for e in found["cycle sequence numbers not contiguous from 0"]] == [
        "cycle-000000001",
        "cycle-000000003",
    ]
    assert found["decision outside the cycle whose record follows it"] == [
        "cycle-000000000|3|JobQueued precedes the record of cycle-000000001 at offset 4"
    ]
    assert found["cycle record's decision count differs from its decisions"] == [
        "cycle-000000001:completed at 4 counts 1, 2 were published"
    ]


def test_a_job_never_ended_is_named_with_its_runs() -> None:
    history = a_history()
    history.job_ends.clear()
    (unfinished,) = invariants.jobs_ended(outcomes(), history)
    assert unfinished.evidence == ["r1 -> j1: runs placed [1] (last on sim-a), runs ended [1], no end of the job"]


def test_cost_is_recomputed_hour_by_hour_and_a_read_model_that_differs_is_named() -> None:
    history = a_history()  # one GPU from 1 s to 61 s at 3.6 units an hour: 0.06 units
    assert cost.recompute(history) == {("team-a", "sim-a", "A100", 0): (60_000_000, 60_000)}
    problems, recomputed, live = cost.differences(history, [])
    assert recomputed == 60_000 and live == 0
    assert problems == [
        "team-a/sim-a/A100 hour 0: read model allocated 0 milli-GPU-ms costing 0, the events 60000000 costing 60000"
    ]
    history.placements[("j1", 1)][0] = placed("j1", "x", time_ms=3_599_000)
    history.run_ends[("j1", 1)][0] = seen("y", "end-j1", "JobSucceeded", 3_601_000)
    assert cost.recompute(history) == {
        ("team-a", "sim-a", "A100", 0): (1_000_000, 1_000),
        ("team-a", "sim-a", "A100", 3_600_000): (1_000_000, 1_000),
    }


def batch_line(first: int, last: int, epoch: int, control: bool, created: int) -> str:
    """A batch as DumpLogSegments prints it (Kafka 3.9), producer 5."""
    return (
        f"baseOffset: {first} lastOffset: {last} count: {last - first + 1} baseSequence: 0 lastSequence: 0"
        f" producerId: 5 producerEpoch: {epoch} partitionLeaderEpoch: 0 isTransactional: true"
        f" isControl: {str(control).lower()} deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: {created}"
        " size: 78 magic: 2 compresscodec: none crc: 1 isvalid: true"
    )


def marker_line(offset: int, marker: str) -> str:
    return (
        f"| offset: {offset} CreateTime: 0 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: {marker}"
    )


DUMP = "\n".join(
    [
        "Dumping /k/data/fedsched.decisions-0/00000000000000000000.log",
        "Log starting offset: 0",
        batch_line(0, 1, 0, False, 1000),
        "| offset: 0 CreateTime: 1000 keySize: 34 valueSize: 715 sequence: 0 headerKeys: [ce_id]",
        batch_line(2, 2, 0, True, 1001),
        marker_line(2, "COMMIT coordinatorEpoch: 0"),
        batch_line(3, 4, 1, False, 3000),
        batch_line(5, 5, 1, True, 3001),
        marker_line(5, "COMMIT coordinatorEpoch: 0"),
        batch_line(6, 6, 2, False, 4000),  # aborted: never visible
        batch_line(7, 7, 2, True, 4001),
        marker_line(7, "ABORT coordinatorEpoch: 0"),
    ]
)


def test_only_committed_batches_count_and_each_is_told_by_its_producer_epoch() -> None:
    assert [str(b) for b in fencing.parse(DUMP)] == ["@0-1 by producer 5 epoch 0", "@3-4 by producer 5 epoch 1"]


def test_a_deposed_leader_writing_after_its_successor_is_found_and_tied_to_the_stop() -> None:
    batches = [
        fencing.Batch(0, 1, 5, 0, 1000),
        fencing.Batch(3, 4, 5, 1, 3000),
        fencing.Batch(6, 7, 5, 0, 3500),  # the stopped leader, continued, still writing
    ]
    (found,) = fencing.returning_writers(batches)
    assert found == "decisions @6-7 by producer 5 epoch 0: its writer had been succeeded by producer 5 epoch 1"
    stop = LeaderStop("scheduler-1", 42, 2000, 3400, "scheduler-2", 2900, "then ['scheduler-2'] led")
    evidence, late = fencing.leader_stop(batches, stop)
    assert "stopped with producer 5 epoch 0" in evidence and "@3-4 by producer 5 epoch 1" in evidence
    assert late == [
        "the stopped leader wrote decisions @6-7 by producer 5 epoch 0"
        " after its successor's first @3-4 by producer 5 epoch 1"
    ]
    assert fencing.returning_writers(batches[:2]) == []
    assert fencing.leader_stop(batches[:2], stop)[1] == []


def test_a_plan_is_the_same_for_the_same_seed_and_sends_one_intake_request_in_twenty_one() -> None:
    plan = SoakPlan.for_size(400, seed=7)
    draws = plan.draws()
    assert draws == SoakPlan.for_size(400, seed=7).draws()
    assert draws != SoakPlan.for_size(400, seed=8).draws()
    assert sum(d.path == "grpc" for d in draws) == 400 and sum(d.path == "intake" for d in draws) == 20
    assert len({d.request_id for d in draws}) == len(draws)
    with pytest.raises(ValueError, match="FEDSCHED_SOAK_SIZE"):
        SoakPlan.for_size(5)
