"""Governance end to end on ``fedsched up``'s components, real PostgreSQL and a simulated fleet.

One run tells four stories at once, each checked from the log and the read models:

- an idle notebook is warned (``JobIdleWarning``), then reclaimed (``JobReclaimRequested`` by the
  ``idle-notebook`` rule, with its cancel), stopped by the cluster and not placed again;
- a job that fails three times within the window (a pipeline resubmitting it) is flagged as a crash loop;
- a quota request above the auto-approve threshold waits; an operator approves it with
  ``fedsched gov quota approve`` through ``fedsched up``'s API, as the subject of their token;
  governance publishes the raised ``QuotaSet`` and the scheduler then places the job that the quota
  held back;
- the cost per tenant in ``fedsched gov report`` (through an API on the same database) equals a
  recomputation from the raw events (zero difference), after the read models have caught up with the
  whole log.
"""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from connectors.sim import SimConfig, SimFleet
from events.catalog.decisions import JobPlaced, JobReclaimRequested
from events.catalog.governance import (
    FindingKind,
    GovernanceFinding,
    JobIdleWarning,
    QuotaLine,
    QuotaRequestApproved,
    QuotaRequestSubmitted,
    QuotaSet,
)
from events.catalog.inventory import ClusterRegistered, NodeObserved
from events.catalog.jobs import (
    JobCancelled,
    JobFailed,
    JobKind,
    JobPreempted,
    JobReclaimed,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.types import QuotaRequestId, ResourceKind, Resources, TenantId
from events.log.contract import EventLog
from events.log.publisher import Publisher
from events.wire.envelope import Envelope
from projections.inprocess.runner import ProjectionRunner
from services.api.embedded import start_embedded
from services.governance.api_reads import GovernanceReports
from services.governance.core.config import MINUTE_MS, GovConfig, IdleRule, LeaseRule
from services.governance.quota_rules import GovernanceQuotaRules
from services.runtime import up
from tests.cli import fedsched
from tests.services.embedded import free_port, history

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(150),
]

NODES = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "proj_nodes.csv"
HOUR_MS = 3_600_000
FAIL = {"sim.fedsched.io/fail-after-s": "30"}
GOVERNANCE = GovConfig(
    idle=(IdleRule(idle_after_ms=3 * MINUTE_MS, grace_ms=2 * MINUTE_MS),),
    lease=LeaseRule(start_lease_ms=6 * HOUR_MS, lost_lease_ms=6 * HOUR_MS),
)
SIM = SimConfig(speed=60.0, notebook_active_s=60, usage_interval_s=60)


async def wait_for(predicate: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 90.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await predicate():
        assert loop.time() < deadline, f"{what}: not in time"
        await asyncio.sleep(0.2)


def of(events: list[Envelope], cls: type) -> list:  # type: ignore[type-arg]
    return [e.data for e in events if isinstance(e.data, cls)]


def job(job_id: str, tenant: str, *, gpus: int = 1, kind: JobKind = JobKind.TRAINING, **more: object) -> JobSubmitted:
    return JobSubmitted(
        job_id=job_id,
        name=str(more.pop("name", job_id)),
        tenant=tenant,
        kind=kind,
        resources=Resources(cpu_milli=2000, memory_mib=4096, gpus=gpus),
        **more,  # type: ignore[arg-type]
    )


async def test_idle_reclaim_crash_loop_quota_approval_and_cost_from_raw_events(
    fresh_database: str, tmp_path: Path
) -> None:
    api_listen = f"127.0.0.1:{free_port()}"
    config = up.UpConfig(
        data_dir=tmp_path,
        dsn=fresh_database,
        metrics_listen="127.0.0.1:0",
        sim_clusters=(),
        api_listen=api_listen,
        governance=GOVERNANCE,
    )
    running = await up.start(config)
    as_admin = {"FEDSCHED_SERVER": api_listen, "FEDSCHED_TOKEN": running.api_token or ""}
    fleet = SimFleet.from_node_list(running.log, NODES, names=("sim-1",), config=SIM)
    publisher = Publisher(running.log, "urn:test:portal", clock=lambda: fleet.clock.now_ms())
    await publisher.start()
    try:
        await fleet.start()
        # One clock for every producer, as a real deployment has: the scheduler decides on simulated time
        # (``fedsched up`` does not hand it the fleet's clock yet), so a job's events stay in time order.
        running.scheduler._clock = fleet.clock.now_ms
        quota = QuotaLine(resource=ResourceKind.GPU, guaranteed=1000, limit=1000)
        await publisher.publish([QuotaSet(tenant=TenantId("team-q"), lines=(quota,), set_by="ops@example.com")])

        async def quota_known() -> bool:  # the scheduler folds topic by topic: let it hold the quota first
            return ("team-q", "default") in running.scheduler.state.quotas

        await wait_for(quota_known, "the scheduler holds team-q's quota")
        await publisher.publish(
            [
                job("nb-1", "team-n", kind=JobKind.NOTEBOOK, project="research"),
                *[job(f"crash-{i}", "team-c", name="etl-nightly", labels=FAIL) for i in range(3)],
                *[job(f"train-{i}", "team-a", project=f"p{i % 2}", expected_runtime_s=300) for i in range(4)],
                job("big-q", "team-q", gpus=2, expected_runtime_s=120),
            ]
        )

        async def status(job_id: str) -> str | None:
            return await running.pool.fetchval("SELECT status FROM fedsched_rm.read_jobs WHERE entity_key = $1", job_id)

        async def queued_for_quota() -> bool:
            reason = await running.pool.fetchval(
                "SELECT last_reason FROM fedsched_rm.read_jobs WHERE entity_key = 'big-q'"
            )
            return reason is not None and "QuotaExceeded" in reason

        await wait_for(queued_for_quota, "big-q held back by its quota")

        # 1. The quota request above the threshold (2000 milli-GPU by rule) waits for a person.
        now = fleet.clock.now_ms()
        request = QuotaRequestSubmitted(
            request_id=QuotaRequestId("qr-team-q-1"),
            tenant=TenantId("team-q"),
            resource=ResourceKind.GPU,
            amount=4000,
            period_start_ms=now,
            period_end_ms=now + 48 * HOUR_MS,
            justification="release deadline",
            requester="carol@example.com",
        )
        await publisher.publish([request])
        for _ in range(10):
            assert running.governance is not None
            await running.governance.step()
        events = await history(running.log)
        assert not of(events, QuotaRequestApproved), "a request above the threshold is not approved by rule"
        assert await status("big-q") == "queued"

        code, out = await fedsched("gov", "quota", "list", "--json", dsn=fresh_database, env=as_admin)
        assert code == 0, out
        assert json.loads(out) == [
            {
                "request_id": "qr-team-q-1",
                "tenant": "team-q",
                "resource": "gpu",
                "gpu_model": None,
                "amount": 4000,
                "granted": None,
                "unit": "milli-GPU",
                "granted_from_ms": None,
                "granted_until_ms": None,
                "status": "pending",
                "by": "",
                "requester": "carol@example.com",
            }
        ]
        code, out = await fedsched(
            "gov",
            "quota",
            "approve",
            "qr-team-q-1",
            "--comment",
            "ok for the release",
            dsn=fresh_database,
            env=as_admin,
        )
        assert code == 0, out
        assert out.strip() == "approved qr-team-q-1 (by dev@localhost)"  # the subject of the token

        async def admitted() -> bool:
            return await status("big-q") in ("placed", "running", "succeeded")

        await wait_for(admitted, "big-q placed once its quota was raised")

        # 2. The idle notebook is warned, reclaimed, and not placed again; the crash loop is flagged.
        async def notebook_done() -> bool:
            return await status("nb-1") == "cancelled"

        async def crashes_done() -> bool:
            return all([await status(f"crash-{i}") == "failed" for i in range(3)])

        async def training_done() -> bool:
            return all([await status(f"train-{i}") == "succeeded" for i in range(4)])

        await wait_for(notebook_done, "the idle notebook reclaimed and closed")
        await wait_for(crashes_done, "three failures of etl-nightly")
        await wait_for(training_done, "training finished")
        await wait_for(lambda: _has_crash_loop(running.log), "the crash loop flagged")
    finally:
        await fleet.stop()
        await publisher.close()
        await up.stop(running)

    # Every fact is in the log; bring the read models up to its very end before comparing.
    from events.log.postgres import PostgresEventLog

    event_log = PostgresEventLog(fresh_database)
    await event_log.start()
    import asyncpg

    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    try:
        runner = ProjectionRunner(event_log, pool)
        await runner.start()
        await runner.catch_up()
        await runner.close()
        events = await history(event_log)
    finally:
        await pool.close()
        await event_log.close()

    warnings = [w for w in of(events, JobIdleWarning) if w.job_id == "nb-1"]
    reclaims = [r for r in of(events, JobReclaimRequested) if r.job_id == "nb-1"]
    assert warnings and reclaims and reclaims[0].rule == "idle-notebook"
    assert reclaims[0].reason.value == "IdleGpu" and warnings[0].reclaim_at_ms >= warnings[0].idle_since_ms
    # Governance sends the reclaim (decisions topic) and the notebook's cancel (jobs topic) together; the
    # cluster stops it for whichever it reads first, so it reports one end or the other.
    assert [e for e in of(events, JobReclaimed) + of(events, JobCancelled) if e.job_id == "nb-1"]
    assert [p.run for p in of(events, JobPlaced) if p.job_id == "nb-1"] == [1]
    crash = [f for f in of(events, GovernanceFinding) if f.kind is FindingKind.CRASH_LOOP]
    assert len(crash) == 1 and crash[0].tenant == "team-c"
    assert {f.name: f.value for f in crash[0].figures}["failures"] == 3
    raised = [q for q in of(events, QuotaSet) if q.request_id == "qr-team-q-1"]
    assert raised and raised[0].lines[0].limit == 5000
    [approved] = [a for a in of(events, QuotaRequestApproved) if a.request_id == "qr-team-q-1"]
    assert (approved.decided_by, approved.comment) == ("dev@localhost", "ok for the release")

    as_json, as_table, page = await _report_through_an_api(fresh_database, tmp_path / "api")
    report = json.loads(as_json)
    # By default the period ends with the latest event, not at the end of its hour.
    assert report["until_ms"] <= max(e.time_ms for e in events) + 1
    reported = {row["tenant"]: row["cost_micro"] for row in report["cost_by_tenant"]}
    expected = recompute_cost(events)
    tenants = sorted(set(reported) | set(expected))
    assert {t: reported.get(t, 0) - expected.get(t, 0) for t in tenants} == dict.fromkeys(tenants, 0)
    assert expected["team-a"] > 0 and expected["team-n"] > 0
    assert {r["kind"] for r in report["findings"]} >= {"crash_loop", "idle_reclaim"}
    assert "Business impact" in as_table, as_table
    assert page.count("<svg") == 3, page[:500]


async def _report_through_an_api(dsn: str, state_dir: Path) -> tuple[str, str, str]:
    """The 30-day report as JSON, as a table and as an HTML page, from an API started on the database once
    the read models hold the whole log (``fedsched up`` stopped)."""
    from events.log.postgres import PostgresEventLog

    event_log = PostgresEventLog(dsn)
    await event_log.start()
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=4)
    api = await start_embedded(
        event_log,
        pool,
        "127.0.0.1:0",
        quota_rules=GovernanceQuotaRules(),
        governance=GovernanceReports(),
        state_dir=state_dir,
        intake=False,
    )
    as_admin = {"FEDSCHED_SERVER": api.server.address, "FEDSCHED_TOKEN": api.dev_token}
    try:
        outputs = []
        for fmt in ("json", "table", "html"):
            code, out = await fedsched("gov", "report", "--period", "30d", "--format", fmt, dsn=dsn, env=as_admin)
            assert code == 0, out
            outputs.append(out)
    finally:
        await api.server.stop()
        await pool.close()
        await event_log.close()
    return outputs[0], outputs[1], outputs[2]


async def _has_crash_loop(event_log: EventLog) -> bool:
    return any(f.kind is FindingKind.CRASH_LOOP for f in of(await history(event_log), GovernanceFinding))


_ENDS = (JobSucceeded, JobFailed, JobPreempted, JobReclaimed, JobCancelled)


def recompute_cost(events: list[Envelope]) -> dict[str, int]:
    """Cost per tenant from the raw events alone: each finished run's GPUs x its placed time, priced at the
    cluster's rate for the model of the node its first replica ran on, split at hour boundaries."""
    tenants = {e.data.job_id: e.data.tenant for e in events if isinstance(e.data, JobSubmitted)}
    rates = {
        (e.data.cluster, r.model): r.micro_per_gpu_hour
        for e in events
        if isinstance(e.data, ClusterRegistered)
        for r in e.data.gpu_rates
    }
    models = {
        (e.data.cluster, e.data.node): e.data.gpus[0].model
        for e in events
        if isinstance(e.data, NodeObserved) and e.data.gpus
    }
    placed: dict[tuple[str, int], tuple[int, JobPlaced]] = {}
    ended: dict[tuple[str, int], int] = {}
    for e in sorted(events, key=lambda e: e.time_ms):
        if isinstance(e.data, JobPlaced):
            placed.setdefault((e.data.job_id, e.data.run), (e.time_ms, e.data))
        elif isinstance(e.data, _ENDS) and e.data.run > 0:
            ended.setdefault((e.data.job_id, e.data.run), e.time_ms)
    cost: dict[str, int] = defaultdict(int)
    for key, (start, decision) in placed.items():
        if key not in ended:
            continue
        milli = sum(len(r.gpu_indices) * r.gpu_milli_each for r in decision.replicas)
        rate = rates.get((decision.cluster, models.get((decision.cluster, decision.replicas[0].node), "")), 0)
        t = start
        while t < ended[key]:
            hour_end = t - t % HOUR_MS + HOUR_MS
            piece_end = min(ended[key], hour_end)
            cost[tenants[key[0]]] += rate * milli * (piece_end - t) // (1000 * HOUR_MS)
            t = piece_end
    return dict(cost)
