"""``fedsched gov quota ...``, ``gov findings``, ``gov report`` and ``audit timeline`` against ``fedsched
api`` running as its own process: each command a client of the API with the caller's token. Who asked
and who decided is recorded from the tokens; roles that may not are refused (exit 4), with the people
commands' other exit codes (2 invalid input naming the field and the option, 3 not found, 5 conflict);
a scoped token sees its tenant's requests, findings and report rows only."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest

from events.log import open_log
from events.wire.envelope import format_time
from projections.inprocess.runner import ProjectionRunner
from tests.api.conftest import RunningApi
from tests.api.support import a_finding, append
from tests.api.test_cli import JOB, fedsched

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(180)]


def ask(tenant: str, key: str, *more: str) -> list[str]:
    return [
        "gov", "quota", "request", "--id", key, "--tenant", tenant, "--amount", "8000",
        "--justification", "paper deadline", *more,
    ]  # fmt: skip


async def test_a_request_is_asked_decided_and_listed_with_the_identities_of_the_tokens(
    api_process: RunningApi, tmp_path: Path
) -> None:
    tenant, other = (f"cli-{name}-{uuid.uuid4().hex[:8]}" for name in ("g", "h"))
    keys = api_process.keys
    alice = keys.hs(sub="alice@example.com", tenants=[tenant])
    ops = keys.hs(sub="ops@example.com", tenants=["*"], roles=["admin"])

    async def run(*args: str, token: str) -> tuple[int, str, str]:
        return await fedsched(*args, api=api_process, token=token, cwd=tmp_path)

    code, out, err = await run(*ask(tenant, "qr-1", "--gpu-model", "V100M32", "--json"), token=alice)
    assert code == 0, err
    asked = json.loads(out)
    request_id = asked["request_id"]
    assert asked["created"] and asked["request"]["requester"] == "alice@example.com"
    assert (asked["request"]["amount"], asked["request"]["gpu_model"]) == (8000, "V100M32")

    calls = {  # independent of each other, run side by side
        "retry": run(*ask(tenant, "qr-1", "--gpu-model", "V100M32"), token=alice),
        "key reused": run(*ask(tenant, "qr-1", "--amount", "500"), token=alice),
        "model on cpu": run(*ask(tenant, "qr-2", "--resource", "cpu", "--gpu-model", "H100"), token=alice),
        "period over": run(*ask(tenant, "qr-3", "--from", "2020-12-01T00:00:00Z"), token=alice),
        "bad tenant": run(*ask("Not A Tenant", "qr-4", "--json"), token=ops),
        "other tenant": run(*ask(other, "qr-5"), token=alice),
        "viewer approves": run(
            "gov", "quota", "approve", request_id, token=keys.hs(tenants=[tenant], roles=["viewer"])
        ),
        "submitter approves": run("gov", "quota", "approve", request_id, token=alice),
        "other admin approves": run(
            "gov", "quota", "approve", request_id, token=keys.hs(tenants=[other], roles=["admin"])
        ),
        "unknown": run("gov", "quota", "approve", "q-nope", token=ops),
        "too much": run("gov", "quota", "approve", request_id, "--amount", "9000", token=ops),
        "ends first": run("gov", "quota", "approve", request_id, "--until", "2020-12-01T00:00:00Z", token=ops),
    }
    results = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))
    code, out, _ = results["retry"]
    assert code == 0 and out.startswith(f"requested {request_id}: 8000 gpu for 24.0 h from ") and "(already" in out
    code, _, err = results["key reused"]
    assert (
        code == 5
        and "client_request_id: was already used for a different quota request (option --id); use a new --id" in err
    ), err
    code, _, err = results["model on cpu"]
    assert code == 2 and "gpu_model: is only for the gpu and npu resources, not cpu (option --gpu-model)" in err
    code, _, err = results["period over"]
    assert code == 2 and "period_end_ms: the period ends at 2020-12-02T00:00:00.000Z" in err, err
    assert "ask for a period that has not ended (option --from/--hours)" in err, err
    code, _, err = results["bad tenant"]
    assert code == 2 and json.loads(err)["error"]["field"] == "tenant"
    for refused in ("other tenant", "viewer approves", "submitter approves"):
        code, _, err = results[refused]
        assert code == 4 and "permission denied" in err, (refused, err)
    for missing in ("other admin approves", "unknown"):  # another tenant's request reads as one that never was
        code, _, err = results[missing]
        assert code == 3 and "not found: request_id: no quota request" in err, (missing, err)
    code, _, err = results["too much"]
    assert code == 2 and "approved_amount: is more than the 8000 that was asked (option --amount)" in err
    code, _, err = results["ends first"]
    assert code == 2 and "expires_ms: the grant would expire before it starts" in err, err

    code, out, err = await run("gov", "quota", "approve", request_id, "--amount", "5000", "--json", token=ops)
    assert code == 0, err
    approved = json.loads(out)
    assert (approved["decision"], approved["request"]["decided_by"], approved["request"]["granted_amount"]) == (
        "approved",
        "ops@example.com",
        5000,
    )
    code, _, err = await run("gov", "quota", "reject", request_id, token=ops)
    assert code == 5 and f"quota request {request_id} was already approved" in err

    code, out, err = await run(*ask(tenant, "qr-6"), token=alice)
    assert code == 0, err
    second = out.split()[1].rstrip(":")
    code, out, _ = await run("gov", "quota", "list", "--tenant", tenant, token=ops)
    until = format_time(asked["request"]["period_end_ms"])  # the grant lasts for the period asked
    assert [line.split() for line in out.splitlines()] == [
        ["REQUEST", "TENANT", "RESOURCE", "GPU", "MODEL", "ASKED", "GRANTED", "UNIT", "UNTIL", "STATUS", "BY"],
        [request_id, tenant, "gpu", "V100M32", "8000", "5000", "milli-GPU", until, "approved", "ops@example.com"],
        [second, tenant, "gpu", "-", "8000", "-", "milli-GPU", "-", "pending", "-"],
    ]
    code, out, _ = await run("gov", "quota", "list", "--json", token=keys.hs(tenants=[tenant], roles=["viewer"]))
    first, pending = json.loads(out)
    assert (first["requester"], first["by"], first["granted"], first["unit"]) == (
        "alice@example.com",
        "ops@example.com",
        5000,
        "milli-GPU",
    )
    assert (pending["status"], pending["granted"], pending["granted_until_ms"]) == ("pending", None, None)
    code, out, _ = await run("gov", "quota", "list", token=keys.hs(tenants=[other], roles=["viewer"]))
    assert (code, out.strip()) == (0, "(no quota requests)")


async def test_findings_report_and_timeline_through_the_api_scoped_to_the_token(
    api_process: RunningApi,
    runner: ProjectionRunner,
    tmp_path: Path,
) -> None:
    tenant, other = (f"cli-{name}-{uuid.uuid4().hex[:8]}" for name in ("r", "s"))
    keys = api_process.keys
    admin = keys.hs(sub="root@example.com", tenants=["*"], roles=["admin"])
    job_ids = {}
    for name in (tenant, other):
        job_file = tmp_path / f"{name}.yaml"
        job_file.write_text(JOB.replace("tenant: team-a", f"tenant: {name}"))
        code, out, err = await fedsched("submit", str(job_file), "--json", api=api_process, token=admin, cwd=tmp_path)
        assert code == 0, err
        job_ids[name] = json.loads(out)["job_id"]
    log = open_log(api_process.dsn)
    await log.start()
    try:  # as the governance service publishes them
        await append(log, [a_finding(name, job_ids[name], f"crash loop of {name}") for name in (tenant, other)])
    finally:
        await log.close()
    await runner.catch_up()

    async def run(*args: str, token: str) -> tuple[int, str, str]:
        return await fedsched(*args, api=api_process, token=token, cwd=tmp_path)

    operator = keys.hs(sub="op@example.com", tenants=[tenant], roles=["operator"])
    viewer = keys.hs(tenants=[tenant], roles=["viewer"])
    until = ("--until", format_time(int(time.time() * 1000) + 3_600_000))
    calls = {
        "all findings": run("gov", "findings", "--json", token=admin),
        "my findings": run("gov", "findings", "--json", token=operator),
        "my findings as text": run("gov", "findings", token=operator),
        "their findings": run("gov", "findings", "--tenant", other, token=operator),
        "viewer findings": run("gov", "findings", token=viewer),
        "all report": run("gov", "report", "--period", "2d", *until, "--json", token=admin),
        "my report": run("gov", "report", "--period", "2d", *until, "--format", "json", token=operator),
        "my table": run("gov", "report", "--period", "2d", *until, token=operator),
        "my csv": run("gov", "report", "--period", "2d", *until, "--format", "csv", token=operator),
        "my page": run("gov", "report", *until, "--format", "html", "--out", str(tmp_path / "r.html"), token=operator),
        "viewer report": run("gov", "report", token=viewer),
        "timeline": run("audit", "timeline", job_ids[tenant], "--json", token=viewer),
        "timeline as text": run("audit", "timeline", job_ids[tenant], token=viewer),
        "their timeline": run("audit", "timeline", job_ids[other], token=viewer),
    }
    results = dict(zip(calls, await asyncio.gather(*calls.values()), strict=True))

    code, out, err = results["all findings"]
    assert code == 0, err
    assert {(f["tenant"], f["subject"]) for f in json.loads(out)} >= {(n, job_ids[n]) for n in (tenant, other)}
    code, out, _ = results["my findings"]
    assert [(f["tenant"], f["message"]) for f in json.loads(out)] == [(tenant, f"crash loop of {tenant}")]
    code, out, _ = results["my findings as text"]
    assert code == 0 and [line.split()[1:4] for line in out.splitlines()] == [
        ["crash_loop", "crash-loop", job_ids[tenant]]
    ]
    code, _, err = results["their findings"]
    assert code == 4 and "does not cover tenant" in err
    for refused in ("viewer findings", "viewer report"):
        code, _, err = results[refused]
        assert code == 4 and "governance.read is not allowed for the roles of this token (viewer)" in err, err

    code, out, err = results["all report"]
    assert code == 0, err
    everything = json.loads(out)
    assert {r["tenant"] for r in everything["findings"]} >= {tenant, other}
    assert {r["tenant"] for r in everything["interruptions"]} >= {tenant, other}
    code, out, _ = results["my report"]
    mine = json.loads(out)
    for table in ("findings", "interruptions", "impact", "idle", "cost_by_tenant", "quota"):
        assert {r["tenant"] for r in mine[table]} <= {tenant}, table
    assert [r["subject"] for r in mine["findings"]] == [job_ids[tenant]]
    code, out, _ = results["my table"]
    assert code == 0 and "== Business impact beside utilisation (per tenant)" in out and other not in out
    code, out, _ = results["my csv"]
    assert code == 0 and out.startswith("section,field,value,row\n") and f"findings,tenant,{tenant},0" in out
    code, _, err = results["my page"]
    assert code == 0 and f"wrote {tmp_path / 'r.html'}" in err
    page = (tmp_path / "r.html").read_text()
    assert "<h1>GPU governance report</h1>" in page and other not in page

    code, out, err = results["timeline"]
    assert code == 0, err
    timeline = json.loads(out)
    assert (timeline["job_id"], timeline["tenant"]) == (job_ids[tenant], tenant) and timeline["entries"]
    code, out, _ = results["timeline as text"]
    assert code == 0 and out.startswith(f"{job_ids[tenant]} ({tenant}): ") and "JobSubmitted" in out
    code, _, err = results["their timeline"]
    assert code == 3 and f"no job {job_ids[other]}" in err
