"""Quotas: guaranteed and limit per tenant (and queue), per resource and per GPU model; cohort borrowing.

Called by the cycle before it places a job and by preemption (which reclaims borrowed capacity first).
Resources: ``gpu`` (milli-GPU), ``cpu`` (milli-CPU), ``memory`` (MiB), ``gpu:<MODEL>`` (milli-GPU of
that model), ``npu`` (NPUs) and ``npu:<MODEL>`` (NPUs of that model); a job's model lines are those of
the devices its plan takes (the placement's GPU model and NPU model). A tenant may use up to its
guaranteed amount on its own; above it, it borrows: from its cohort's unused guaranteed amounts if it
has a cohort, otherwise from idle fleet capacity; never above its limit. Whatever a tenant uses above
its guaranteed amount is borrowed, and reclaimable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from services.scheduler.core.policy.model import Job, Quota, Tenant, TenantId

GENERIC = ("cpu", "memory", "gpu", "npu")


def job_amounts(job: Job, model: str | None = None, npu_model: str | None = None) -> dict[str, int]:
    out = {
        "cpu": job.cpu_milli * job.replicas,
        "memory": job.memory_mib * job.replicas,
        "gpu": job.total_gpu_milli(),
    }
    if model and job.total_gpu_milli():
        out[f"gpu:{model}"] = job.total_gpu_milli()
    if job.npus:
        out["npu"] = job.npus * job.replicas
        if npu_model:
            out[f"npu:{npu_model}"] = job.npus * job.replicas
    return out


def fmt_amount(resource: str, v: int) -> str:
    if resource.startswith("npu"):
        return f"{v} NPU{'s' if v != 1 else ''}"
    if resource.startswith("gpu"):
        whole, rest = divmod(v, 1000)
        return f"{whole}" if not rest else f"{whole}.{rest:03d}".rstrip("0")
    if resource == "cpu":
        whole, rest = divmod(v, 1000)
        return f"{whole}" if not rest else f"{whole}.{rest:03d}".rstrip("0")
    return f"{v} MiB"


def borrowed_amount(resource: str, v: int) -> str:
    """An amount with what it is of, named once: "2 gpu", "1024 MiB memory", "8 NPUs", "8 NPUs of
    Ascend910B" (an NPU amount already says NPUs)."""
    if resource == "npu":
        return fmt_amount(resource, v)
    if resource.startswith("npu:"):
        return f"{fmt_amount(resource, v)} of {resource.removeprefix('npu:')}"
    return f"{fmt_amount(resource, v)} {resource}"


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    ok: bool
    borrowed: bool = False
    resource: str = ""
    used: int = 0
    limit: int = 0
    request: int = 0
    message: str = ""
    available: int = 0
    """What the quota left for the job: below its limit, or its guarantee plus what its cohort lends."""


@dataclass(slots=True)
class QuotaBook:
    tenants: Mapping[TenantId, Tenant]
    usage: dict[tuple[TenantId, str, str], int] = field(default_factory=dict)  # (tenant, queue, res)

    def add(self, job: Job, model: str | None, sign: int = 1, npu_model: str | None = None) -> None:
        for res, v in job_amounts(job, model, npu_model).items():
            for q in ("", job.queue):
                k = (job.tenant, q, res)
                self.usage[k] = self.usage.get(k, 0) + sign * v

    def used(self, tenant: TenantId, queue: str, resource: str) -> int:
        return self.usage.get((tenant, queue, resource), 0)

    def quotas(self, tenant: TenantId) -> list[Quota]:
        t = self.tenants.get(tenant)
        return sorted(t.quotas, key=lambda q: (q.queue, q.resource)) if t else []

    def cohort_room(self, tenant: TenantId, resource: str) -> int:
        """Unused guaranteed amount left in the tenant's cohort (its own included); -1 without a cohort."""
        me = self.tenants.get(tenant)
        if me is None or not me.cohort:
            return -1  # no cohort: borrow from idle fleet capacity (bounded by the limit only)
        room = 0
        for tid, t in sorted(self.tenants.items()):
            if t.cohort != me.cohort:
                continue
            for q in t.quotas:
                if q.queue == "" and q.resource == resource:
                    room += q.guaranteed - self.used(tid, "", resource)
        return max(0, room)

    def check(self, job: Job, model: str | None, npu_model: str | None = None) -> QuotaCheck:
        borrowed = False
        amounts = job_amounts(job, model, npu_model)
        for q in self.quotas(job.tenant):
            if q.queue and q.queue != job.queue:
                continue
            req = amounts.get(q.resource, 0)
            if not req:
                continue
            used = self.used(job.tenant, q.queue, q.resource)
            if used + req > q.limit:
                return QuotaCheck(
                    False, False, q.resource, used, q.limit, req,
                    f"{job.tenant}{'/' + q.queue if q.queue else ''} quota {q.resource} used "
                    f"{fmt_amount(q.resource, used)}/{fmt_amount(q.resource, q.limit)}, "
                    f"job asks {fmt_amount(q.resource, req)}", max(0, q.limit - used),
                )  # fmt: skip
            if used + req > q.guaranteed:
                over = used + req - max(q.guaranteed, used)
                room = self.cohort_room(job.tenant, q.resource) if not q.queue else -1
                if room >= 0 and req > room:
                    return QuotaCheck(
                        False, False, q.resource, used, q.guaranteed, req,
                        f"{job.tenant} would borrow {borrowed_amount(q.resource, over)} above its "
                        f"guaranteed {fmt_amount(q.resource, q.guaranteed)}; its cohort has "
                        f"{fmt_amount(q.resource, room)} unused", max(0, q.guaranteed - used) + room,
                    )  # fmt: skip
                borrowed = True
        return QuotaCheck(True, borrowed)

    def borrowing(self, tenant: TenantId) -> bool:
        """Is the tenant above its guaranteed amount of any resource (so its newest jobs are reclaimable)."""
        return any(q.queue == "" and self.used(tenant, "", q.resource) > q.guaranteed for q in self.quotas(tenant))

    def within_guaranteed(self, job: Job, model: str | None) -> bool:
        amounts = job_amounts(job, model)
        qs = [q for q in self.quotas(job.tenant) if q.queue == "" and q.resource in amounts]
        if not qs:
            return False
        return all(self.used(job.tenant, "", q.resource) + amounts[q.resource] <= q.guaranteed for q in qs)


def book_from(tenants: Iterable[Tenant]) -> QuotaBook:
    return QuotaBook({t.tenant_id: t for t in sorted(tenants, key=lambda t: t.tenant_id)})


__all__ = ["QuotaBook", "QuotaCheck", "book_from", "borrowed_amount", "fmt_amount", "job_amounts"]
