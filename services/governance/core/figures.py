"""The figures of the governance report, computed from read-model rows and findings. Pure.

Called by ``services.governance.report`` (which fetches the rows and renders the result). Every sum is
over integers (milli-GPU-milliseconds, micro-currency, milliseconds) in a fixed order; conversion to
GPU-hours, money and minutes happens at rendering.

Sources: cost from ``read_usage`` (allocated time of finished runs, priced per hour bucket when a run
ends); utilisation and idle time from ``read_usage`` too (used time from usage reports, which running
jobs send as they run) plus the runs still holding GPUs, from ``read_jobs``, up to the report's end, so
that allocated and used time cover the same runs; waiting, reasons, interruptions and inference
disruption from ``read_jobs`` (status, timeline); quota from ``read_quota``; findings from the log.

Usage is kept per hour, so the usage figures (utilisation, cost, idle, hourly) cover the whole hours the
period touches: an hour is counted whole or not at all, as ``read_usage`` and ``fedsched quota`` count
it. Counting part of an hour would mean guessing when in the hour its GPU time was spent (and a run is
priced in the hour it ends); dropping the part hours lost up to an hour at each end. Runs still holding
GPUs count up to the end of those hours, or to now if that is earlier, so they cover the same time as
the usage samples that fill the hours.

Inference disruption is derived at job level: the reported facts start and stop an inference job's
replicas together, so "below minimum replicas" is counted as the minutes an inference job in the period
was not running after it first started (restarting after a preemption, reclaim or infrastructure
failure); its first wait is queueing delay. Partial replica loss inside a running job is not reported
by connectors and is not counted; the end of one cluster's part of a service spread over clusters leaves
its job running (only its run's close changes its status), so the service counts as down only once every
part has ended and the scheduler closed the run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from events.catalog.lifecycle import FINAL_STATUSES, JobStatus
from events.wire.envelope import format_time

HOUR_MS = 3_600_000
#: Ends of a run that interrupt the work (not the job's own success or failure of its code).
INTERRUPTIONS = frozenset(
    {
        "Preempted",
        "Reclaimed",
        "NodeFailure",
        "GpuFailure",
        "NpuFailure",
        "GpuUnhealthy",
        "NodeLost",
        "NodeDeleted",
        "ClusterUnreachable",
        "AllocationLeaseExpired",
    }
)
TRAINING_KINDS = frozenset({"training", "fine_tune"})
NO_USAGE_DATA = "no usage data"
"""What a used share says when no usage report measured the devices (not 0%: nothing is known)."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    tenant: str
    cluster: str
    gpu_model: str
    hour_ms: int
    allocated_milli_ms: int
    used_milli_ms: int
    idle_milli_ms: int
    cost_micro: int
    currency: str
    projects: tuple[tuple[str, int, int], ...] = ()
    kind: str = "gpu"
    """"gpu", or "npu": ``gpu_model`` is then an NPU model and the times are milli-NPU x ms."""
    samples: int = 0
    """Usage samples that measured the bucket (0: no used share to tell, not an idle one)."""


@dataclass(frozen=True, slots=True)
class HeldRow:
    """A run still holding GPUs (placed or running): ``gpu_milli`` of a model since ``placed_ms``; or, of
    ``kind`` "npu", its NPUs (1000 each) of an NPU model."""

    tenant: str
    project: str
    cluster: str
    gpu_model: str
    placed_ms: int
    gpu_milli: int
    kind: str = "gpu"


@dataclass(frozen=True, slots=True)
class JobRow:
    job_id: str
    tenant: str
    project: str
    kind: str
    priority_class: str
    status: str
    submitted_ms: int | None
    placed_ms: int | None
    waiting_ms: int | None
    timeline: tuple[tuple[int, str, str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class QuotaRow:
    tenant: str
    queue: str
    resource: str
    gpu_model: str | None
    used: int
    guaranteed: int
    limit: int | None


@dataclass(frozen=True, slots=True)
class FindingRow:
    time_ms: int
    kind: str
    rule: str
    tenant: str | None
    subject: str
    message: str


@dataclass(frozen=True, slots=True)
class Money:
    micro: int
    currency: str


@dataclass
class Report:
    since_ms: int
    until_ms: int
    #: The whole hours the usage figures cover: the period widened to hour boundaries.
    usage_since_ms: int = 0
    usage_until_ms: int = 0
    utilisation: list[dict[str, object]] = field(default_factory=list)
    npu_usage: list[dict[str, object]] = field(default_factory=list)
    """NPU-hours held and used (utilisation), and those of finished runs with their cost, per cluster x NPU
    model."""
    npu_idle: list[dict[str, object]] = field(default_factory=list)
    """Idle allocated NPU-hours per tenant."""
    cost_by_tenant: list[dict[str, object]] = field(default_factory=list)
    cost_by_project: list[dict[str, object]] = field(default_factory=list)
    idle: list[dict[str, object]] = field(default_factory=list)
    waiting: list[dict[str, object]] = field(default_factory=list)
    wait_reasons: list[dict[str, object]] = field(default_factory=list)
    interruptions: list[dict[str, object]] = field(default_factory=list)
    inference: list[dict[str, object]] = field(default_factory=list)
    quota: list[dict[str, object]] = field(default_factory=list)
    budgets: list[dict[str, object]] = field(default_factory=list)
    """Each GPU-hour budget in its window as of the report's time (``projections.readmodel.budgets``)."""
    impact: list[dict[str, object]] = field(default_factory=list)
    findings: list[dict[str, object]] = field(default_factory=list)
    hourly: list[dict[str, object]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def tables(self) -> list[tuple[str, list[dict[str, object]]]]:
        """Every table of the report by its attribute's name, in the order of ``TABLES``."""
        return [(name, getattr(self, name)) for name in TABLES]


#: The report's tables (each a list of rows with the same keys), as ``Report.tables`` gives them.
TABLES = (
    "impact",
    "utilisation",
    "npu_usage",
    "cost_by_tenant",
    "cost_by_project",
    "idle",
    "npu_idle",
    "waiting",
    "wait_reasons",
    "interruptions",
    "inference",
    "quota",
    "budgets",
    "findings",
    "hourly",
)


def gpu_hours(milli_ms: int) -> float:
    return round(milli_ms / 1000 / HOUR_MS, 3)


def build(
    since_ms: int,
    until_ms: int,
    usage: Sequence[UsageRow],
    jobs: Sequence[JobRow],
    quota: Sequence[QuotaRow],
    findings: Sequence[FindingRow],
    held: Sequence[HeldRow] = (),
    now_ms: int | None = None,
) -> Report:
    """The report of ``since_ms`` .. ``until_ms``; ``now_ms`` (default: the period's end) bounds the time
    counted for the runs in ``held``, which hold GPUs now and have no end yet."""
    usage_since, usage_until = whole_hours(since_ms, until_ms)
    usage = sorted((u for u in usage if usage_since <= u.hour_ms < usage_until), key=_usage_key)
    held_until = min(usage_until, until_ms if now_ms is None else now_ms)
    # GPU and NPU time are counted apart (an NPU-hour is not a GPU-hour): utilisation, idle and impact
    # of GPUs, npu_usage and npu_idle of NPUs, and both in the cost tables.
    to_date = with_held(
        [u for u in usage if u.kind == "gpu"], [h for h in held if h.kind == "gpu"], usage_since, held_until
    )
    npu_to_date = with_held(
        [u for u in usage if u.kind == "npu"], [h for h in held if h.kind == "npu"], usage_since, held_until, "npu"
    )
    jobs = sorted((j for j in jobs if _in_period(j, since_ms, until_ms)), key=lambda j: j.job_id)
    report = Report(since_ms, until_ms, usage_since, usage_until)
    report.utilisation = utilisation(to_date)
    report.npu_usage = npu_usage(usage, npu_to_date)
    report.npu_idle = npu_idle(npu_to_date)
    report.cost_by_tenant, report.cost_by_project = cost(usage)
    report.idle = idle(to_date)
    report.hourly = hourly(to_date)
    report.waiting = waiting(jobs, until_ms)
    report.wait_reasons = wait_reasons(jobs)
    report.interruptions = interruptions(jobs, since_ms, until_ms)
    report.inference = inference(jobs, since_ms, until_ms)
    report.quota = [_quota(q) for q in sorted(quota, key=lambda q: (q.tenant, q.queue, q.resource, q.gpu_model or ""))]
    kept = sorted((f for f in findings if since_ms <= f.time_ms < until_ms), key=lambda f: (f.time_ms, f.subject))
    report.findings = [_finding(f) for f in kept]
    report.impact = impact(report, to_date, jobs, kept)
    report.notes = [
        f"Utilisation, cost, idle and hourly figures cover whole hours, {format_time(usage_since)} .. "
        f"{format_time(usage_until)}: usage is kept per hour, so an hour the period touches is counted "
        "whole, as longer reports count it; the other figures cover the period itself.",
        "Allocated, used and idle GPU time count every run in those hours, running ones too (up to now if the "
        "hours end later); idle is an hour's allocated minus used, never below zero. Cost and "
        "the GPU-hours beside it count finished runs (a run is priced when it ends).",
        "GPUs no usage report measured in the period (a cluster whose connector reads no usage, such as a "
        'Kubernetes cluster without the DCGM exporter) have "no usage data", not 0% used: idle time and '
        "used shares count the GPUs measured, and the idle table gives the rest as unmeasured GPU-hours.",
        "NPU-hours count NPU time apart from GPU time (an NPU-hour is not a GPU-hour: GPU-hour budgets do "
        "not count it): held, used and idle as GPU time is, and finished runs' priced at the cluster's rate "
        "for the NPU model. NPUs no usage report measured (a connector that cannot read them) have "
        '"no usage data", not 0%.',
        "Quota usage is a percentage of the limit, and of the guarantee: an unbounded quota has no limit to "
        "be a percentage of.",
        "Inference disruption is per job: minutes an inference job was down after it first started (replicas "
        "start and stop together in the reported facts; partial replica loss is not reported; a service "
        "spread over clusters is down only once its run closes, one cluster's part ending leaves it up).",
    ]
    return report


def whole_hours(since_ms: int, until_ms: int) -> tuple[int, int]:
    """The period widened to hour boundaries: the first hour it touches to the end of the last."""
    return since_ms - since_ms % HOUR_MS, until_ms + (-until_ms) % HOUR_MS


def _usage_key(u: UsageRow) -> tuple[str, str, str, str, int]:
    return (u.tenant, u.cluster, u.kind, u.gpu_model, u.hour_ms)


def with_held(
    usage: Sequence[UsageRow], held: Iterable[HeldRow], since_ms: int, until_ms: int, kind: str = "gpu"
) -> list[UsageRow]:
    """The usage buckets plus the GPU time of runs still holding GPUs, from their placement (or the
    period's start) to the period's end, split into the same tenant x cluster x model x hour buckets.

    A run costs the same whatever its length: its partial first and last hours are added at once, and
    its whole hours as a change of rate at their start and end (per tenant x cluster x model), summed
    over the period's hours once per such key, not once per run."""
    extra: dict[tuple[str, str, str, int], int] = defaultdict(int)
    # (tenant, cluster, model) -> hour -> change there of (milli-GPU per whole hour, runs counting it)
    steps: dict[tuple[str, str, str], dict[int, list[int]]] = defaultdict(dict)
    last = until_ms - until_ms % HOUR_MS  # the hour the period ends in
    for run in held:
        start = max(run.placed_ms, since_ms)
        if start >= until_ms or not run.gpu_milli:  # a run of NPUs alone holds no GPU time
            continue
        key = (run.tenant, run.cluster, run.gpu_model)
        first = start - start % HOUR_MS
        first_end = min(until_ms, first + HOUR_MS)
        extra[(*key, first)] += run.gpu_milli * (first_end - start)
        if first_end == until_ms:
            continue
        if first + HOUR_MS < last:  # whole hours from the second to the period's last
            for hour, sign in ((first + HOUR_MS, 1), (last, -1)):
                change = steps[key].setdefault(hour, [0, 0])
                change[0] += sign * run.gpu_milli
                change[1] += sign
        if until_ms > last:
            extra[(*key, last)] += run.gpu_milli * (until_ms - last)
    for key, changes in steps.items():
        rate = count = 0
        hours = sorted(changes)
        for hour, following in zip(hours, [*hours[1:], hours[-1]], strict=True):
            rate, count = rate + changes[hour][0], count + changes[hour][1]
            if count:
                for each in range(hour, following, HOUR_MS):
                    extra[(*key, each)] += rate * HOUR_MS
    merged = []
    for u in usage:
        more = extra.pop((u.tenant, u.cluster, u.gpu_model, u.hour_ms), 0)
        a = u.allocated_milli_ms + more
        merged.append(replace(u, allocated_milli_ms=a, idle_milli_ms=max(0, a - u.used_milli_ms)))
    merged += [UsageRow(t, c, m, h, a, 0, a, 0, "", kind=kind) for (t, c, m, h), a in extra.items()]
    return sorted(merged, key=_usage_key)


def _in_period(job: JobRow, since_ms: int, until_ms: int) -> bool:
    submitted = job.submitted_ms or 0
    last = max((e[0] for e in job.timeline), default=submitted)
    return submitted < until_ms and last >= since_ms


def measured(u: UsageRow) -> bool:
    """Whether a usage report measured the bucket's devices: it counts samples, or has used time, which
    only samples give (rows kept before samples were counted have used time and no count)."""
    return u.samples > 0 or u.used_milli_ms > 0


def measured_models(usage: Iterable[UsageRow]) -> set[tuple[str, str]]:
    """The (cluster, model) pairs some usage report measured in the period: a cluster whose connector
    reports no usage for a model (a Kubernetes cluster without a DCGM exporter) is not among them, so
    its allocation is "no usage data", not idle."""
    return {(u.cluster, u.gpu_model) for u in usage if measured(u)}


def utilisation(usage: Iterable[UsageRow]) -> list[dict[str, object]]:
    """Per cluster x GPU model: GPU-hours allocated, used and idle, and the used share ("no usage data"
    when no usage report measured those GPUs in the period)."""
    usage = list(usage)
    seen = measured_models(usage)
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for u in usage:
        row = sums[(u.cluster, u.gpu_model)]
        row[0] += u.allocated_milli_ms
        row[1] += u.used_milli_ms
        row[2] += u.idle_milli_ms
    return [
        {
            "cluster": cluster,
            "gpu_model": model,
            "allocated_gpu_h": gpu_hours(a),
            "used_gpu_h": gpu_hours(used) if (cluster, model) in seen else NO_USAGE_DATA,
            "idle_gpu_h": gpu_hours(i) if (cluster, model) in seen else NO_USAGE_DATA,
            "used_pct": _pct(used, a) if (cluster, model) in seen else NO_USAGE_DATA,
        }
        for (cluster, model), (a, used, i) in sorted(sums.items())
    ]


def npu_usage(usage: Iterable[UsageRow], to_date: Iterable[UsageRow] = ()) -> list[dict[str, object]]:
    """Per cluster x NPU model: NPU-hours held (running runs too: ``to_date``), used and idle, the used
    share ("no usage data" when no report measured those NPUs), and finished runs' NPU-hours and cost
    (each currency a row of its own)."""
    held: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for u in to_date:
        row = held[(u.cluster, u.gpu_model)]
        row[0] += u.allocated_milli_ms
        row[1] += u.used_milli_ms
        row[2] += u.idle_milli_ms
        row[3] += u.samples
    priced: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(dict)
    for u in usage:
        if u.kind == "npu":
            sums = priced[(u.cluster, u.gpu_model)].setdefault(u.currency, [0, 0])
            sums[0] += u.allocated_milli_ms
            sums[1] += u.cost_micro
    rows: list[dict[str, object]] = []
    for key in sorted(set(held) | set(priced)):
        a, used, i, samples = held.get(key, [0, 0, 0, 0])
        for currency, (finished, micro) in _merged(priced.get(key, {})) or [("", [0, 0])]:
            rows.append(
                {
                    "cluster": key[0],
                    "npu_model": key[1],
                    "allocated_npu_h": gpu_hours(a),
                    "used_npu_h": gpu_hours(used) if samples else NO_USAGE_DATA,
                    "idle_npu_h": gpu_hours(i) if samples else NO_USAGE_DATA,
                    "used_pct": _pct(used, a) if samples else NO_USAGE_DATA,
                    "npu_h": gpu_hours(finished),
                    "cost_micro": micro,
                    "cost": micro / 1e6,
                    "currency": currency,
                }
            )
    return rows


def npu_idle(usage: Iterable[UsageRow]) -> list[dict[str, object]]:
    """Idle allocated NPU-hours per tenant ("no usage data" for a tenant none of whose NPUs was measured)."""
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for u in usage:
        sums[u.tenant][0] += u.idle_milli_ms
        sums[u.tenant][1] += u.allocated_milli_ms
        sums[u.tenant][2] += u.samples
    return [
        {
            "tenant": t,
            "idle_npu_h": gpu_hours(i) if n else NO_USAGE_DATA,
            "allocated_npu_h": gpu_hours(a),
            "idle_pct": _pct(i, a) if n else NO_USAGE_DATA,
        }
        for t, (i, a, n) in sorted(sums.items())
    ]


def cost(usage: Iterable[UsageRow]) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """GPU-hours, NPU-hours and their cost per tenant and per project (each currency a row of its own)."""
    tenants: dict[str, dict[str, list[int]]] = defaultdict(dict)
    projects: dict[tuple[str, str], dict[str, list[int]]] = defaultdict(dict)
    for u in usage:
        npu = u.kind == "npu"
        _add(tenants[u.tenant], u.currency, u.allocated_milli_ms, u.cost_micro, npu=npu)
        for project, allocated, micro in u.projects:
            _add(projects[(u.tenant, project)], u.currency, allocated, micro, npu=npu)
    by_tenant = [
        {"tenant": t, **_money(cur, sums)} for t, money in sorted(tenants.items()) for cur, sums in _merged(money)
    ]
    by_project = [
        {"tenant": t, "project": p, **_money(cur, sums)}
        for (t, p), money in sorted(projects.items())
        for cur, sums in _merged(money)
    ]
    return by_tenant, by_project


def _money(currency: str, sums: list[int]) -> dict[str, object]:
    gpu, npu, micro = sums
    return {
        "gpu_h": gpu_hours(gpu),
        "npu_h": gpu_hours(npu),
        "cost_micro": micro,
        "cost": micro / 1e6,
        "currency": currency,
    }


def _add(money: dict[str, list[int]], currency: str, allocated: int, micro: int, *, npu: bool) -> None:
    sums = money.setdefault(currency, [0, 0, 0])
    sums[1 if npu else 0] += allocated
    sums[2] += micro


def _merged(money: dict[str, list[int]]) -> list[tuple[str, list[int]]]:
    """Buckets with no price yet (usage samples only: no currency) join the tenant's one currency."""
    priced = sorted(c for c in money if c)
    if "" not in money or len(priced) != 1:
        return sorted(money.items())
    joined = [a + b for a, b in zip(money[priced[0]], money[""], strict=True)]
    return [(priced[0], joined)]


def idle(usage: Iterable[UsageRow]) -> list[dict[str, object]]:
    """Idle allocated GPU-hours per tenant, of the GPUs usage reports measured (``idle_pct`` a share of
    their allocation); ``unmeasured_gpu_h``: the tenant's allocation of GPUs no report measured (in a
    cluster reporting no usage), neither idle nor busy ("no usage data" when that is all it had)."""
    usage = list(usage)
    seen = measured_models(usage)
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for u in usage:
        if (u.cluster, u.gpu_model) in seen:
            sums[u.tenant][0] += u.idle_milli_ms
            sums[u.tenant][1] += u.allocated_milli_ms
        else:
            sums[u.tenant][2] += u.allocated_milli_ms
    return [
        {
            "tenant": t,
            "idle_gpu_h": gpu_hours(i) if a else NO_USAGE_DATA,
            "allocated_gpu_h": gpu_hours(a + unmeasured),
            "idle_pct": _pct(i, a) if a else NO_USAGE_DATA,
            "unmeasured_gpu_h": gpu_hours(unmeasured),
        }
        for t, (i, a, unmeasured) in sorted(sums.items())
    ]


def hourly(usage: Iterable[UsageRow]) -> list[dict[str, object]]:
    sums: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for u in usage:
        sums[u.hour_ms][0] += u.allocated_milli_ms
        sums[u.hour_ms][1] += u.used_milli_ms
    return [
        {"hour_ms": h, "allocated_gpu_h": gpu_hours(a), "used_gpu_h": gpu_hours(u)}
        for h, (a, u) in sorted(sums.items())
    ]


def percentile(values: Sequence[int], pct: int) -> int:
    """Nearest-rank percentile of integers (0 for no values)."""
    if not values:
        return 0
    ordered = sorted(values)
    rank = max(1, -(-pct * len(ordered) // 100))
    return ordered[rank - 1]


def _waits(jobs: Iterable[JobRow], until_ms: int) -> dict[str, list[int]]:
    waits: dict[str, list[int]] = defaultdict(list)
    for job in jobs:
        if job.submitted_ms is None or job.status == JobStatus.REJECTED:
            continue
        if job.waiting_ms is not None and job.placed_ms is not None:
            waits[job.priority_class].append(job.waiting_ms)
        elif job.status == JobStatus.QUEUED:
            waits[job.priority_class].append(max(0, until_ms - job.submitted_ms))
    return waits


def waiting(jobs: Iterable[JobRow], until_ms: int) -> list[dict[str, object]]:
    return [
        {
            "priority_class": pc,
            "jobs": len(w),
            "p50_min": _minutes(percentile(w, 50)),
            "p90_min": _minutes(percentile(w, 90)),
            "p99_min": _minutes(percentile(w, 99)),
            "max_min": _minutes(max(w)),
        }
        for pc, w in sorted(_waits(jobs, until_ms).items())
    ]


def wait_reasons(jobs: Iterable[JobRow], top: int = 10) -> list[dict[str, object]]:
    counts: Counter[str] = Counter()
    for job in jobs:
        reasons = {r for e in job.timeline if e[2] == "JobQueued" for r in e[3].split(",") if r}
        counts.update(reasons)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return [{"reason": reason, "jobs": n} for reason, n in ranked]


def _run_ends(job: JobRow, since_ms: int, until_ms: int) -> list[str]:
    return [
        e[3]
        for e in job.timeline
        if since_ms <= e[0] < until_ms and e[2] in ("JobPreempted", "JobReclaimed", "JobFailed")
    ]


def interruptions(jobs: Iterable[JobRow], since_ms: int, until_ms: int) -> list[dict[str, object]]:
    sums: dict[str, Counter[str]] = defaultdict(Counter)
    for job in jobs:
        counter = sums[job.tenant]
        for reason in _run_ends(job, since_ms, until_ms):
            if reason == "Preempted":
                counter["preemptions"] += 1
            elif reason == "Reclaimed":
                counter["reclaims"] += 1
            elif reason in INTERRUPTIONS:
                counter["other"] += 1
            else:
                counter["failures"] += 1
            if reason in INTERRUPTIONS and job.kind in TRAINING_KINDS:
                counter["training_interruptions"] += 1
    return [
        {
            "tenant": t,
            "preemptions": c["preemptions"],
            "reclaims": c["reclaims"],
            "infrastructure": c["other"],
            "training_interruptions": c["training_interruptions"],
            "job_failures": c["failures"],
        }
        for t, c in sorted(sums.items())
    ]


def not_running_ms(job: JobRow, since_ms: int, until_ms: int) -> int:
    """Time in the period the job was not running after it first started, until it ended: restarts after
    a preemption, reclaim or failure. The wait before the first start is counted as queueing delay."""
    down, stopped_at = 0, None
    started = False
    for time_ms, status, *_ in job.timeline:
        at = min(max(time_ms, since_ms), until_ms)
        if status == JobStatus.RUNNING:
            if stopped_at is not None:
                down += at - stopped_at
            started, stopped_at = True, None
        elif status in FINAL_STATUSES:
            if stopped_at is not None:
                down += at - stopped_at
            return down
        elif started and stopped_at is None:
            stopped_at = at
    if stopped_at is not None:
        down += until_ms - stopped_at
    return down


def inference(jobs: Iterable[JobRow], since_ms: int, until_ms: int) -> list[dict[str, object]]:
    sums: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for job in jobs:
        if job.kind == "inference":
            sums[job.tenant][0] += 1
            sums[job.tenant][1] += not_running_ms(job, since_ms, until_ms)
    return [
        {"tenant": t, "inference_jobs": n, "minutes_below_min_replicas": _minutes(ms)}
        for t, (n, ms) in sorted(sums.items())
    ]


def _quota(q: QuotaRow) -> dict[str, object]:
    return {
        "tenant": q.tenant,
        "queue": q.queue,
        "resource": q.resource + (f":{q.gpu_model}" if q.gpu_model else ""),
        "used": q.used,
        "guaranteed": q.guaranteed,
        "limit": "unbounded" if q.limit is None else q.limit,
        "used_pct_of_guarantee": _pct(q.used, q.guaranteed) if q.guaranteed else None,
        "used_pct_of_limit": _pct(q.used, q.limit) if q.limit else None,
    }


def _finding(f: FindingRow) -> dict[str, object]:
    return {
        "time_ms": f.time_ms,
        "kind": f.kind,
        "rule": f.rule,
        "tenant": f.tenant or "",
        "subject": f.subject,
        "message": f.message[:160],
    }


def impact(
    report: Report, usage: Sequence[UsageRow], jobs: Sequence[JobRow], kept: Sequence[FindingRow]
) -> list[dict[str, object]]:
    """Per tenant: how full (used share of allocation) beside how it felt (waiting, interruptions, outages)."""
    waits: dict[str, list[int]] = defaultdict(list)
    for job in jobs:
        for values in _waits([job], report.until_ms).values():
            waits[job.tenant] += values
    seen = measured_models(usage)
    alloc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for u in usage:
        alloc[u.tenant][0] += u.allocated_milli_ms
        if (u.cluster, u.gpu_model) in seen:  # the used share is of the GPUs measured
            alloc[u.tenant][1] += u.used_milli_ms
            alloc[u.tenant][2] += u.allocated_milli_ms
    breaks = {str(r["tenant"]): r for r in report.interruptions}
    outage = {str(r["tenant"]): r["minutes_below_min_replicas"] for r in report.inference}
    found = Counter(f.tenant or "" for f in kept)
    tenants = sorted(set(waits) | set(alloc) | set(breaks) | set(outage))
    rows: list[dict[str, object]] = []
    for t in tenants:
        a, used, of_measured = alloc.get(t, [0, 0, 0])
        row = breaks.get(t, {})
        rows.append(
            {
                "tenant": t,
                "allocated_gpu_h": gpu_hours(a),
                "used_pct": _pct(used, of_measured) if of_measured or not a else NO_USAGE_DATA,
                "wait_p90_min": _minutes(percentile(waits.get(t, []), 90)),
                "training_interruptions": row.get("training_interruptions", 0),
                "preemptions": row.get("preemptions", 0),
                "inference_down_min": outage.get(t, 0),
                "findings": found.get(t, 0),
            }
        )
    return rows


def _pct(part: int, whole: int) -> float:
    return round(100 * part / whole, 1) if whole else 0.0


def _minutes(ms: int) -> float:
    return round(ms / 60_000, 1)
