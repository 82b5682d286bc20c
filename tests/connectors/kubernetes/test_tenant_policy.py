"""A tenant's policy on the real API server (issue 22, item 5): an image from a registry not allowed (by
the tenant or by the cluster) fails the launch with the reason and makes no pod; a tenant's pods name its
pull secrets, copied into its namespace; its namespace gets a ResourceQuota and a LimitRange from its
quota, kept up to date as the quota changes, also across a restart of the connector (from the log alone).

The test plays scheduler and governance (it publishes submissions, decisions, ``TenantRegistered`` and
``QuotaSet``), kubelet, and the quota controller (``quota_controller``).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
import pytest_asyncio

from connectors.kubernetes import KubernetesConnector, names
from connectors.kubernetes.kubeapi import KubeError
from connectors.kubernetes.quantity import parse
from events.catalog.governance import QuotaSet, TenantRegistered
from events.catalog.images import ImagePolicy
from events.catalog.jobs import JobFailed
from events.catalog.reasons import ReasonCode
from events.catalog.types import QueueId, QuotaLine, ResourceKind, TenantId
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement
from .quota_controller import quota_controller
from .support import Kube, Obj, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]

CLUSTER_ALLOWS = ("registry.example", "registry.example.com", "nvcr.io")
SECRET_DATA = {".dockerconfigjson": base64.b64encode(b'{"auths": {"nvcr.io": {"auth": "dGVzdDp0ZXN0"}}}').decode()}


class Scene:
    def __init__(self, kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running, cluster: str) -> None:
        self.kube, self.tap, self.scheduler, self.connectors = kube, tap, scheduler, connectors
        self.cluster = cluster
        self.node = f"{cluster}-n"
        self.secrets = unique("pull-src")
        self.connector: KubernetesConnector | None = None

    async def start(self) -> KubernetesConnector:
        settings = config(self.cluster, pull_secret_namespace=self.secrets, allowed_registries=CLUSTER_ALLOWS)
        self.connector = await self.connectors.start(settings)
        return self.connector

    async def tenant(self, tenant: str, policy: ImagePolicy | None) -> None:
        """Register the tenant and wait until the connector knows (governance and decisions are two topics,
        with no order between them)."""
        await self.scheduler.publish([TenantRegistered(tenant=TenantId(tenant), display_name=tenant, images=policy)])
        assert self.connector is not None
        book = self.connector.executor.tenants
        await wait_until(lambda: book.images(TenantId(tenant)) == policy and tenant in book.tenants(), 30, "the tenant")

    async def place(self, tenant: str, **job: Any) -> str:
        job_id = unique("job")
        await self.scheduler.publish(
            [a_job(job_id, tenant=tenant, **job), a_placement(job_id, (self.node,), cluster=self.cluster)]
        )
        return job_id

    async def failed(self, job_id: str) -> JobFailed:
        (failed,) = await self.tap.wait(JobFailed, job_id=job_id)
        assert failed.reason is ReasonCode.LAUNCH_FAILED
        return failed  # type: ignore[no-any-return]

    async def pods(self, job_id: str) -> list[Obj]:
        return await wait_until(lambda: self.kube.job_pods(self.cluster, job_id), 30, f"the pods of {job_id}")  # type: ignore[no-any-return]

    async def get(self, path: str) -> Obj | None:
        try:
            return await self.kube.api.request("GET", path)
        except KubeError as error:
            if error.status == 404:
                return None
            raise


@pytest_asyncio.fixture(loop_scope="session")
async def scene(kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running) -> AsyncIterator[Scene]:
    the_scene = Scene(kube, tap, scheduler, connectors, unique("policy"))
    await kube.node(a_node(the_scene.node).gpus(8).build())
    await kube.api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": the_scene.secrets}})
    await the_scene.start()
    yield the_scene
    await delete_nodes(kube, (the_scene.node,))


async def test_an_image_from_a_registry_not_allowed_fails_the_launch_and_makes_no_pod(scene: Scene) -> None:
    tenant = unique("tenant-img")
    await scene.tenant(tenant, ImagePolicy(registries=("registry.example.com/team",)))
    evil = await scene.place(tenant, template={"image": "registry.example.com.evil.io/team/x:1"})
    port = await scene.place(
        tenant, template={"spec": {"containers": [{"name": "m", "image": "registry.example.com:5000/team/x"}]}}
    )
    default = await scene.place(unique("tenant-free"), template={"command": ["true"]})  # busybox:1.36, the default
    allowed = await scene.place(tenant, template={"image": "registry.example.com/team/trainer@sha256:" + "a" * 64})

    assert "comes from registry.example.com.evil.io/team/x, which tenant" in (await scene.failed(evil)).message
    assert (
        "'registry.example.com:5000/team/x' comes from registry.example.com:5000/team/x"
        in (await scene.failed(port)).message
    )
    message = (await scene.failed(default)).message
    assert message.startswith(
        "the connector's default image: image 'busybox:1.36' comes from docker.io/library/busybox"
    )
    assert f"which cluster {scene.cluster} does not allow" in message
    assert len(await scene.pods(allowed)) == 1  # read after the others: they were handled, and made nothing
    for job_id in (evil, port, default):
        assert await scene.kube.job_pods(scene.cluster, job_id) == []


async def test_a_tenants_pods_name_its_pull_secrets_copied_into_its_namespace(scene: Scene) -> None:
    secret = {"metadata": {"name": "team-pull"}, "type": "kubernetes.io/dockerconfigjson", "data": SECRET_DATA}
    await scene.kube.api.request("POST", f"/api/v1/namespaces/{scene.secrets}/secrets", body=secret)
    tenant, missing = unique("tenant-pull"), unique("tenant-nopull")
    await scene.tenant(tenant, ImagePolicy(pull_secrets=("team-pull",)))
    await scene.tenant(missing, ImagePolicy(pull_secrets=("absent",)))
    job = await scene.place(tenant)
    (pod,) = await scene.pods(job)
    assert pod["spec"]["imagePullSecrets"] == [{"name": "team-pull"}]
    copy = await scene.get(f"/api/v1/namespaces/{pod['metadata']['namespace']}/secrets/team-pull")
    assert copy is not None and (copy["type"], copy["data"]) == ("kubernetes.io/dockerconfigjson", SECRET_DATA)
    assert copy["metadata"]["labels"][names.MANAGED_BY] == "fedsched"

    failed = await scene.failed(await scene.place(missing))
    assert f"pull secret 'absent' of tenant {missing} is not in namespace '{scene.secrets}'" in failed.message


def gib(text: str) -> Decimal:
    return parse(text) / 2**30


async def test_a_tenant_namespace_gets_a_quota_and_limits_from_its_quota_kept_up_to_date(scene: Scene) -> None:
    tenant = TenantId(unique("tenant-quota"))
    await scene.tenant(tenant, ImagePolicy())  # no limit: what the book shows once it has read it
    namespace = f"fedsched-{tenant}"
    quota_path = f"/api/v1/namespaces/{namespace}/resourcequotas/fedsched-quota"
    limits_path = f"/api/v1/namespaces/{namespace}/limitranges/fedsched-limits"

    async def hard_is(expected: dict[str, Decimal]) -> bool:
        quota = await scene.get(quota_path)
        hard = (quota or {}).get("spec", {}).get("hard", {})
        return {k: parse(v) for k, v in hard.items()} == expected

    async def quota(*lines: QuotaLine, queue: str = "default") -> None:
        await scene.scheduler.publish([QuotaSet(tenant=tenant, queue=QueueId(queue), lines=lines, set_by="ops")])

    cpu, memory, gpu = ResourceKind.CPU, ResourceKind.MEMORY, ResourceKind.GPU
    await scene.pods(await scene.place(tenant))  # no quota in the log: the namespace is left as it is
    assert await scene.get(limits_path) is None and await scene.get(quota_path) is None

    async with quota_controller(scene.kube.api):
        await quota(
            QuotaLine(resource=cpu, guaranteed=32_000, limit=64_000),
            QuotaLine(resource=memory, guaranteed=131_072, limit=262_144),
            QuotaLine(resource=gpu, guaranteed=4_000, limit=7_500),
        )
        await quota(QuotaLine(resource=cpu, guaranteed=1_000, limit=2_000), queue="small")  # that queue's alone
        expected = {
            "requests.cpu": Decimal(64),
            "requests.memory": Decimal(256 * 2**30),
            "requests.nvidia.com/gpu": Decimal(8),
            "requests.amd.com/gpu": Decimal(8),  # each vendor's GPUs alone
        }
        await wait_until(lambda: hard_is(expected), 30, "the ResourceQuota of the tenant-wide limits")
        limits = await scene.get(limits_path)
        assert limits is not None
        (item,) = limits["spec"]["limits"]
        assert (parse(item["max"]["cpu"]), gib(item["max"]["memory"])) == (Decimal(64), Decimal(256))
        assert item["default"] == item["max"]

        # fedsched's own pods are admitted under both (the quota controller has taken the quota in).
        assert len(await scene.pods(await scene.place(tenant))) == 1

        # The quota changes: memory without a limit caps nothing, cpu halves.
        await quota(
            QuotaLine(resource=cpu, guaranteed=16_000, limit=32_000),
            QuotaLine(resource=memory, guaranteed=131_072),
            QuotaLine(resource=gpu, guaranteed=4_000, limit=7_500),
        )
        gpus = {"requests.nvidia.com/gpu": Decimal(8), "requests.amd.com/gpu": Decimal(8)}
        await wait_until(lambda: hard_is({"requests.cpu": Decimal(32), **gpus}), 30, "the new caps")

        # A change while the connector is away reaches the namespace when it starts again.
        assert scene.connector is not None
        await scene.connectors.stop(scene.connector)
        await quota(QuotaLine(resource=gpu, guaranteed=1_000, limit=2_000))
        await scene.start()
        two = {"requests.nvidia.com/gpu": Decimal(2), "requests.amd.com/gpu": Decimal(2)}
        await wait_until(lambda: hard_is(two), 30, "the caps set while away")

        await quota(QuotaLine(resource=gpu, guaranteed=1_000))  # nothing capped: no ResourceQuota
        await wait_until(lambda: _gone(scene, quota_path), 30, "the ResourceQuota deleted")
        limits = await scene.get(limits_path)
        assert limits is not None
        assert limits["spec"]["limits"][0] == {
            "type": "Container",
            "defaultRequest": {"cpu": "100m", "memory": "256Mi"},  # no max, no default limit: nothing capped
        }


async def _gone(scene: Scene, path: str) -> bool:
    with contextlib.suppress(KubeError):
        return await scene.get(path) is None
    return False
