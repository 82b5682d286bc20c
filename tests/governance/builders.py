"""Builders of governance histories: a story of facts at minutes, folded into ``GovState``.

``a_history().submit("nb", kind="notebook").place("nb", at=1).start("nb", at=2).usage("nb", 1, at=10)``
reads as what happened; ``.state()`` folds it, ``.evaluate()`` runs every rule on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobPlaced, JobQueued, ReplicaPlacement
from events.catalog.governance import QuotaLine, QuotaRequestSubmitted, QuotaSet
from events.catalog.inventory import JobUsage, NodeRemoved, NodeUsageReported
from events.catalog.jobs import JobFailed, JobKind, JobReclaimed, JobStarted, JobSubmitted
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, QuotaRequestId, ResourceKind, Resources, TenantId
from events.wire.envelope import Envelope
from services.governance.core.config import GovConfig
from services.governance.core.rules import evaluate
from services.governance.core.state import GovState, Output

MIN = 60_000
T0 = 1_764_680_400_000
CLUSTER = ClusterId("sim-1")


@dataclass
class History:
    envelopes: list[Envelope] = field(default_factory=list)

    def add(self, event: Event, at: float, source: str = "urn:test") -> History:
        n = len(self.envelopes)
        self.envelopes.append(Envelope(id=f"e{n}", time_ms=T0 + int(at * MIN), data=event, source=source))
        return self

    def submit(
        self,
        job: str,
        *,
        at: float = 0,
        kind: str = "batch",
        tenant: str = "team-a",
        name: str | None = None,
        gpus: int = 1,
        npus: int = 0,
        gang: bool = False,
        replicas: int = 1,
        max_runtime_s: int | None = None,
    ) -> History:
        event = JobSubmitted(
            job_id=JobId(job),
            name=name or job,
            tenant=TenantId(tenant),
            kind=JobKind(kind),
            gang=gang,
            replicas=replicas,
            resources=Resources(gpus=gpus, npus=npus),
            max_runtime_s=max_runtime_s,
        )
        return self.add(event, at)

    def queue(self, job: str, *reasons: ReasonCode, at: float = 0) -> History:
        message = "waiting: " + ", ".join(r.value for r in reasons)
        return self.add(JobQueued(job_id=JobId(job), cycle_id=CycleId("c1"), reasons=reasons, message=message), at)

    def place(
        self, job: str, *, at: float, run: int = 1, nodes: tuple[str, ...] = ("n1",), gpus: int = 1, npus: int = 0
    ) -> History:
        replicas = tuple(
            ReplicaPlacement(
                replica=i,
                node=NodeId(n),
                gpu_indices=tuple(range(gpus)),
                gpu_milli_each=1000 if gpus else 0,
                npu_indices=tuple(range(npus)),
            )
            for i, n in enumerate(nodes)
        )
        placed = JobPlaced(
            job_id=JobId(job),
            cycle_id=CycleId("c1"),
            cluster=CLUSTER,
            run=run,
            replicas=replicas,
            chosen=CandidateScore(cluster=CLUSTER, total=0),
            explanation="test",
        )
        return self.add(placed, at)

    def start(self, job: str, *, at: float, run: int = 1) -> History:
        return self.add(JobStarted(job_id=JobId(job), cluster=CLUSTER, run=run), at)

    def fail(self, job: str, *, at: float, run: int = 1, node: str | None = "n1") -> History:
        failed = JobFailed(
            job_id=JobId(job),
            cluster=CLUSTER,
            run=run,
            reason=ReasonCode.NON_ZERO_EXIT,
            node=None if node is None else NodeId(node),
        )
        return self.add(failed, at)

    def reclaimed(self, job: str, *, at: float, run: int = 1) -> History:
        return self.add(JobReclaimed(job_id=JobId(job), cluster=CLUSTER, run=run), at)

    def usage(
        self, job: str, pct: int, *, at: float, node: str = "n1", window_min: float = 5, npu_pct: int = 0
    ) -> History:
        """The job's GPUs at ``pct`` and its NPUs (if it has any: ``npu_pct``) over the window."""
        report = NodeUsageReported(
            cluster=CLUSTER,
            node=NodeId(node),
            window_ms=int(window_min * MIN),
            jobs=(JobUsage(job_id=JobId(job), utilisation_pct=pct, npu_utilisation_pct=npu_pct),),
        )
        return self.add(report, at)

    def node_removed(self, node: str, *, at: float) -> History:
        removed = NodeRemoved(cluster=CLUSTER, node=NodeId(node), generation=9, reason=ReasonCode.NODE_LOST)
        return self.add(removed, at)

    def quota(self, tenant: str, gpu_milli: int, *, at: float = 0) -> History:
        line = QuotaLine(resource=ResourceKind.GPU, guaranteed=gpu_milli, limit=gpu_milli)
        return self.add(QuotaSet(tenant=TenantId(tenant), lines=(line,), set_by="ops"), at)

    def request(
        self, request_id: str, amount: int, *, at: float = 0, tenant: str = "team-a", hours: float = 24
    ) -> History:
        start = T0 + int(at * MIN)
        submitted = QuotaRequestSubmitted(
            request_id=QuotaRequestId(request_id),
            tenant=TenantId(tenant),
            resource=ResourceKind.GPU,
            amount=amount,
            period_start_ms=start,
            period_end_ms=start + int(hours * 60 * MIN),
            justification="deadline",
            requester="alice",
        )
        return self.add(submitted, at)

    def tick(self, at: float) -> History:
        """Something unrelated happened at ``at``: log time moves on."""
        return self.add(NodeUsageReported(cluster=CLUSTER, node=NodeId("other"), window_ms=MIN), at)

    def state(self) -> GovState:
        state = GovState()
        for envelope in self.envelopes:
            state.fold(envelope)
        return state

    def evaluate(self, config: GovConfig | None = None) -> list[Output]:
        return evaluate(self.state(), config or GovConfig())

    def then_publish(self, outputs: list[Output]) -> History:
        """Governance's outputs become part of the story (as the host's re-read would make them)."""
        for output in outputs:
            self.envelopes.append(
                Envelope(id=output.id, time_ms=output.time_ms, data=output.event, source="urn:fedsched:governance")
            )
        return self


def a_history() -> History:
    return History()


def types(outputs: list[Output]) -> list[str]:
    return [o.event.event_type.rsplit(".", 1)[1] for o in outputs]
