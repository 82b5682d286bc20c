"""Reclamation rules: idle jobs (warn, then reclaim), jobs past their maximum runtime, stale allocations.

Called by ``services.governance.core.rules.evaluate``. Pure: every time is log time from ``GovState`` and
every output id is derived from the facts, so the same log gives the same actions.

- Idle (per job kind, ``IdleRule``): the trailing stretch of usage samples under ``threshold_pct`` (of the
  accelerators the run holds: GPUs, NPUs, or the busier kind of a run that holds both); once
  it is ``idle_after_ms`` long a ``JobIdleWarning`` says when the reclaim comes; a sample at or after that
  moment still idle brings ``JobReclaimRequested`` (and a finding with the figures), preceded by a
  ``JobCancelRequested``: the scheduler must not place the job again once its run stops (sent only after
  the cluster reported ``JobReclaimed``, the cancel came after the scheduler had placed and the cluster
  started the notebook again).
- Runtime (``RuntimeRule``, or the job's own ``max_runtime_s``): a ``JobCancelRequested`` and a finding.
- Lease (``LeaseRule``): a run placed but never started within the start lease, or on a node removed or a
  cluster unreachable for the lost lease, gets a ``JobFailed`` (``AllocationLeaseExpired``) published on
  the cluster's behalf, which releases its allocation everywhere; and a finding.

A run spread over clusters (``services.governance.core.runs``) is judged part by part, each on its own
nodes and samples: an idle part is warned and reclaimed alone, and a part past its lease released alone,
each output naming the part's cluster (the reclaim and the ``JobFailed`` stop that part only); the job is
cancelled for idleness once every part still live is reclaimed. The runtime limit is the job's: counted
from the run's first start, its cancel stops every part.
"""

from __future__ import annotations

from events.catalog.decisions import JobReclaimRequested, ReclaimFigures
from events.catalog.governance import Figure, FindingKind, GovernanceFinding, JobIdleWarning
from events.catalog.jobs import JobCancelRequested, JobFailed
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, TenantId
from services.governance.core.config import GovConfig, IdleRule
from services.governance.core.facts import JobFacts, RunFacts
from services.governance.core.state import GovState, Output, derived_id


def reclaim_actions(state: GovState, config: GovConfig) -> list[Output]:
    out: list[Output] = []
    for job_id in sorted(state.active):
        facts = state.jobs[job_id]
        if facts.spec is None:
            continue
        for rule in config.idle:
            if facts.spec.kind.value == rule.kind:
                out += idle(state, facts, rule, config.principal)
        out += runtime(state, facts, config)
        out += lease(state, facts, config)
    return [o for o in out if o.id not in state.emitted]


def idle_stretch(run: RunFacts, threshold_pct: int) -> tuple[int, int, int] | None:
    """(idle since, last sample end, mean utilisation %) of the trailing samples under the threshold."""
    stretch = []
    for sample in reversed(run.samples):
        if sample.utilisation_pct >= threshold_pct:
            break
        stretch.append(sample)
    if not stretch:
        return None
    since = max(stretch[-1].end_ms - stretch[-1].window_ms, run.started_ms or 0)
    weight = sum(s.window_ms for s in stretch)
    mean = sum(s.utilisation_pct * s.window_ms for s in stretch) // max(1, weight)
    return since, stretch[0].end_ms, mean


def idle(state: GovState, facts: JobFacts, rule: IdleRule, principal: str) -> list[Output]:
    assert facts.spec is not None
    now = state.now_ms
    out: list[Output] = []
    for ended in sorted(facts.runs.values(), key=lambda r: r.run):
        # A reclaim recorded before the cancel went with it (older logs): the cancel now.
        reclaimed = ended.ended_how == "reclaimed" and ended.reclaim_rule == rule.name
        if reclaimed and facts.terminal is None and not facts.cancel_requested:
            out.append(_idle_cancel(facts, ended.run, rule, principal, now))
    run = facts.live_run()
    if run is None or facts.cancel_requested:
        return out
    if run.parts:
        return out + _idle_parts(state, facts, run, rule, principal)
    if run.started_ms is None:
        return out
    warned, reclaim = _idle_of(state, facts, run, rule, run.run)
    if not reclaim:
        return out + warned
    return [*out, *warned, _idle_cancel(facts, run.run, rule, principal, now), *reclaim]


def _idle_parts(state: GovState, facts: JobFacts, run: RunFacts, rule: IdleRule, principal: str) -> list[Output]:
    """A spread run's parts judged each on its own usage: an idle part is warned and reclaimed alone (the
    service lives on in its other clusters). Once every part still live is reclaimed by the rule, the
    service is idle as a whole, and its job is cancelled as a one-cluster run's is (not placed again)."""
    live = [part for part in run.parts.values() if part.ended_ms is None]
    out: list[Output] = []
    reclaims: list[Output] = []
    asked = 0
    for part in live:
        if part.reclaim_rule == rule.name:
            asked += 1
            continue
        if part.reclaim_rule is not None or part.started_ms is None:
            continue  # being stopped for another reason, or not started
        warned, reclaim = _idle_of(state, facts, part, rule, run.run, spread=True)
        out += warned
        if reclaim:
            reclaims += reclaim
            asked += 1
    if reclaims and asked == len(live):
        out.append(_idle_cancel(facts, run.run, rule, principal, state.now_ms))
    return out + reclaims


def _idle_of(
    state: GovState, facts: JobFacts, run: RunFacts, rule: IdleRule, run_no: int, *, spread: bool = False
) -> tuple[list[Output], list[Output]]:
    """The warning, then the reclaim and its finding, that ``run``'s idle stretch calls for now (with
    ``spread``, ``run`` is a part of run ``run_no``: each names the part's cluster)."""
    assert facts.spec is not None
    stretch = idle_stretch(run, rule.threshold_pct)
    if stretch is None:
        return [], []
    since, last, mean = stretch
    warn_at = since + rule.idle_after_ms
    if last < warn_at:
        return [], []
    now = state.now_ms
    reclaim_at = warn_at + rule.grace_ms
    tenant, cluster = TenantId(facts.spec.tenant), ClusterId(run.cluster)
    part = f"its part in {run.cluster}: " if spread else ""
    key = f"{facts.job_id}:{run_no}" + (f":{run.cluster}" if spread else "")
    warning = JobIdleWarning(
        job_id=JobId(facts.job_id),
        tenant=tenant,
        cluster=cluster,
        run=run_no,
        rule=rule.name,
        idle_since_ms=since,
        threshold_pct=rule.threshold_pct,
        mean_utilisation_pct=mean,
        idle_ms=last - since,
        reclaim_at_ms=reclaim_at,
        message=f"{part}{run.devices} under {rule.threshold_pct}% for {(last - since) // 60_000} min; "
        f"reclaimed in {rule.grace_ms // 60_000} min unless used",
    )
    warned = [Output(f"gov:idle-warn:{key}:{since}", now, warning)]
    if last < reclaim_at:
        return warned, []
    figures = (
        Figure(name="idle_ms", value=last - since),
        Figure(name="mean_utilisation_pct", value=mean),
        Figure(name="threshold_pct", value=rule.threshold_pct),
        Figure(name="grace_ms", value=rule.grace_ms),
        Figure(name="gpu_milli", value=run.gpu_milli),
        *((Figure(name="npus", value=run.npus),) if run.npus else ()),
    )
    # What stayed idle, by what the run holds: an NPU run's reclaim is not said to be about GPUs.
    idle = ReasonCode.IDLE_NPU if run.npus and not run.gpu_milli else ReasonCode.IDLE_GPU
    reclaim = JobReclaimRequested(
        job_id=JobId(facts.job_id),
        cycle_id=CycleId(f"governance-{rule.name}"),
        cluster=cluster,
        run=run_no,
        tenant=tenant,
        rule=rule.name,
        reason=idle,
        figures=ReclaimFigures(
            borrower_guaranteed_milli=0,
            borrower_used_milli=run.gpu_milli,
            lender=tenant,
            lender_guaranteed_milli=0,
            lender_used_milli=0,
            lender_pending_milli=0,
            reclaimed_milli=run.gpu_milli,
        ),
        message=f"{part}{_held(run)} idle for {(last - since) // 60_000} min at {mean}% mean utilisation "
        f"(rule {rule.name})",
    )
    kind = FindingKind.IDLE_RECLAIM
    finding = _finding(kind, rule.name, idle, facts, run, figures, now, reclaim.message, run_no, spread=spread)
    return warned, [Output(f"gov:idle-reclaim:{key}", now, reclaim), Output(f"gov:finding:idle:{key}", now, finding)]


def _held(run: RunFacts) -> str:
    """What the run holds, in words: "8 NPUs", "2 GPUs", "0.5 GPU and 1 NPU"."""
    gpus = f"{run.gpu_milli / 1000:g} GPU{'s' if run.gpu_milli > 1000 else ''}"
    npus = f"{run.npus} NPU{'s' if run.npus != 1 else ''}"
    if not run.gpu_milli:
        return npus if run.npus else "its run (no GPU or NPU)"
    return f"{gpus} and {npus}" if run.npus else gpus


def _idle_cancel(facts: JobFacts, run: int, rule: IdleRule, principal: str, now: int) -> Output:
    cancel = JobCancelRequested(
        job_id=JobId(facts.job_id), requester=principal, reason=f"{rule.name}: reclaimed while idle"
    )
    return Output(f"gov:idle-cancel:{facts.job_id}:{run}", now, cancel)


def runtime(state: GovState, facts: JobFacts, config: GovConfig) -> list[Output]:
    assert facts.spec is not None
    run = facts.live_run()
    if run is None or run.started_ms is None or facts.cancel_requested:
        return []
    limits = [(r.max_runtime_ms, r.name) for r in config.runtime if r.kind == facts.spec.kind.value]
    if facts.spec.max_runtime_s is not None:
        limits.append((facts.spec.max_runtime_s * 1000, "job-max-runtime"))
    if not limits:
        return []
    limit, name = min(limits)
    ran = state.now_ms - run.started_ms
    if ran < limit:
        return []
    message = f"ran {ran // 60_000} min, past the maximum of {limit // 60_000} min (rule {name})"
    cancel = JobCancelRequested(job_id=JobId(facts.job_id), requester=config.principal, reason=message)
    figures = (Figure(name="ran_ms", value=ran), Figure(name="max_runtime_ms", value=limit))
    finding = _finding(
        FindingKind.RUNTIME_EXCEEDED, name, ReasonCode.RUNTIME_EXCEEDED, facts, run, figures, state.now_ms, message
    )
    key = f"{facts.job_id}:{run.run}"
    now = state.now_ms
    return [Output(f"gov:runtime:{key}", now, cancel), Output(f"gov:finding:runtime:{key}", now, finding)]


def lease(state: GovState, facts: JobFacts, config: GovConfig) -> list[Output]:
    run = facts.live_run()
    if run is None:
        return []
    if not run.parts:
        return _lease_of(state, facts, run, config, run.run)
    # A spread run's parts hold each its own lease: one lost or never started is released alone.
    live = [part for part in run.parts.values() if part.ended_ms is None]
    return [out for part in live for out in _lease_of(state, facts, part, config, run.run, spread=True)]


def _lease_of(
    state: GovState, facts: JobFacts, run: RunFacts, config: GovConfig, run_no: int, *, spread: bool = False
) -> list[Output]:
    rule, now = config.lease, state.now_ms
    part = f"its part in {run.cluster} " if spread else ""
    figures: tuple[Figure, ...]
    if run.started_ms is None and now - run.placed_ms >= rule.start_lease_ms:
        figures = (
            Figure(name="placed_ago_ms", value=now - run.placed_ms),
            Figure(name="lease_ms", value=rule.start_lease_ms),
        )
        message = f"{part}placed {(now - run.placed_ms) // 60_000} min ago and never started; allocation released"
    else:
        lost = [state.lost_nodes.get((run.cluster, n)) for n in run.nodes] + [state.unreachable.get(run.cluster)]
        since = min((t for t in lost if t is not None), default=None)
        if since is None or now - since < rule.lost_lease_ms:
            return []
        figures = (Figure(name="lost_ago_ms", value=now - since), Figure(name="lease_ms", value=rule.lost_lease_ms))
        whose = f"the node or cluster of {part.strip()}" if spread else "its node or cluster"
        message = f"{whose} was lost {(now - since) // 60_000} min ago; allocation released"
    failed = JobFailed(
        job_id=JobId(facts.job_id),
        cluster=ClusterId(run.cluster),
        run=run_no,
        reason=ReasonCode.ALLOCATION_LEASE_EXPIRED,
        message=f"{message} (rule {rule.name})",
    )
    reason = ReasonCode.ALLOCATION_LEASE_EXPIRED
    kind = FindingKind.LEASE_EXPIRED
    finding = _finding(kind, rule.name, reason, facts, run, figures, now, message, run_no, spread=spread)
    key = f"{facts.job_id}:{run_no}" + (f":{run.cluster}" if spread else "")
    return [Output(f"gov:lease:{key}", now, failed), Output(f"gov:finding:lease:{key}", now, finding)]


def _finding(
    kind: FindingKind,
    rule: str,
    reason: ReasonCode,
    facts: JobFacts,
    run: RunFacts,
    figures: tuple[Figure, ...],
    now: int,
    message: str,
    run_no: int | None = None,
    *,
    spread: bool = False,
) -> GovernanceFinding:
    """A finding about ``run`` (with ``spread``: a part of run ``run_no``, named by its cluster)."""
    assert facts.spec is not None
    number = run.run if run_no is None else run_no
    ids = (facts.job_id, number, run.cluster) if spread else (facts.job_id, number)
    return GovernanceFinding(
        finding_id=derived_id(kind.value.replace("_", "-"), *ids),
        kind=kind,
        rule=rule,
        reason=reason,
        tenant=TenantId(facts.spec.tenant),
        job_id=JobId(facts.job_id),
        cluster=ClusterId(run.cluster),
        node=NodeId(run.nodes[0]) if run.nodes else None,
        figures=figures,
        observed_ms=now,
        message=message,
    )
