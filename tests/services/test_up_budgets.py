"""GPU-hour budgets end to end on the embedded default (issue 20): ``fedsched up``'s components in one
process on real PostgreSQL, a simulated cluster on a clock 3,600 times the wall's (a day in 24 s). A
hard daily budget applied through the API keeps the job that would exceed it waiting and says why; the
next day's window, opened by governance, admits it; a soft budget raises its finding and holds nothing;
``audit verify`` re-executes every cycle identically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from events.catalog.decisions import JobQueued
from events.catalog.reasons import ReasonCode
from events.log.postgres import PostgresEventLog
from services.api.client import Client, ClientConfig
from services.api.pb import config_pb2, jobs_pb2, quota_pb2
from services.audit.verify import verify
from services.governance.report import finding_rows
from services.runtime import up
from tests.services.embedded import free_port, history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

NODES = Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "proj_nodes.csv"


def zone_at_four(now_ms: int) -> str:
    """A zone where it is about 4 AM at ``now_ms``: its next midnight (the next window) is about 20
    simulated hours away, some 20 s at the test's speed, whatever the time the test runs at; time enough
    for the jobs to be submitted and the second one held before it, under load too."""
    utc_hour = now_ms // 3_600_000 % 24
    offset = (4 - utc_hour + 12) % 24 - 12  # -12 .. 11: every zone Etc/GMT-11 .. Etc/GMT+12 exists
    return "UTC" if offset == 0 else (f"Etc/GMT-{offset}" if offset > 0 else f"Etc/GMT+{-offset}")


def document(kind: str, name: str, **spec: Any) -> str:
    return json.dumps({"api_version": "fedsched.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec})


async def test_a_hard_budget_holds_a_job_until_the_next_window_and_a_soft_one_only_warns(
    fresh_database: str, tmp_path: Path
) -> None:
    api = f"127.0.0.1:{free_port()}"
    config = up.UpConfig(
        data_dir=tmp_path,
        dsn=fresh_database,
        metrics_listen="127.0.0.1:0",
        sim_nodes=NODES,
        sim_speed=3600.0,
        api_listen=api,
    )
    running = await up.start(config)
    client = Client(ClientConfig(server=api, token=running.api_token))
    assert running.clock is not None
    zone = zone_at_four(running.clock.now_ms())
    try:
        budgets = [
            document("Budget", "team-a-daily", tenant="team-a", window="day", timezone=zone, gpu_hours=1, mode="hard"),
            document("Budget", "team-b-daily", tenant="team-b", window="day", timezone=zone, gpu_hours=1, mode="soft"),
        ]
        await client.call(client.documents.ApplyDocuments, config_pb2.ApplyDocumentsRequest(documents=budgets))

        async def submit(name: str, tenant: str) -> str:
            spec = jobs_pb2.JobSpec(
                name=name,
                tenant=tenant,
                expected_runtime_s=2400,  # 1 GPU for 40 minutes: two of them exceed one GPU-hour
                resources=jobs_pb2.Resources(cpu_milli=1000, memory_mib=1024, gpus=1),
            )
            answer = await client.call(
                client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=name)
            )
            return str(answer.job_id)

        async def opened() -> bool:  # governance opened the first windows: the budgets are in force
            answer = await client.call(client.quota.GetBudgets, quota_pb2.GetBudgetsRequest())
            return len(answer.budgets) == 2

        await wait_for(opened, 30)
        first, second = await submit("a-first", "team-a"), await submit("a-second", "team-a")
        soft = [await submit(f"b-{i}", "team-b") for i in range(3)]

        async def statuses() -> dict[str, str]:
            rows = await running.pool.fetch("SELECT entity_key, status, last_reason FROM fedsched_rm.read_jobs")
            return {r["entity_key"]: (r["status"], r["last_reason"]) for r in rows}

        async def second_waits_for_its_budget() -> bool:
            found = await statuses()
            return found.get(second, ("", ""))[1] == "BudgetExceeded" and found.get(first, ("", ""))[0] in (
                "placed",
                "running",
                "succeeded",
            )

        await wait_for(second_waits_for_its_budget, 60)
        why = await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=second))
        assert "budget team-a-daily" in str(why) and "GPU-hours left of 1" in str(why), why

        async def soft_ones_started() -> bool:  # soft: nothing held (and the log says none ever waited for it)
            found = await statuses()
            return all(found.get(j, ("", ""))[0] in ("placed", "running", "succeeded") for j in soft)

        await wait_for(soft_ones_started, 60)

        async def second_started() -> bool:  # the next simulated day: a new window restores the budget
            return (await statuses()).get(second, ("", ""))[0] in ("placed", "running", "succeeded")

        await wait_for(second_started, 120)
    finally:
        await client.close()
        await up.stop(running)

    log = PostgresEventLog(fresh_database)
    await log.start()
    try:
        report = await verify(log)
        findings = await finding_rows(log)
        events = await history(log)
    finally:
        await log.close()
    assert report.identical_pct == 100.0, report.differences
    held = [
        e.data.job_id for e in events if isinstance(e.data, JobQueued) and ReasonCode.BUDGET_EXCEEDED in e.data.reasons
    ]
    assert second in held and not set(held) & set(soft), held
    budget_findings = {(f.kind, f.tenant) for f in findings if f.kind.startswith("budget")}
    assert ("budget_warning", "team-b") in budget_findings and ("budget_spent", "team-b") in budget_findings
    assert not any(tenant == "team-a" for _, tenant in budget_findings)  # a hard budget holds, it does not warn
