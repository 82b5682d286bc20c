"""Quota requests, findings and the governance report over gRPC: who asked and who decided come from the
tokens; each list holds the caller's tenants only and pages; findings and reports are for admins,
operators and auditors, and a scoped token's report counts its tenants alone."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from services.api.client import CallError, Client
from services.api.pb import governance_pb2, jobs_pb2, quota_pb2
from tests.api.conftest import Stack
from tests.api.support import a_finding, append, new_request_id, spec

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(120)]

DAY = 86_400_000


def tenants(n: int) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"gov-{i}-{tag}" for i in range(n)]


def ask(tenant: str, key: str, **more: Any) -> quota_pb2.RequestQuotaRequest:
    body: dict[str, Any] = {
        "tenant": tenant,
        "resource": "gpu",
        "amount": 4000,
        "period_ms": DAY,
        "justification": "paper deadline",
        "client_request_id": key,
    }
    return quota_pb2.RequestQuotaRequest(**{**body, **more})


async def refused(call: Any) -> CallError:
    with pytest.raises(CallError) as caught:
        await call
    return caught.value


async def every_page(client: Client, method: Any, request: Any, items: str) -> tuple[list[Any], int]:
    """Every item of a paged list, and how many pages it took."""
    found: list[Any] = []
    pages = 0
    while True:
        page = await client.call(method, request)
        found += getattr(page, items)
        pages += 1
        if not page.next_page_token:
            return found, pages
        request.page_token = page.next_page_token


async def test_requests_are_listed_with_who_asked_and_who_decided_from_the_tokens(stack: Stack) -> None:
    t1, t2 = tenants(2)
    alice = stack.client(stack.keys.hs(sub="alice@example.com", tenants=[t1]))
    bob = stack.client(stack.keys.hs(sub="bob@example.com", tenants=[t2]))
    admin = stack.client(stack.keys.admin())  # root@example.com
    made = await alice.call(alice.quota.RequestQuota, ask(t1, "k1", gpu_model="H100"))
    assert (made.created, made.request.requester, made.request.status) == (True, "alice@example.com", "pending")
    other = await bob.call(bob.quota.RequestQuota, ask(t2, "k1"))
    assert other.request_id != made.request_id  # the same key of another tenant is another request
    more = [await alice.call(alice.quota.RequestQuota, ask(t1, f"k{i}")) for i in (2, 3)]

    decided = await admin.call(
        admin.quota.DecideQuotaRequest,
        quota_pb2.DecideQuotaRequestRequest(request_id=made.request_id, approve=True, approved_amount=3000),
    )
    assert (decided.decision, decided.request.decided_by, decided.request.granted_amount) == (
        "approved",
        "root@example.com",
        3000,
    )
    await admin.call(
        admin.quota.DecideQuotaRequest, quota_pb2.DecideQuotaRequestRequest(request_id=other.request_id, approve=False)
    )

    listed = await admin.call(admin.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(tenant=t1))
    [first, *rest] = listed.requests
    assert [r.request_id for r in listed.requests] == [made.request_id, *(m.request_id for m in more)]
    assert (first.requester, first.status, first.decided_by, first.gpu_model) == (
        "alice@example.com",
        "approved",
        "root@example.com",
        "H100",
    )
    assert (first.granted_amount, first.granted_until_ms) == (3000, first.period_end_ms)
    assert {r.status for r in rest} == {"pending"} and not rest[0].HasField("granted_amount")

    viewer = stack.client(stack.keys.hs(tenants=[t1], roles=["viewer"]))
    seen, pages = await every_page(
        viewer, viewer.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(page_size=1), "requests"
    )
    assert ([r.tenant for r in seen], pages) == ([t1, t1, t1], 3)
    pending = await viewer.call(viewer.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(status="pending"))
    assert [r.request_id for r in pending.requests] == [m.request_id for m in more]
    error = await refused(viewer.call(viewer.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(tenant=t2)))
    assert (error.code, error.field) == ("PERMISSION_DENIED", "tenant")
    error = await refused(viewer.call(viewer.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(status="x")))
    assert (error.code, error.field) == ("INVALID_ARGUMENT", "status")
    page = await viewer.call(viewer.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(page_size=1))
    changed = quota_pb2.ListQuotaRequestsRequest(status="pending", page_token=page.next_page_token)
    error = await refused(viewer.call(viewer.quota.ListQuotaRequests, changed))
    assert (error.code, error.field) == ("INVALID_ARGUMENT", "page_token")


async def test_a_request_from_now_retried_later_is_the_same_request(stack: Stack) -> None:
    [t1] = tenants(1)
    submitter = stack.client(stack.keys.hs(tenants=[t1]))
    first = await submitter.call(submitter.quota.RequestQuota, ask(t1, "now"))
    before = stack.config.clock()
    assert first.created and before - DAY <= first.request.period_start_ms <= before
    assert first.request.period_end_ms - first.request.period_start_ms == DAY
    await asyncio.sleep(0.05)  # later: "now" is another time
    again = await submitter.call(submitter.quota.RequestQuota, ask(t1, "now"))
    assert (again.created, again.request_id) == (False, first.request_id)
    assert again.request.period_start_ms == first.request.period_start_ms  # as recorded by the first call
    error = await refused(submitter.call(submitter.quota.RequestQuota, ask(t1, "now", period_ms=2 * DAY)))
    assert (error.code, error.field) == ("ALREADY_EXISTS", "client_request_id")
    both = ask(t1, "both", period_end_ms=stack.config.clock() + DAY)
    error = await refused(submitter.call(submitter.quota.RequestQuota, both))
    assert (error.code, error.field) == ("INVALID_ARGUMENT", "period_ms")
    error = await refused(submitter.call(submitter.quota.RequestQuota, ask(t1, "neither", period_ms=0)))
    assert (error.code, error.field) == ("INVALID_ARGUMENT", "period_end_ms")


async def test_findings_are_for_governance_roles_scoped_to_the_token_and_paged(stack: Stack) -> None:
    t1, t2 = tenants(2)
    node = f"node-{uuid.uuid4().hex[:8]}"
    await append(
        stack.log,
        [
            *(a_finding(t1, f"j-{t1}-{i}", f"crash loop {i}") for i in range(3)),
            a_finding(t2, f"j-{t2}", "crash loop"),
            a_finding(None, node, "jobs fail fast on it"),
        ],
    )
    auditor = stack.client(stack.keys.hs(tenants=["*"], roles=["auditor"]))
    everything, pages = await every_page(
        auditor, auditor.governance.ListFindings, governance_pb2.ListFindingsRequest(page_size=2), "findings"
    )
    ours = [(f.tenant, f.subject) for f in everything if f.tenant in (t1, t2) or f.subject == f"sim-1/{node}"]
    assert ours == [*((t1, f"j-{t1}-{i}") for i in range(3)), (t2, f"j-{t2}"), ("", f"sim-1/{node}")]
    assert pages >= 3
    only_t1 = await auditor.call(auditor.governance.ListFindings, governance_pb2.ListFindingsRequest(tenant=t1))
    assert [f.subject for f in only_t1.findings] == [f"j-{t1}-{i}" for i in range(3)]

    operator = stack.client(stack.keys.hs(tenants=[t1], roles=["operator"]))
    mine, _ = await every_page(
        operator, operator.governance.ListFindings, governance_pb2.ListFindingsRequest(page_size=2), "findings"
    )
    assert [(f.tenant, f.kind, f.message) for f in mine] == [(t1, "crash_loop", f"crash loop {i}") for i in range(3)]
    error = await refused(
        operator.call(operator.governance.ListFindings, governance_pb2.ListFindingsRequest(tenant=t2))
    )
    assert (error.code, error.field) == ("PERMISSION_DENIED", "tenant")
    for role in ("viewer", "submitter"):
        client = stack.client(stack.keys.hs(tenants=[t1], roles=[role]))
        error = await refused(client.call(client.governance.ListFindings, governance_pb2.ListFindingsRequest()))
        assert error.code == "PERMISSION_DENIED", role


async def test_the_report_counts_the_callers_tenants_alone(stack: Stack) -> None:
    t1, t2 = tenants(2)
    admin = stack.client(stack.keys.admin())
    for tenant, n in ((t1, 2), (t2, 3)):
        for _ in range(n):
            request = jobs_pb2.SubmitJobRequest(spec=spec(tenant=tenant), client_request_id=new_request_id())
            await admin.call(admin.jobs.SubmitJob, request)
        await admin.call(
            admin.quota.SetQuota,
            quota_pb2.SetQuotaRequest(tenant=tenant, lines=[quota_pb2.QuotaLine(resource="gpu", guaranteed=1000)]),
        )
    await append(stack.log, [a_finding(t1, f"j-{t1}", "m"), a_finding(t2, f"j-{t2}", "m")])
    await stack.fold()
    month = governance_pb2.GetReportRequest(period_ms=30 * DAY, until_ms=int(time.time() * 1000) + 3_600_000)

    everything = await admin.call(admin.governance.GetReport, month)
    assert not everything.tenants and {t1, t2} <= tenants_in(everything, "quota", "findings", "interruptions")
    scoped = stack.client(stack.keys.hs(tenants=[t1], roles=["auditor"]))
    mine = await scoped.call(scoped.governance.GetReport, month)
    assert list(mine.tenants) == [t1]
    for name in ("quota", "findings", "interruptions"):
        assert tenants_in(mine, name) == {t1}, name
    by_tenant = governance_pb2.GetReportRequest()
    by_tenant.CopyFrom(month)
    by_tenant.tenant = t2
    theirs = await admin.call(admin.governance.GetReport, by_tenant)
    assert list(theirs.tenants) == [t2] and tenants_in(theirs, "quota", "findings") == {t2}

    error = await refused(scoped.call(scoped.governance.GetReport, by_tenant))
    assert (error.code, error.field) == ("PERMISSION_DENIED", "tenant")
    for bad, field in ((governance_pb2.GetReportRequest(), "period_ms"), (period(DAY, -1), "until_ms")):
        error = await refused(admin.call(admin.governance.GetReport, bad))
        assert (error.code, error.field) == ("INVALID_ARGUMENT", field)
    viewer = stack.client(stack.keys.hs(tenants=[t1], roles=["viewer"]))
    assert (await refused(viewer.call(viewer.governance.GetReport, month))).code == "PERMISSION_DENIED"


def period(period_ms: int, until_ms: int) -> governance_pb2.GetReportRequest:
    return governance_pb2.GetReportRequest(period_ms=period_ms, until_ms=until_ms)


def tenants_in(report: governance_pb2.GovernanceReport, *tables: str) -> set[str]:
    """The tenants named in the report's ``tables`` (their ``tenant`` column)."""
    out: set[str] = set()
    for table in report.tables:
        if table.name in tables:
            out |= _column(table, "tenant")
    return out


def _column(table: governance_pb2.ReportTable, column: str) -> set[str]:
    index = list(table.columns).index(column) if column in table.columns else None
    rows: Sequence[governance_pb2.ReportRow] = table.rows
    return set() if index is None else {row.cells[index].text for row in rows}
