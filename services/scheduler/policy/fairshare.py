"""Order and fairness: priority classes first, then weighted fair share between tenants, with aging.

Called by the cycle, once per admission. Inside a priority class the next job comes from the tenant with
the lowest fair-share key: its dominant-resource share of what it holds now (DRF over CPU, memory, GPU),
plus its share of decayed historical GPU usage (Slurm-style exponential decay with a configurable
half-life), divided by its weight, minus an aging bonus for how long the job has waited, so nothing
starves. All in integers (per-mille of the fleet); the decay uses a fixed-point table of 2^(-i/64).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from services.scheduler.policy.model import Job, PolicyConfig, Tenant, TenantId, UsageRecord, priority_rank

SCALE = 1000
# round(2 ** (-i / 64) * 1e9) for i in 0..63.
_POW2_FRAC = (
    1000000000, 989228013, 978572062, 968030897, 957603281, 947287991, 937083817, 926989563, 917004043,
    907126088, 897354538, 887688246, 878126080, 868666918, 859309649, 850053177, 840896415, 831838290,
    822877739, 814013711, 805245166, 796571076, 787990423, 779502200, 771105413, 762799075, 754582214,
    746453864, 738413073, 730458897, 722590403, 714806669, 707106781, 699489836, 691954941, 684501211,
    677127773, 669833762, 662618322, 655480606, 648419777, 641435008, 634525479, 627690379, 620928906,
    614240268, 607623680, 601078366, 594603558, 588198496, 581862429, 575594615, 569394317, 563260809,
    557193371, 551191292, 545253866, 539380399, 533570200, 527822589, 522136891, 516512440, 510948574,
    505444643,
)  # fmt: skip


def decay(amount: int, age_ms: int, half_life_ms: int) -> int:
    """``amount * 2 ** (-age / half_life)`` in integers (to within 1/64 of a half-life)."""
    if amount <= 0 or half_life_ms <= 0:
        return max(0, amount) if half_life_ms <= 0 else 0
    age = max(0, age_ms)
    halvings, rest = divmod(age, half_life_ms)
    if halvings >= 62:
        return 0
    frac = _POW2_FRAC[rest * 64 // half_life_ms]
    return (amount * frac // 1_000_000_000) >> halvings


def decayed_usage(records: Iterable[UsageRecord], now_ms: int, half_life_ms: int) -> int:
    return sum(decay(r.gpu_milli_ms, now_ms - r.at_ms, half_life_ms) for r in sorted(records, key=lambda r: r.at_ms))


@dataclass(slots=True)
class Held:
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_milli: int = 0

    def add(self, job: Job, sign: int = 1) -> None:
        self.cpu_milli += sign * job.cpu_milli * job.replicas
        self.memory_mib += sign * job.memory_mib * job.replicas
        self.gpu_milli += sign * job.total_gpu_milli()


@dataclass(frozen=True, slots=True)
class Capacity:
    cpu_milli: int
    memory_mib: int
    gpu_milli: int


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
        self.held = {t: Held(h.cpu_milli, h.memory_mib, h.gpu_milli) for t, h in held.items()}
        self.capacity = capacity
        self.now_ms = now_ms
        self.config = config
        gpu_ms = max(1, capacity.gpu_milli) * max(1, config.usage_half_life_ms)
        self.history = {
            t: decayed_usage(x.usage, now_ms, config.usage_half_life_ms) * SCALE // gpu_ms
            for t, x in sorted(tenants.items())
        }

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
        ]
        return max(shares)

    def key(self, job: Job) -> tuple[int, int, int, str]:
        """Sort key of a job: lower goes first."""
        c = self.config
        share = (self.dominant_share(job.tenant) + self.history.get(job.tenant, 0)) * SCALE // self.weight(job.tenant)
        waited = max(0, self.now_ms - job.submitted_at_ms)
        bonus = (waited // max(1, c.aging_step_ms)) * c.aging_unit_milli * SCALE
        return (priority_rank(job.priority_class), share - bonus, job.submitted_at_ms, str(job.job_id))

    def admit(self, job: Job) -> None:
        self.held.setdefault(job.tenant, Held()).add(job)

    def order(self, pending: Sequence[Job]) -> list[Job]:
        """The whole queue in the order the cycle will consider it (re-ranked after every admission)."""
        by_tenant: dict[TenantId, list[Job]] = {}
        for j in sorted(pending, key=lambda j: (priority_rank(j.priority_class), j.submitted_at_ms, j.job_id)):
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


__all__ = ["Capacity", "FairShare", "Held", "decay", "decayed_usage"]
