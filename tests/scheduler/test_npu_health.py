"""NPU health through the scheduler's state: a health report's NPU samples are folded as its GPU samples
are, so a failed NPU is never placed on, a degraded one is taken last, a newer snapshot says it anew, and
a run that fails with ``NpuFailure`` is retried as the infrastructure's failure and placed again on NPUs
that work."""

from __future__ import annotations

import pytest

from events.catalog.decisions import FailureKind, JobPlaced, JobQueued, JobRetryScheduled
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    GpuHealthReported,
    NodeObserved,
    NpuDevice,
    NpuHealthSample,
)
from events.catalog.jobs import JobFailed, JobStarted, JobSubmitted, PriorityClass
from events.catalog.pending_reasons import PendingReason
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health, ResourceKind, Resources
from events.wire.envelope import Envelope
from services.scheduler.core.decide import decide
from services.scheduler.core.state import SchedulerState

pytestmark = pytest.mark.timeout(30)

T0 = 1_800_000_000_000
SEC = 1000


def npu_node(generation: int = 1, failed: tuple[int, ...] = ()) -> NodeObserved:
    return NodeObserved(
        cluster="c1",
        node="n1",
        generation=generation,
        cpu_milli=192_000,
        memory_mib=1_572_864,
        npus=tuple(
            NpuDevice(
                index=i,
                model="Ascend910B",
                memory_mib=65_536,
                health=Health.FAILED if i in failed else Health.OK,
            )
            for i in range(8)
        ),
    )


def npu_health(**states: Health) -> GpuHealthReported:
    """A report of n1's eight NPUs: ``npu3=Health.FAILED`` and the others healthy."""
    return GpuHealthReported(
        cluster="c1",
        node="n1",
        npus=tuple(
            NpuHealthSample(
                index=i,
                health=states.get(f"npu{i}", Health.OK),
                errors=int(f"npu{i}" in states),
                last_error_code=0x80C98000 if f"npu{i}" in states else None,
            )
            for i in range(8)
        ),
    )


def npu_job(job_id: str, npus: int) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id,
        name=job_id,
        tenant="team-a",
        priority_class=PriorityClass.CRITICAL_TRAINING,
        resources=Resources(cpu_milli=4000, memory_mib=8192, npus=npus, npu_models=("Ascend910B",)),
    )


class Log:
    """A scheduler state fed events in log order at growing times, and its cycles' decisions folded back."""

    def __init__(self, *events: object) -> None:
        self.state = SchedulerState(keep_settled=True)
        self.n = 0
        registered = ClusterRegistered(cluster="c1", kind=ClusterKind.SIMULATED, site="s", region="r", currency="EUR")
        self.add(registered, npu_node(), *events)

    def add(self, *events: object, at: int | None = None) -> None:
        for event in events:
            self.n += 1
            self.state.fold(Envelope(id=f"e{self.n}", time_ms=at if at is not None else T0 + self.n, data=event))  # type: ignore[arg-type]

    def cycle(self, now_ms: int) -> list[object]:
        decided = decide(self.state, now_ms)
        for envelope in decided.events:
            self.state.fold(envelope)
        return [e.data for e in decided.events]


def npus_of(decision: object) -> tuple[int, ...]:
    assert isinstance(decision, JobPlaced), decision
    return tuple(i for r in decision.replicas for i in r.npu_indices)


def test_a_failed_npu_reported_is_never_placed_on_and_a_job_that_needs_it_waits_saying_why() -> None:
    log = Log(npu_health(npu3=Health.FAILED), npu_job("four", 4), npu_job("eight", 8))
    decided = log.cycle(T0 + 10 * SEC)
    placed = [d for d in decided if isinstance(d, JobPlaced)]
    assert [p.job_id for p in placed] == ["four"] and 3 not in npus_of(placed[0])
    (waits,) = [d for d in decided if isinstance(d, JobQueued)]
    binding = waits.binding
    assert waits.job_id == "eight" and binding is not None
    assert (binding.reason, binding.resource, binding.requested, binding.available) == (
        ReasonCode.GPU_UNHEALTHY,
        ResourceKind.NPU,
        8,
        7,
    )
    assert "c1: 1 NPU it could use failed (1 on c1/n1); no node holds it until they are back" in waits.message
    assert waits.pending_reason is PendingReason.UNAVAILABLE  # an operator's matter, not a queue to wait out


def test_the_same_job_takes_the_npu_once_the_report_says_it_recovered() -> None:
    log = Log(npu_health(npu3=Health.FAILED), npu_job("eight", 8))
    assert not [d for d in log.cycle(T0 + 10 * SEC) if isinstance(d, JobPlaced)]
    log.add(npu_health(), at=T0 + 20 * SEC)
    (placed,) = [d for d in log.cycle(T0 + 30 * SEC) if isinstance(d, JobPlaced)]
    assert npus_of(placed) == tuple(range(8))


def test_a_degraded_npu_is_taken_last() -> None:
    log = Log(npu_health(npu0=Health.DEGRADED, npu1=Health.DEGRADED), npu_job("seven", 7))
    (placed,) = [d for d in log.cycle(T0 + 10 * SEC) if isinstance(d, JobPlaced)]
    taken = set(npus_of(placed))
    assert taken >= {2, 3, 4, 5, 6, 7} and len(taken & {0, 1}) == 1  # the six healthy first, one degraded


def test_a_newer_snapshot_says_the_npus_health_anew_and_an_older_report_is_not_applied_again() -> None:
    log = Log(npu_health(npu3=Health.FAILED))
    assert log.state.nodes[("c1", "n1")].npu_health == {i: ("failed" if i == 3 else "ok") for i in range(8)}
    log.add(npu_node(generation=2, failed=(5,)))
    facts = log.state.nodes[("c1", "n1")]
    assert facts.npu_health == {}
    log.add(npu_job("eight", 8), npu_job("seven", 7))
    decided = log.cycle(T0 + 10 * SEC)
    (placed,) = [d for d in decided if isinstance(d, JobPlaced)]
    assert placed.job_id == "seven" and 5 not in npus_of(placed) and 3 in npus_of(placed)


def test_a_run_failed_by_its_npu_is_retried_as_the_infrastructures_failure_and_placed_on_working_npus() -> None:
    log = Log(npu_job("train", 8))
    (first,) = log.cycle(T0 + 10 * SEC)
    assert npus_of(first) == tuple(range(8))
    log.add(JobStarted(job_id="train", cluster="c1", run=1), at=T0 + 20 * SEC)
    log.add(npu_health(npu3=Health.FAILED), at=T0 + 100 * SEC)
    failed = JobFailed(
        job_id="train",
        cluster="c1",
        run=1,
        reason=ReasonCode.NPU_FAILURE,
        node="n1",
        message="NPU 3 on node n1 failed (error code 0x80C98000)",
    )
    log.add(failed, at=T0 + 100 * SEC)
    (verdict,) = log.cycle(T0 + 101 * SEC)
    assert isinstance(verdict, JobRetryScheduled)
    assert (verdict.kind, verdict.failure, verdict.attempt, verdict.allowed) == (
        FailureKind.INFRASTRUCTURE,
        ReasonCode.NPU_FAILURE,
        1,
        3,
    )
    assert verdict.message.startswith("retry 1 of 3 after an NPU of node n1 failed (run 1 on c1)")
    # After its backoff it asks 8 NPUs of a node that has 7 working: it waits, and runs once NPU 3 is back.
    waits = log.cycle(verdict.not_before_ms)
    assert [type(d) for d in waits] == [JobQueued]
    log.add(npu_health(), at=verdict.not_before_ms + SEC)
    (again,) = log.cycle(verdict.not_before_ms + 2 * SEC)
    assert isinstance(again, JobPlaced) and again.run == 2 and npus_of(again) == tuple(range(8))


def test_a_smaller_npu_job_retried_after_a_failure_keeps_off_the_failed_npu() -> None:
    log = Log(npu_job("small", 2))
    (first,) = log.cycle(T0 + 10 * SEC)
    held = npus_of(first)
    log.add(JobStarted(job_id="small", cluster="c1", run=1), at=T0 + 20 * SEC)
    log.add(npu_health(**{f"npu{held[0]}": Health.FAILED}), at=T0 + 50 * SEC)
    log.add(JobFailed(job_id="small", cluster="c1", run=1, reason=ReasonCode.NPU_FAILURE, node="n1"), at=T0 + 50 * SEC)
    (verdict,) = log.cycle(T0 + 51 * SEC)
    assert isinstance(verdict, JobRetryScheduled)
    (again,) = log.cycle(verdict.not_before_ms)
    assert isinstance(again, JobPlaced) and again.run == 2 and held[0] not in npus_of(again)
