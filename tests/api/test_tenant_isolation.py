"""Tenant isolation over every RPC of the API: a token of tenant A (each role, admin included) that asks
about tenant B's job, queue, quota, quota request, findings or report never gets B's data, and its
refusal does not tell whether B's thing exists.

The rule (``services.api.auth``): an object named by id outside the token's tenants is NOT_FOUND, word
for word as an id that does not exist; a tenant named in a request outside the token's tenants is
PERMISSION_DENIED, the same for a tenant that exists and one that does not; a role that may not call a
method is PERMISSION_DENIED before the request is read; lists hold the token's tenants only (a scoped
token's governance report counts its tenants' data alone), and the fleet (clusters, nodes, capacity) is
not tenant data. Each refusal is compared with the answer to the
same request about a tenant and ids that were never created ("ghost"): equal but for the names.

The matrix is parametrised by the service descriptors: an RPC added to the proto without a row here
fails ``test_every_rpc_answers_a_token_of_another_tenant_without_leaking[<method>-...]``.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
import pytest_asyncio

from services.api.auth import METHODS, Role
from services.api.client import CallError, Client, call_error
from services.api.commands import derived_id, job_id_for
from services.api.pb import SERVICES, audit_pb2, config_pb2, governance_pb2, jobs_pb2, quota_pb2, resources_pb2
from tests.api.conftest import Stack
from tests.api.support import a_finding, append, new_request_id, spec

pytestmark = pytest.mark.postgres
in_session_loop = pytest.mark.asyncio(loop_scope="session")

OK, NOT_FOUND, DENIED = "OK", "NOT_FOUND", "PERMISSION_DENIED"
ROLES = tuple(Role)
MONTH_MS = 30 * 86_400_000


@dataclass(frozen=True)
class Target:
    """What a request of tenant A's token asks about: tenant B's things, or ghosts never created."""

    tenant: str
    queue: str
    job_id: str
    request_id: str

    def names(self) -> dict[str, str]:
        return {self.job_id: "<job>", self.request_id: "<request>", self.tenant: "<tenant>", self.queue: "<queue>"}


@dataclass(frozen=True)
class World:
    a: str
    a_job: str
    b: Target
    ghost: Target
    secrets: tuple[str, ...]
    """Strings of B's that must appear in no answer to A: tenant, queue, job, request, job name, finding."""


Call = Callable[[Client, Target], Awaitable[Any]]


@dataclass(frozen=True)
class Probe:
    """One request aimed at B, and what each role of tenant A gets: OK (with none of B's data), or the
    code of a refusal that is the same for B's things as for ghosts."""

    what: str
    call: Call
    expect: dict[Role, str]


def each(code: str, **overrides: str) -> dict[Role, str]:
    return {role: overrides.get(role.value, code) for role in ROLES}


#: Governance's findings and reports: for the people who run the platform and answer for it.
GOVERNANCE_READERS = {"operator": OK, "auditor": OK, "admin": OK}


async def watch(client: Client, target: Target) -> list[Any]:
    request = jobs_pb2.WatchJobRequest(job_id=target.job_id)
    try:
        return await asyncio.wait_for(_collect(client.stream(client.jobs.WatchJob, request)), 20)
    except grpc.aio.AioRpcError as error:
        raise call_error(error) from None


async def _collect(stream: Any) -> list[Any]:
    return [item async for item in stream]


def _quota_lines() -> list[quota_pb2.QuotaLine]:
    return [quota_pb2.QuotaLine(resource="gpu", guaranteed=1000)]


def _tenant_document(target: Target) -> config_pb2.ApplyDocumentsRequest:
    document = {"api_version": "fedsched.io/v1", "kind": "Tenant", "metadata": {"name": target.tenant}, "spec": {}}
    budget = {
        "api_version": "fedsched.io/v1",
        "kind": "Budget",
        "metadata": {"name": f"{target.tenant}-monthly"},
        "spec": {"tenant": target.tenant, "window": "month", "gpu_hours": 10},
    }
    return config_pb2.ApplyDocumentsRequest(documents=[json.dumps(document), json.dumps(budget)])


#: Every RPC of the API, with what a token of tenant A gets when it asks about tenant B.
ROWS: dict[str, list[Probe]] = {
    "/fedsched.v1.JobService/SubmitJob": [
        Probe(
            "a job for B",
            lambda c, t: c.call(
                c.jobs.SubmitJob,
                jobs_pb2.SubmitJobRequest(spec=spec(tenant=t.tenant), client_request_id=new_request_id()),
            ),
            each(DENIED),
        )
    ],
    "/fedsched.v1.JobService/CancelJob": [
        Probe(
            "B's job",
            lambda c, t: c.call(c.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=t.job_id, reason="isolation")),
            each(NOT_FOUND, viewer=DENIED, auditor=DENIED),
        )
    ],
    "/fedsched.v1.JobService/GetJob": [
        Probe("B's job", lambda c, t: c.call(c.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=t.job_id)), each(NOT_FOUND))
    ],
    "/fedsched.v1.JobService/ListJobs": [
        Probe(
            "B's jobs by filter",
            lambda c, t: c.call(c.jobs.ListJobs, jobs_pb2.ListJobsRequest(tenant=t.tenant)),
            each(DENIED),
        ),
        Probe(
            "B's queue by filter",
            lambda c, t: c.call(c.jobs.ListJobs, jobs_pb2.ListJobsRequest(queue=t.queue)),
            each(OK),
        ),
        Probe("every job", lambda c, t: c.call(c.jobs.ListJobs, jobs_pb2.ListJobsRequest(page_size=1000)), each(OK)),
    ],
    "/fedsched.v1.JobService/WatchJob": [Probe("B's job", watch, each(NOT_FOUND))],
    "/fedsched.v1.JobService/ExplainJob": [
        Probe(
            "B's job",
            lambda c, t: c.call(c.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=t.job_id)),
            each(NOT_FOUND),
        )
    ],
    "/fedsched.v1.ResourceService/ListClusters": [
        Probe("the fleet", lambda c, t: c.call(c.resources.ListClusters, resources_pb2.ListClustersRequest()), each(OK))
    ],
    "/fedsched.v1.ResourceService/ListNodes": [
        Probe(
            "the fleet",
            lambda c, t: c.call(c.resources.ListNodes, resources_pb2.ListNodesRequest(page_size=1000)),
            each(OK),
        )
    ],
    "/fedsched.v1.ResourceService/GetCapacity": [
        Probe("the fleet", lambda c, t: c.call(c.resources.GetCapacity, resources_pb2.GetCapacityRequest()), each(OK))
    ],
    "/fedsched.v1.QuotaService/GetQuota": [
        Probe(
            "B's quota",
            lambda c, t: c.call(c.quota.GetQuota, quota_pb2.GetQuotaRequest(tenant=t.tenant)),
            each(DENIED),
        ),
        Probe(
            "B's queue",
            lambda c, t: c.call(c.quota.GetQuota, quota_pb2.GetQuotaRequest(queue=t.queue)),
            each(OK),
        ),
        Probe("every quota", lambda c, t: c.call(c.quota.GetQuota, quota_pb2.GetQuotaRequest()), each(OK)),
    ],
    "/fedsched.v1.QuotaService/SetQuota": [
        Probe(
            "B's quota",
            lambda c, t: c.call(
                c.quota.SetQuota, quota_pb2.SetQuotaRequest(tenant=t.tenant, queue=t.queue, lines=_quota_lines())
            ),
            each(DENIED),
        )
    ],
    "/fedsched.v1.QuotaService/RequestQuota": [
        Probe(
            "quota for B",
            lambda c, t: c.call(
                c.quota.RequestQuota,
                quota_pb2.RequestQuotaRequest(
                    tenant=t.tenant,
                    queue=t.queue,
                    resource="gpu",
                    amount=1000,
                    period_start_ms=1_900_000_000_000,
                    period_end_ms=1_900_086_400_000,
                    justification="isolation",
                    client_request_id=new_request_id(),
                ),
            ),
            each(DENIED),
        )
    ],
    "/fedsched.v1.QuotaService/DecideQuotaRequest": [
        Probe(
            "B's quota request",
            lambda c, t: c.call(
                c.quota.DecideQuotaRequest, quota_pb2.DecideQuotaRequestRequest(request_id=t.request_id, approve=True)
            ),
            each(DENIED, admin=NOT_FOUND),
        )
    ],
    "/fedsched.v1.ConfigService/ApplyDocuments": [
        Probe("B's Tenant document", lambda c, t: c.call(c.documents.ApplyDocuments, _tenant_document(t)), each(DENIED))
    ],
    "/fedsched.v1.ConfigService/GetDocuments": [
        Probe(
            "every document",
            lambda c, t: c.call(c.documents.GetDocuments, config_pb2.GetDocumentsRequest()),
            each(OK),
        ),
        Probe(
            "B's Tenant document",
            lambda c, t: c.call(c.documents.GetDocuments, config_pb2.GetDocumentsRequest(kind="Tenant", name=t.tenant)),
            each(OK),
        ),
    ],
    "/fedsched.v1.ConfigService/DeleteDocument": [
        Probe(
            "B's Tenant document",
            lambda c, t: c.call(
                c.documents.DeleteDocument, config_pb2.DeleteDocumentRequest(kind="Tenant", name=t.tenant)
            ),
            each(DENIED, admin=NOT_FOUND),
        )
    ],
    "/fedsched.v1.QuotaService/GetBudgets": [
        Probe(
            "B's budgets",
            lambda c, t: c.call(c.quota.GetBudgets, quota_pb2.GetBudgetsRequest(tenant=t.tenant)),
            each(DENIED),
        ),
        Probe("every budget", lambda c, t: c.call(c.quota.GetBudgets, quota_pb2.GetBudgetsRequest()), each(OK)),
    ],
    "/fedsched.v1.QuotaService/ListQuotaRequests": [
        Probe(
            "B's requests by filter",
            lambda c, t: c.call(c.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(tenant=t.tenant)),
            each(DENIED),
        ),
        Probe(
            "every request",
            lambda c, t: c.call(c.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(page_size=1000)),
            each(OK),
        ),
    ],
    "/fedsched.v1.GovernanceService/ListFindings": [
        Probe(
            "B's findings by filter",
            lambda c, t: c.call(c.governance.ListFindings, governance_pb2.ListFindingsRequest(tenant=t.tenant)),
            each(DENIED),
        ),
        Probe(
            "every finding",
            lambda c, t: c.call(c.governance.ListFindings, governance_pb2.ListFindingsRequest(page_size=1000)),
            each(DENIED, **GOVERNANCE_READERS),
        ),
    ],
    "/fedsched.v1.GovernanceService/GetReport": [
        Probe(
            "B's report",
            lambda c, t: c.call(
                c.governance.GetReport, governance_pb2.GetReportRequest(period_ms=MONTH_MS, tenant=t.tenant)
            ),
            each(DENIED),
        ),
        Probe(
            "every tenant's report",
            lambda c, t: c.call(c.governance.GetReport, report_of_the_month()),
            each(DENIED, **GOVERNANCE_READERS),
        ),
    ],
    "/fedsched.v1.AuditService/GetJobTimeline": [
        Probe(
            "B's job",
            lambda c, t: c.call(c.audit.GetJobTimeline, audit_pb2.GetJobTimelineRequest(job_id=t.job_id)),
            each(NOT_FOUND),
        )
    ],
}


def report_of_the_month() -> governance_pb2.GetReportRequest:
    """The month to an hour from now: it holds every job and finding of the world."""
    return governance_pb2.GetReportRequest(period_ms=MONTH_MS, until_ms=int(time.time() * 1000) + 3_600_000)


RPCS = sorted(f"/{name}/{method.name}" for name, service in SERVICES.items() for method in service.methods)


def test_the_matrix_has_a_row_for_every_rpc_and_every_role() -> None:
    assert set(ROWS) == set(RPCS) == set(METHODS)
    for method, probes in ROWS.items():
        assert probes, method
        for probe in probes:
            assert set(probe.expect) == set(ROLES), (method, probe.what)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def world(stack: Stack) -> World:
    tag = uuid.uuid4().hex[:8]
    a, b = f"iso-a-{tag}", f"iso-b-{tag}"
    admin = stack.client(stack.keys.admin())  # every tenant
    queue_b = f"queue-b-{tag}"
    name_b = f"secret-training-{tag}"
    for tenant, queue in ((a, f"queue-a-{tag}"), (b, queue_b)):
        await admin.call(
            admin.quota.SetQuota, quota_pb2.SetQuotaRequest(tenant=tenant, queue=queue, lines=_quota_lines())
        )
    b_job = await admin.call(
        admin.jobs.SubmitJob,
        jobs_pb2.SubmitJobRequest(spec=spec(tenant=b, queue=queue_b, name=name_b), client_request_id=new_request_id()),
    )
    a_job = await admin.call(
        admin.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec(tenant=a), client_request_id=new_request_id())
    )
    await stack.fold()
    submitter_b = stack.client(stack.keys.hs(tenants=[b], roles=["submitter"]))
    asked = await submitter_b.call(
        submitter_b.quota.RequestQuota,
        quota_pb2.RequestQuotaRequest(
            tenant=b,
            queue=queue_b,
            resource="gpu",
            amount=1000,
            period_start_ms=1_900_000_000_000,
            period_end_ms=1_900_086_400_000,
            justification="B's secret plan",
            client_request_id=f"ask-{tag}",
        ),
    )
    secret_finding = f"b-secret-finding-{tag}"
    await append(stack.log, [a_finding(b, b_job.job_id, secret_finding), a_finding(a, a_job.job_id, "A's own")])
    await stack.fold()
    b_target = Target(b, queue_b, b_job.job_id, asked.request_id)
    applying = asyncio.ensure_future(admin.call(admin.documents.ApplyDocuments, _tenant_document(b_target)))
    while not applying.done():  # the API waits for the read model to show its change
        await stack.fold()
        await asyncio.sleep(0.02)
    await applying
    ghost_tenant = f"iso-ghost-{tag}"
    ghost = Target(
        ghost_tenant, f"queue-ghost-{tag}", job_id_for(ghost_tenant, "never"), derived_id("q", ghost_tenant, "never")
    )
    secrets = (b, queue_b, b_job.job_id, asked.request_id, name_b, secret_finding)
    return World(a, a_job.job_id, b_target, ghost, secrets)


async def outcome(call: Call, client: Client, target: Target) -> tuple[str, Any]:
    try:
        return OK, await call(client, target)
    except CallError as error:
        return error.code, error


def without_names(error: CallError, target: Target) -> tuple[str, str, str | None]:
    message = error.message
    for name, placeholder in target.names().items():
        message = message.replace(name, placeholder)
    return error.code, message, error.field


def leaked(answer: Any, secrets: tuple[str, ...]) -> list[str]:
    items = answer if isinstance(answer, list) else [answer]
    raw = b"".join(item.SerializeToString() for item in items)
    return [secret for secret in secrets if secret.encode() in raw]


@in_session_loop
@pytest.mark.parametrize("role", ROLES, ids=lambda role: role.value)
@pytest.mark.parametrize("method", RPCS)
async def test_every_rpc_answers_a_token_of_another_tenant_without_leaking(
    stack: Stack, world: World, method: str, role: Role
) -> None:
    probes = ROWS.get(method)
    assert probes is not None, f"{method} has no row in the tenant-isolation matrix: add one"
    client = stack.client(stack.keys.hs(sub=f"{role.value}@a.example", tenants=[world.a], roles=[role.value]))
    for probe in probes:
        expected = probe.expect[role]
        code, answer = await outcome(probe.call, client, world.b)
        assert code == expected, f"{method} ({probe.what}) as {role.value} of A: {code} {answer}"
        if code == OK:
            assert not leaked(answer, world.secrets), f"{method} ({probe.what}) showed B's data to {role.value} of A"
            continue
        ghost_code, ghost_answer = await outcome(probe.call, client, world.ghost)
        assert ghost_code == code, f"{method} ({probe.what}): {code} for B, {ghost_code} for a ghost"
        # Equal once the names asked about are set aside: nothing else of B's (its tenant behind a job id,
        # its job's name) is in the refusal, and nothing tells B's things from things that never were.
        assert without_names(answer, world.b) == without_names(ghost_answer, world.ghost), (
            f"{method} ({probe.what}) answers B's thing unlike a thing that does not exist"
        )


@in_session_loop
async def test_the_same_tokens_see_their_own_tenant(stack: Stack, world: World) -> None:
    """The refusals above are about the tenant: the same tokens read their own tenant's job and quota."""
    for role in ROLES:
        client = stack.client(stack.keys.hs(tenants=[world.a], roles=[role.value]))
        job = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=world.a_job))
        assert job.job_id == world.a_job
        listed = await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest(page_size=1000))
        assert [j.job_id for j in listed.jobs] == [world.a_job]
        quota = await client.call(client.quota.GetQuota, quota_pb2.GetQuotaRequest())
        assert {q.tenant for q in quota.queues} == {world.a}
        timeline = await client.call(client.audit.GetJobTimeline, audit_pb2.GetJobTimelineRequest(job_id=world.a_job))
        assert timeline.tenant == world.a


@in_session_loop
async def test_a_token_for_every_tenant_sees_bs_request_finding_and_report_rows(stack: Stack, world: World) -> None:
    """So the probes above ask about things that exist: B's request, finding and report rows."""
    admin = stack.client(stack.keys.admin())
    requests = await admin.call(
        admin.quota.ListQuotaRequests, quota_pb2.ListQuotaRequestsRequest(tenant=world.b.tenant)
    )
    assert [r.request_id for r in requests.requests] == [world.b.request_id]
    findings = await admin.call(
        admin.governance.ListFindings, governance_pb2.ListFindingsRequest(tenant=world.b.tenant)
    )
    assert [f.subject for f in findings.findings] == [world.b.job_id]
    report = await admin.call(admin.governance.GetReport, report_of_the_month())
    assert leaked(report, world.secrets)


@in_session_loop
async def test_the_governance_readers_of_a_see_their_own_findings_and_report_rows(stack: Stack, world: World) -> None:
    for role in ("operator", "auditor", "admin"):
        client = stack.client(stack.keys.hs(tenants=[world.a], roles=[role]))
        findings = await client.call(client.governance.ListFindings, governance_pb2.ListFindingsRequest())
        assert [(f.tenant, f.subject) for f in findings.findings] == [(world.a, world.a_job)], role
        report = await client.call(client.governance.GetReport, report_of_the_month())
        assert list(report.tenants) == [world.a]
        for table in (t for t in report.tables if t.name in ("interruptions", "findings", "quota")):
            tenant = list(table.columns).index("tenant")
            assert {row.cells[tenant].text for row in table.rows} == {world.a}, (role, table.name)
