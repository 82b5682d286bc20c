"""Order and fairness: priority classes first, then weighted fair share between tenants, with aging.

Called by the cycle, once per admission. Classes come first, each job in the class it is ordered as
(``model.ordering_rank``): its own, or one class higher per ``class_aging_step_ms`` waited, up to the
policy's ``class_aging_ceiling`` (bounded aging across classes, so best-effort work is not starved by a
steady stream of standard jobs; its preemption rules stay its own class's). Inside a class the next job
comes from the tenant with the lowest fair-share key: its dominant-resource share of what it holds now
(DRF over CPU, memory, GPU, and NPU in a fleet that has NPUs),
plus its share of decayed historical GPU usage (Slurm-style exponential decay with a configurable
half-life), divided by its weight, minus an aging bonus for how long the job has waited, so nothing
starves. All in integers (per-mille of the fleet); the decayed history comes from ``policy.usage``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.scheduler.core.policy.model import (
    PRIORITY_ORDER,
    Job,
    PolicyConfig,
    Tenant,
    TenantId,
    ordering_rank,
    priority_rank,
)
from services.scheduler.core.policy.usage import decayed

SCALE = 1000


@dataclass(slots=True)
class Held:
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0
    npus: int = 0

    def add(self, job: Job, sign: int = 1) -> None:
        self.cpu_milli += sign * job.cpu_milli * job.replicas
        self.memory_mib += sign * job.memory_mib * job.replicas
        self.gpu_milli += sign * job.total_gpu_milli()
        self.npus += sign * job.npus * job.replicas


@dataclass(frozen=True, slots=True)
class Capacity:
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    npus: int = 0  # usable NPUs


class FairShare:
    """Tracks what each tenant holds during a cycle and ranks the heads of the tenants' queues."""

    def __init__(
        self,
        tenants: Mapping[TenantId, Tenant],
        held: Mapping[TenantId, Held],
        capacity: Capacity,
        now_ms: int,
        config: PolicyConfig,
    ) -> None:
        self.tenants = tenants
        self.held = {t: Held(h.cpu_milli, h.memory_mib, h.gpu_milli, h.npus) for t, h in held.items()}
        self.capacity = capacity
        self.now_ms = now_ms
        self.config = config
        gpu_ms = max(1, capacity.gpu_milli) * max(1, config.usage_half_life_ms)
        for t, x in sorted(tenants.items()):
            if x.usage.epochs and x.usage.half_life_ms != config.usage_half_life_ms:
                raise ValueError(
                    f"tenant {t}: usage history grown with a half-life of {x.usage.half_life_ms} ms, "
                    f"the policy's is {config.usage_half_life_ms} ms"
                )
        self.history = {t: decayed(x.usage, now_ms) * SCALE // gpu_ms for t, x in sorted(tenants.items())}

    def weight(self, tenant: TenantId) -> int:
        t = self.tenants.get(tenant)
        return max(1, t.weight if t else 1)

    def dominant_share(self, tenant: TenantId) -> int:
        h = self.held.get(tenant, Held())
        c = self.capacity
        shares = [
            h.cpu_milli * SCALE // max(1, c.cpu_milli),
            h.memory_mib * SCALE // max(1, c.memory_mib),
            h.gpu_milli * SCALE // max(1, c.gpu_milli),
            h.npus * SCALE // max(1, c.npus),
        ]
        return max(shares)

    def key(self, job: Job) -> tuple[int, int, int, str]:
        """Sort key of a job: lower goes first."""
        c = self.config
        share = (self.dominant_share(job.tenant) + self.history.get(job.tenant, 0)) * SCALE // self.weight(job.tenant)
        waited = max(0, self.now_ms - job.submitted_at_ms)
        bonus = (waited // max(1, c.aging_step_ms)) * c.aging_unit_milli * SCALE
        return (ordering_rank(job, self.now_ms, c), share - bonus, job.submitted_at_ms, str(job.job_id))

    def aged(self, job: Job) -> str:
        """Words for a job ordered above its own class by aging (``""`` when it is not)."""
        rank = ordering_rank(job, self.now_ms, self.config)
        if rank == priority_rank(job.priority_class):
            return ""
        waited_min = max(0, self.now_ms - job.submitted_at_ms) // 60_000
        return (
            f"ordered as {PRIORITY_ORDER[rank].value}: promoted by aging from {job.priority_class.value} after "
            f"waiting {waited_min // 60} h {waited_min % 60} min (its preemption rules stay {job.priority_class.value})"
        )

    def admit(self, job: Job) -> None:
        self.held.setdefault(job.tenant, Held()).add(job)

    def order(self, pending: Sequence[Job]) -> list[Job]:
        """The whole queue in the order the cycle will consider it (re-ranked after every admission)."""
        by_tenant: dict[TenantId, list[Job]] = {}
        now, config = self.now_ms, self.config
        for j in sorted(pending, key=lambda j: (ordering_rank(j, now, config), j.submitted_at_ms, j.job_id)):
            by_tenant.setdefault(j.tenant, []).append(j)
        out: list[Job] = []
        heads = {t: 0 for t in by_tenant}
        shadow = FairShare(self.tenants, self.held, self.capacity, self.now_ms, self.config)
        shadow.history = self.history
        while True:
            best: tuple[tuple[int, int, int, str], TenantId] | None = None
            for t in sorted(heads):
                i = heads[t]
                if i < len(by_tenant[t]):
                    k = shadow.key(by_tenant[t][i])
                    if best is None or k < best[0]:
                        best = (k, t)
            if best is None:
                return out
            job = by_tenant[best[1]][heads[best[1]]]
            heads[best[1]] += 1
            out.append(job)
            shadow.admit(job)


__all__ = ["Capacity", "FairShare", "Held"]
