"""The unified resource view and quotas over gRPC: inventory events folded by the projections become
capacity per cluster x GPU model; quotas are set, requested and decided through governance events."""

from __future__ import annotations

import uuid

import pytest

from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    GpuDevice,
    GpuHealthReported,
    NodeObserved,
    NpuDevice,
    NpuHealthSample,
)
from events.catalog.topics import GOVERNANCE
from events.catalog.types import Health
from services.api.client import CallError
from services.api.pb import jobs_pb2, quota_pb2, resources_pb2
from tests.api.conftest import Stack
from tests.api.support import LogTail, append, envelope_of, new_request_id, spec

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]


def node(cluster: str, name: str, model: str, gpus: int, failed: int = 0, schedulable: bool = True) -> NodeObserved:
    devices = tuple(
        GpuDevice(index=i, model=model, memory_mib=81920, health=Health.FAILED if i < failed else Health.OK)
        for i in range(gpus)
    )
    return NodeObserved(
        cluster=cluster,
        node=name,
        generation=1,
        cpu_milli=64000,
        memory_mib=512000,
        gpus=devices,
        schedulable=schedulable,
    )


async def test_capacity_per_cluster_and_model_with_pending_demand(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    east, west, model = f"east-{tag}", f"west-{tag}", f"A100-{tag}"
    await append(
        stack.log,
        [
            ClusterRegistered(cluster=east, kind=ClusterKind.KUBERNETES, site="dc1", region="eu", currency="EUR"),
            node(east, "n1", model, 8, failed=1),
            node(east, "n2", model, 8, schedulable=False),
            node(west, "n1", model, 4),
            node(west, "n2", f"H100-{tag}", 8),
        ],
    )
    client = stack.client(stack.keys.hs(roles=["viewer"]))
    await stack.fold()
    before = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest())
    # Jobs of other tests that accept any model count for this one too.
    pending_before = sum(m.pending_milli for m in before.models if m.gpu_model == model)
    submitter = stack.client(stack.keys.hs())
    await submitter.call(
        submitter.jobs.SubmitJob,
        jobs_pb2.SubmitJobRequest(
            spec=spec(replicas=2, resources=jobs_pb2.Resources(gpus=4, gpu_models=[model])),
            client_request_id=new_request_id(),
        ),
    )
    await stack.fold()

    capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest())
    rows = {
        (c.cluster, c.gpu_model): (c.total_milli, c.healthy_milli, c.free_milli, c.nodes)
        for c in capacity.clusters
        if c.cluster in (east, west)
    }
    assert rows == {
        (east, model): (16000, 15000, 7000, 2),
        (west, model): (4000, 4000, 4000, 1),
        (west, f"H100-{tag}"): (8000, 8000, 8000, 1),
    }
    # A model no node has is accepted with a warning: the one probably meant, or the fleet's models.
    cases = (
        ([model], 1, ""),
        ([model.lower()], 1, f"did you mean {model}?"),
        (["B200"], 1, "the fleet has"),
        ([model], 9, f"no node of {model} has 9 GPUs (the largest has 8)"),  # one replica never fits
    )
    for asked, gpus, warned in cases:
        answer = await submitter.call(
            submitter.jobs.SubmitJob,
            jobs_pb2.SubmitJobRequest(
                spec=spec(resources=jobs_pb2.Resources(gpus=gpus, gpu_models=asked)), client_request_id=new_request_id()
            ),
        )
        assert answer.created and (warned in "\n".join(answer.warnings) if warned else not answer.warnings), asked
    await stack.fold()
    capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest())
    [a100] = [m for m in capacity.models if m.gpu_model == model]
    assert (a100.total_milli, a100.healthy_milli, a100.free_milli) == (20000, 19000, 11000)
    assert a100.pending_milli == pending_before + 8000 + 1000 + 9000

    only_west = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=west))
    assert {c.cluster for c in only_west.clusters} == {west}
    clusters = await client.call(client.resources.ListClusters, resources_pb2.ListClustersRequest())
    by_name = {c.cluster: c for c in clusters.clusters}
    assert (by_name[east].registered, by_name[east].region, by_name[east].nodes) == (True, "eu", 2)
    assert (by_name[west].registered, by_name[west].gpus) == (False, 12)
    first = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(cluster=east, page_size=1))
    second = await client.call(
        client.resources.ListNodes,
        resources_pb2.ListNodesRequest(cluster=east, page_size=1, page_token=first.next_page_token),
    )
    assert [n.node for n in first.nodes] + [n.node for n in second.nodes] == ["n1", "n2"]
    assert not second.next_page_token and first.nodes[0].gpu_capacity_milli == 7000
    # A GPU model filter is checked as the catalogue spells models (a NUL byte reached PostgreSQL: INTERNAL).
    for bad in ("\x00", "A100 80G"):
        with pytest.raises(CallError) as caught:
            await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(gpu_model=bad))
        assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", "gpu_model")


async def test_quota_is_set_by_an_admin_requested_by_a_submitter_and_decided_once(stack: Stack) -> None:
    tenant = f"quota-{uuid.uuid4().hex[:8]}"
    governance = await LogTail.of(stack.log, GOVERNANCE.name)
    admin = stack.client(stack.keys.admin())
    lines = [
        quota_pb2.QuotaLine(resource="gpu", guaranteed=8000, limit=16000),
        quota_pb2.QuotaLine(resource="gpu", gpu_model="H100", guaranteed=2000),
    ]
    await admin.call(admin.quota.SetQuota, quota_pb2.SetQuotaRequest(tenant=tenant, queue="research", lines=lines))
    with pytest.raises(CallError) as caught:
        await admin.call(
            admin.quota.SetQuota,
            quota_pb2.SetQuotaRequest(
                tenant=tenant, lines=[quota_pb2.QuotaLine(resource="gpu", guaranteed=5, limit=1)]
            ),
        )
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", "lines.0")
    await stack.fold()

    viewer = stack.client(stack.keys.hs(tenants=[tenant], roles=["viewer"]))
    answer = await viewer.call(viewer.quota.GetQuota, quota_pb2.GetQuotaRequest())
    [queue] = answer.queues
    assert (queue.tenant, queue.queue) == (tenant, "research")
    assert {(line.gpu_model, line.guaranteed) for line in queue.lines} == {("", 8000), ("H100", 2000)}
    with pytest.raises(CallError) as caught:
        await viewer.call(viewer.quota.GetQuota, quota_pb2.GetQuotaRequest(tenant="team-a"))
    assert caught.value.code == "PERMISSION_DENIED"

    submitter = stack.client(stack.keys.hs(tenants=[tenant]))
    ask = quota_pb2.RequestQuotaRequest(
        tenant=tenant,
        queue="research",
        resource="gpu",
        amount=4000,
        period_start_ms=1_900_000_000_000,
        period_end_ms=1_900_086_400_000,
        justification="paper deadline",
        client_request_id="ask-1",
    )
    made = await submitter.call(submitter.quota.RequestQuota, ask)
    again = await submitter.call(submitter.quota.RequestQuota, ask)
    assert made.created and not again.created and made.request_id == again.request_id
    with pytest.raises(CallError) as caught:
        await submitter.call(
            submitter.quota.DecideQuotaRequest,
            quota_pb2.DecideQuotaRequestRequest(request_id=made.request_id, approve=True),
        )
    assert caught.value.code == "PERMISSION_DENIED"
    with pytest.raises(CallError) as caught:
        await admin.call(
            admin.quota.DecideQuotaRequest,
            quota_pb2.DecideQuotaRequestRequest(request_id=made.request_id, approve=True, approved_amount=9000),
        )
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", "approved_amount")
    decided = await admin.call(
        admin.quota.DecideQuotaRequest,
        quota_pb2.DecideQuotaRequestRequest(request_id=made.request_id, approve=True, approved_amount=3000),
    )
    assert decided.decision == "approved"
    with pytest.raises(CallError) as caught:
        await admin.call(
            admin.quota.DecideQuotaRequest,
            quota_pb2.DecideQuotaRequestRequest(request_id=made.request_id, approve=False),
        )
    assert caught.value.code == "FAILED_PRECONDITION"

    events = [envelope_of(r) for r in await governance.read_all()]
    ours = [e for e in events if e is not None and getattr(e.data, "tenant", None) == tenant]
    assert [e.type.rsplit(".", 1)[-1] for e in ours] == ["QuotaSet", "QuotaRequestSubmitted", "QuotaRequestApproved"]
    approved = ours[-1].data
    assert (approved.approved_amount, approved.decided_by, approved.expires_ms) == (  # type: ignore[attr-defined]
        3000,
        "root@example.com",
        1_900_086_400_000,
    )


async def test_a_quota_request_key_reused_for_another_request_is_refused_naming_it(stack: Stack) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    submitter = stack.client(stack.keys.hs(tenants=[tenant]))
    ask = quota_pb2.RequestQuotaRequest(
        tenant=tenant,
        resource="gpu",
        amount=4000,
        period_start_ms=1_900_000_000_000,
        period_end_ms=1_900_086_400_000,
        justification="paper deadline",
        client_request_id="req-1",
    )
    made = await submitter.call(submitter.quota.RequestQuota, ask)
    again = await submitter.call(submitter.quota.RequestQuota, ask)
    assert made.created and (again.request_id, again.created) == (made.request_id, False)
    other = quota_pb2.RequestQuotaRequest()
    other.CopyFrom(ask)
    other.amount = 500
    with pytest.raises(CallError) as caught:
        await submitter.call(submitter.quota.RequestQuota, other)
    assert (caught.value.code, caught.value.field) == ("ALREADY_EXISTS", "client_request_id")
    assert "different quota request" in caught.value.message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"resource": "cpu", "gpu_model": "NVIDIA-H100-80GB-HBM3"}, "gpu_model"),
        ({"period_start_ms": 1_606_780_800_000, "period_end_ms": 1_606_867_200_000}, "period_end_ms"),  # 2020
    ],
)
async def test_a_quota_request_that_could_never_be_used_is_refused_naming_the_field(
    stack: Stack, change: dict[str, object], field: str
) -> None:
    tenant = f"team-{uuid.uuid4().hex[:8]}"
    submitter = stack.client(stack.keys.hs(tenants=[tenant]))
    now = stack.config.clock()
    body: dict[str, object] = {
        "tenant": tenant,
        "resource": "gpu",
        "amount": 500,
        "period_start_ms": now - 3_600_000,  # begun an hour ago, still running: fine
        "period_end_ms": now + 3_600_000,
        "justification": "dup",
        "client_request_id": "ask-1",
    }
    fine = await submitter.call(submitter.quota.RequestQuota, quota_pb2.RequestQuotaRequest(**body))  # type: ignore[arg-type]
    assert fine.created
    with pytest.raises(CallError) as caught:
        await submitter.call(
            submitter.quota.RequestQuota,
            quota_pb2.RequestQuotaRequest(**{**body, **change, "client_request_id": "ask-2"}),  # type: ignore[arg-type]
        )
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", field)


async def test_npus_per_cluster_and_model_in_capacity_and_the_cluster_list(stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    east, model = f"npu-east-{tag}", f"Ascend910B-{tag}"

    def npu_node(name: str, failed: int = 0, schedulable: bool = True) -> NodeObserved:
        devices = tuple(
            NpuDevice(index=i, model=model, memory_mib=65536, health=Health.FAILED if i < failed else Health.OK)
            for i in range(8)
        )
        return node(east, name, "A100", 0, schedulable=schedulable).model_copy(update={"npus": devices})

    registered = ClusterRegistered(cluster=east, kind=ClusterKind.KUBERNETES, site="dc1", region="eu", currency="EUR")
    await append(stack.log, [registered, npu_node("n1", failed=2), npu_node("n2", schedulable=False)])
    client = stack.client(stack.keys.hs(roles=["viewer"]))
    await stack.fold()
    capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=east))
    # 16 NPUs, 2 failed; free: the healthy ones of the schedulable node. No GPU row: the nodes have none.
    assert [(n.npu_model, n.nodes, n.total, n.healthy, n.free) for n in capacity.npus] == [(model, 2, 16, 14, 6)]
    assert not capacity.npus[0].hot, "a cordoned node's idle NPUs are not allocated: the model is not hot"
    # A job waiting for 2 x 4 NPUs of the model is its pending demand, against its 6 free NPUs (jobs of other
    # tests that accept any NPU model count for this one too).
    pending_before = capacity.npus[0].pending
    submitter = stack.client(stack.keys.hs())
    npu_job = spec(
        name="npu-wait", resources=jobs_pb2.Resources(cpu_milli=1000, memory_mib=1024, npus=4, npu_models=[model])
    )
    npu_job.replicas = 2
    await submitter.call(submitter.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=npu_job, client_request_id=tag))
    await stack.fold()
    capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=east))
    [shown] = capacity.npus
    assert shown.pending == pending_before + 8 and shown.congestion_milli == shown.pending * 1000 // 6
    assert [c for c in capacity.clusters if c.cluster == east] == []
    clusters = await client.call(client.resources.ListClusters, resources_pb2.ListClustersRequest())
    [listed] = [c for c in clusters.clusters if c.cluster == east]
    assert [(n.npu_model, n.total, n.healthy, n.free) for n in listed.npus] == [(model, 16, 14, 6)]
    nodes = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(cluster=east))
    assert [(n.node, n.npus, n.npus_healthy, n.npus_free) for n in nodes.nodes] == [("n1", 8, 6, 6), ("n2", 8, 8, 8)]
    # A health report of n1: its two failed NPUs are back, NPU 2 degraded, NPU 7 failed.
    states = {2: Health.DEGRADED, 7: Health.FAILED}
    report = GpuHealthReported(
        cluster=east,
        node="n1",
        npus=tuple(
            NpuHealthSample(index=i, health=states.get(i, Health.OK), errors=int(i in states)) for i in range(8)
        ),
    )
    await append(stack.log, [report])
    await stack.fold()
    capacity = await client.call(client.resources.GetCapacity, resources_pb2.GetCapacityRequest(cluster=east))
    assert [(n.total, n.healthy, n.degraded, n.failed, n.free) for n in capacity.npus] == [(16, 15, 1, 1, 7)]
    nodes = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest(cluster=east))
    assert [(n.node, n.npus_healthy, n.npus_degraded, n.npus_free) for n in nodes.nodes] == [
        ("n1", 7, 1, 7),
        ("n2", 8, 0, 8),
    ]
