"""Abnormal jobs and nodes: crash loops, jobs stuck pending, suspect nodes, straggling gangs.

Called by ``services.governance.core.rules.evaluate``. Pure. Each detector returns ``GovernanceFinding``
outputs whose ids are derived from the facts that triggered them, so each is reported once:

- ``crash-loop``: ``crash_loop_failures`` failed runs of one tenant's job name (a job's runs, or a
  pipeline resubmitting it) within ``crash_loop_window_ms``; flagged again only after a quiet window.
- ``stuck-pending``: a job waiting longer than ``stuck_pending_ms``, with the reasons of its last
  ``JobQueued``.
- ``suspect-node``: ``suspect_node_failures`` distinct workloads (tenant and job name) that failed within
  ``suspect_node_fast_fail_ms`` of their start (or placement) on the same node within
  ``suspect_node_window_ms``; carries the
  ``profile_penalty_milli`` the scheduler may take off the node's score.
- ``straggling-gang``: a running gang whose least busy node's utilisation is under
  ``straggler_ratio_pct`` of its busiest's, in the latest round of usage samples (a run spread over
  clusters: within one part, the finding naming its cluster).
"""

from __future__ import annotations

from collections import Counter
from typing import cast

from events.catalog.governance import Figure, FindingKind, GovernanceFinding
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, JobId, NodeId, TenantId
from services.governance.core.config import AbnormalRules, GovConfig
from services.governance.core.facts import RunFacts
from services.governance.core.failures import Entry
from services.governance.core.state import GovState, Output, derived_id

Failure = tuple[int, str, int, str, str]  # (ended ms, job id or workload, run, cluster, node)


def findings(state: GovState, config: GovConfig) -> list[Output]:
    rules = config.abnormal
    out = crash_loops(state, rules) + stuck_pending(state, rules) + suspect_nodes(state, rules)
    out += straggling_gangs(state, rules)
    return [o for o in out if o.id not in state.emitted]


def crash_loops(state: GovState, rules: AbnormalRules) -> list[Output]:
    threshold, window = rules.crash_loop_failures, rules.crash_loop_window_ms
    out = []
    groups = state.workload_failures.triggers_by_group(
        (threshold, window), lambda failures: _streaks(failures, threshold, window)
    )
    for group, triggers in groups:
        tenant, name = cast(tuple[str, str], group)
        for trigger, count in triggers:
            ended, job_id, run_no, cluster, node = trigger
            key = f"gov:finding:crash-loop:{job_id}:{run_no}"
            if key in state.emitted:  # published before: not built again every step
                continue
            figures = (
                Figure(name="failures", value=count),
                Figure(name="window_ms", value=rules.crash_loop_window_ms),
                Figure(name="threshold", value=rules.crash_loop_failures),
            )
            message = f"{name!r} failed {count} times within {rules.crash_loop_window_ms // 60_000} min"
            finding = GovernanceFinding(
                finding_id=derived_id("crash-loop", job_id, run_no),
                kind=FindingKind.CRASH_LOOP,
                rule="crash-loop",
                reason=ReasonCode.CRASH_LOOP,
                tenant=TenantId(tenant),
                job_id=JobId(job_id),
                cluster=ClusterId(cluster),
                node=NodeId(node) if node else None,
                figures=figures,
                observed_ms=ended,
                message=message,
            )
            out.append(Output(key, state.now_ms, finding))
    return out


def _streaks(
    failures: list[Failure], threshold: int, window_ms: int, *, distinct: bool = False
) -> list[tuple[Failure, int]]:
    """The failures at which ``threshold`` failures (of distinct jobs, with ``distinct``) fell within the
    window ending there; at most one per window."""
    triggers: list[tuple[Failure, int]] = []
    quiet_until = -1
    first = 0  # the window is failures[first : i + 1]: times only grow, so it only slides forward
    jobs: Counter[str] = Counter()
    for i, failure in enumerate(failures):
        jobs[failure[1]] += 1
        while first <= i and failures[first][0] <= failure[0] - window_ms:
            jobs[failures[first][1]] -= 1
            if not jobs[failures[first][1]]:
                del jobs[failures[first][1]]
            first += 1
        count = len(jobs) if distinct else i + 1 - first
        if count >= threshold and failure[0] > quiet_until:
            triggers.append((failure, count))
            quiet_until = failure[0] + window_ms
    return triggers


def stuck_pending(state: GovState, rules: AbnormalRules) -> list[Output]:
    out = []
    for job_id in sorted(state.active):
        facts = state.jobs[job_id]
        waited = state.now_ms - facts.submitted_ms
        if facts.spec is None or not facts.pending() or waited < rules.stuck_pending_ms:
            continue
        reasons = ",".join(facts.queued_reasons) or "not yet explained by the scheduler"
        finding = GovernanceFinding(
            finding_id=derived_id("stuck-pending", job_id),
            kind=FindingKind.STUCK_PENDING,
            rule="stuck-pending",
            reason=ReasonCode.STUCK_PENDING,
            tenant=TenantId(facts.spec.tenant),
            job_id=JobId(job_id),
            figures=(Figure(name="waited_ms", value=waited), Figure(name="threshold_ms", value=rules.stuck_pending_ms)),
            observed_ms=state.now_ms,
            message=f"waiting {waited // 60_000} min: {reasons}. {facts.queued_message}"[:4096],
        )
        out.append(Output(f"gov:finding:stuck:{job_id}", state.now_ms, finding))
    return out


def suspect_nodes(state: GovState, rules: AbnormalRules) -> list[Output]:
    threshold, window, fast = rules.suspect_node_failures, rules.suspect_node_window_ms, rules.suspect_node_fast_fail_ms

    def compute(entries: list[Entry]) -> list[tuple[Failure, int]]:
        # Counted by workload (tenant and name): one job crash-looping on a node blames the job.
        fast_failures = [cast(Failure, e[:5]) for e in entries if e[5] <= fast]
        return _streaks(fast_failures, threshold, window, distinct=True)

    out = []
    for group, streaks in state.node_failures.triggers_by_group((threshold, window, fast), compute):
        cluster, node = cast(tuple[str, str], group)
        for trigger, count in streaks:
            key = f"gov:finding:suspect-node:{cluster}/{node}:{trigger[0]}"
            if key not in state.emitted:  # published before: not built again every step
                out.append(Output(key, state.now_ms, _suspect(cluster, node, count, trigger[0], rules)))
    return out


def _suspect(cluster: str, node: str, jobs: int, at: int, rules: AbnormalRules) -> GovernanceFinding:
    return GovernanceFinding(
        finding_id=derived_id("suspect-node", cluster, node, at),
        kind=FindingKind.SUSPECT_NODE,
        rule="suspect-node",
        reason=ReasonCode.SUSPECT_NODE,
        cluster=ClusterId(cluster),
        node=NodeId(node),
        figures=(
            Figure(name="jobs_failed", value=jobs),
            Figure(name="window_ms", value=rules.suspect_node_window_ms),
            Figure(name="fast_fail_ms", value=rules.suspect_node_fast_fail_ms),
        ),
        profile_penalty_milli=rules.suspect_node_penalty_milli,
        observed_ms=at,
        message=f"{jobs} jobs failed within {rules.suspect_node_fast_fail_ms // 60_000} min of starting on "
        f"{cluster}/{node}; check the node (profile score lowered by {rules.suspect_node_penalty_milli} milli)",
    )


def straggling_gangs(state: GovState, rules: AbnormalRules) -> list[Output]:
    out = []
    for job_id in sorted(state.active):
        facts = state.jobs[job_id]
        run = facts.live_run()
        if facts.spec is None or not facts.spec.gang or run is None:
            continue
        # A spread run's parts are judged each on its own nodes (replicas in two clusters are not compared).
        for holding in run.holdings():
            finding = _straggler(facts.spec.tenant, job_id, run.run, holding, rules, state.now_ms, bool(run.parts))
            if finding is not None:
                out.append(Output(finding[0], state.now_ms, finding[1]))
    return out


def _straggler(
    tenant: str, job_id: str, run_no: int, run: RunFacts, rules: AbnormalRules, now: int, spread: bool
) -> tuple[str, GovernanceFinding] | None:
    """The finding of a straggler among ``run``'s nodes (with ``spread``: a part of run ``run_no``)."""
    latest = _latest_per_node(run)
    if len(latest) < 2:
        return None
    slowest = min(latest.items(), key=lambda kv: (kv[1], kv[0]))
    busiest = max(latest.values())
    if busiest < rules.straggler_min_busy_pct or slowest[1] * 100 >= rules.straggler_ratio_pct * busiest:
        return None
    ids = (job_id, run_no, run.cluster) if spread else (job_id, run_no)
    where = f" of its part in {run.cluster}" if spread else ""
    finding = GovernanceFinding(
        finding_id=derived_id("straggling-gang", *ids),
        kind=FindingKind.STRAGGLING_GANG,
        rule="straggling-gang",
        reason=ReasonCode.STRAGGLING_GANG,
        tenant=TenantId(tenant),
        job_id=JobId(job_id),
        cluster=ClusterId(run.cluster),
        node=NodeId(slowest[0]),
        figures=(
            Figure(name="slowest_pct", value=slowest[1]),
            Figure(name="busiest_pct", value=busiest),
            Figure(name="ratio_threshold_pct", value=rules.straggler_ratio_pct),
        ),
        observed_ms=now,
        message=f"replica on {slowest[0]} at {slowest[1]}% while the busiest{where} is at {busiest}% "
        f"(utilisation of its {run.devices})",
    )
    return "gov:finding:straggler:" + ":".join(str(i) for i in ids), finding


def _latest_per_node(run: RunFacts) -> dict[str, int]:
    if run.ended_ms is not None or not run.samples or len(run.nodes) < 2:
        return {}
    last = run.samples[-1]
    recent = [s for s in run.samples if s.end_ms > last.end_ms - last.window_ms]
    return {s.node: s.utilisation_pct for s in recent}
