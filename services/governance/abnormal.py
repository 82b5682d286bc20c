"""Abnormal jobs and nodes: crash loops, jobs stuck pending, suspect nodes, straggling gangs.

Called by ``services.governance.rules.evaluate``. Pure. Each detector returns ``GovernanceFinding``
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
  ``straggler_ratio_pct`` of its busiest's, in the latest round of usage samples.
"""

from __future__ import annotations

from collections import defaultdict

from events.catalog.governance import Figure, FindingKind, GovernanceFinding
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, JobId, NodeId, TenantId
from services.governance.config import AbnormalRules, GovConfig
from services.governance.state import GovState, JobFacts, Output, derived_id

Failure = tuple[int, str, int, str, str]  # (ended ms, job id or workload, run, cluster, node)


def findings(state: GovState, config: GovConfig) -> list[Output]:
    rules = config.abnormal
    out = crash_loops(state, rules) + stuck_pending(state, rules) + suspect_nodes(state, rules)
    out += straggling_gangs(state, rules)
    return [o for o in out if o.id not in state.emitted]


def crash_loops(state: GovState, rules: AbnormalRules) -> list[Output]:
    by_name: dict[tuple[str, str], list[Failure]] = defaultdict(list)
    for facts in state.jobs.values():
        if facts.spec is None:
            continue
        for run in facts.runs.values():
            if run.ended_how == "failed" and run.ended_ms is not None:
                key = (facts.spec.tenant, facts.spec.name)
                by_name[key].append((run.ended_ms, facts.job_id, run.run, run.cluster, run.fail_node or ""))
    out = []
    for (tenant, name), failures in sorted(by_name.items()):
        for trigger, count in _streaks(sorted(failures), rules.crash_loop_failures, rules.crash_loop_window_ms):
            ended, job_id, run_no, cluster, node = trigger
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
            out.append(Output(f"gov:finding:crash-loop:{job_id}:{run_no}", state.now_ms, finding))
    return out


def _streaks(
    failures: list[Failure], threshold: int, window_ms: int, *, distinct: bool = False
) -> list[tuple[Failure, int]]:
    """The failures at which ``threshold`` failures (of distinct jobs, with ``distinct``) fell within the
    window ending there; at most one per window."""
    triggers: list[tuple[Failure, int]] = []
    quiet_until = -1
    for i, failure in enumerate(failures):
        window = [f for f in failures[: i + 1] if f[0] > failure[0] - window_ms]
        count = len({f[1] for f in window}) if distinct else len(window)
        if count >= threshold and failure[0] > quiet_until:
            triggers.append((failure, count))
            quiet_until = failure[0] + window_ms
    return triggers


def stuck_pending(state: GovState, rules: AbnormalRules) -> list[Output]:
    out = []
    for job_id in sorted(state.jobs):
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
    by_node: dict[tuple[str, str], list[Failure]] = defaultdict(list)
    for facts in state.jobs.values():
        for run in facts.runs.values():
            if run.ended_how != "failed" or run.ended_ms is None or not run.fail_node:
                continue
            if (
                facts.spec is not None
                and run.ended_ms - (run.started_ms or run.placed_ms) <= rules.suspect_node_fast_fail_ms
            ):
                # Counted by workload (tenant and name): one job crash-looping on a node blames the job.
                workload = f"{facts.spec.tenant}/{facts.spec.name}"
                by_node[(run.cluster, run.fail_node)].append(
                    (run.ended_ms, workload, run.run, run.cluster, run.fail_node)
                )
    out = []
    for (cluster, node), failures in sorted(by_node.items()):
        streaks = _streaks(sorted(failures), rules.suspect_node_failures, rules.suspect_node_window_ms, distinct=True)
        for trigger, count in streaks:
            finding = _suspect(cluster, node, count, trigger[0], rules)
            out.append(Output(f"gov:finding:suspect-node:{cluster}/{node}:{trigger[0]}", state.now_ms, finding))
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
    for job_id in sorted(state.jobs):
        facts = state.jobs[job_id]
        latest = _latest_per_node(facts)
        if facts.spec is None or not facts.spec.gang or len(latest) < 2:
            continue
        slowest = min(latest.items(), key=lambda kv: (kv[1], kv[0]))
        busiest = max(latest.values())
        if busiest < rules.straggler_min_busy_pct or slowest[1] * 100 >= rules.straggler_ratio_pct * busiest:
            continue
        run = facts.live_run()
        assert run is not None
        finding = GovernanceFinding(
            finding_id=derived_id("straggling-gang", job_id, run.run),
            kind=FindingKind.STRAGGLING_GANG,
            rule="straggling-gang",
            reason=ReasonCode.STRAGGLING_GANG,
            tenant=TenantId(facts.spec.tenant),
            job_id=JobId(job_id),
            cluster=ClusterId(run.cluster),
            node=NodeId(slowest[0]),
            figures=(
                Figure(name="slowest_pct", value=slowest[1]),
                Figure(name="busiest_pct", value=busiest),
                Figure(name="ratio_threshold_pct", value=rules.straggler_ratio_pct),
            ),
            observed_ms=state.now_ms,
            message=f"replica on {slowest[0]} at {slowest[1]}% while the busiest is at {busiest}%",
        )
        out.append(Output(f"gov:finding:straggler:{job_id}:{run.run}", state.now_ms, finding))
    return out


def _latest_per_node(facts: JobFacts) -> dict[str, int]:
    run = facts.live_run()
    if run is None or not run.samples or len(run.nodes) < 2:
        return {}
    last = run.samples[-1]
    recent = [s for s in run.samples if s.end_ms > last.end_ms - last.window_ms]
    return {s.node: s.utilisation_pct for s in recent}
