"""The connector as deployed: the least-privilege RBAC manifest is enough (pods, and a tenant's quota objects
and pull secret copies), and the CLI runs it."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from connectors.kubernetes import KubeApi, KubeError
from events.catalog.decisions import JobPreemptionRequested
from events.catalog.governance import QuotaSet, TenantRegistered
from events.catalog.images import ImagePolicy
from events.catalog.inventory import ClusterRegistered, NodeObserved
from events.catalog.jobs import JobKind, JobPreempted, JobStarted
from events.catalog.types import ClusterId, CycleId, JobId, QuotaLine, ResourceKind, TenantId
from events.log.publisher import Publisher
from tests.soak.components import free_ports, scrape

from .builders import a_job, a_node, a_placement, container_status, pod_status, running
from .quota_controller import quota_controller
from .support import Kube, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]

RBAC = Path(__file__).resolve().parents[3] / "deploy" / "kubernetes" / "rbac.yaml"
COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
    "Secret": "/api/v1/namespaces/{namespace}/secrets",
}


async def apply(kube: Kube, manifest: dict[str, Any]) -> None:
    path = COLLECTIONS[manifest["kind"]].format(namespace=manifest["metadata"].get("namespace", ""))
    try:
        await kube.api.request("POST", path, body=manifest)
    except KubeError as error:
        if error.status != 409:
            raise


async def test_the_rbac_manifest_is_all_the_connector_needs(
    kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running, kube_config: str
) -> None:
    manifests = [m for m in yaml.safe_load_all(RBAC.read_text()) if m]
    assert [m["kind"] for m in manifests] == [
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
    ]
    for manifest in manifests:
        await apply(kube, manifest)  # the real API server accepts every object
    # The test's connector user gets the same ClusterRole the service account has.
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "fedsched-connector-test-user"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "fedsched-connector"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "fedsched-connector"}],
    }
    await apply(kube, binding)
    pull_secrets = {  # and the Role that lets it read the pull secrets kept in fedsched-system
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "fedsched-connector-test-user", "namespace": "fedsched-system"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fedsched-connector-pull-secrets"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "fedsched-connector"}],
    }
    await apply(kube, pull_secrets)
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "rbac-pull", "namespace": "fedsched-system"}}
    await apply(kube, {**secret, "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "e30="}})
    user_config = str(Path(kube_config).parent / "connector.kubeconfig")
    user = await KubeApi.from_kubeconfig(user_config)
    try:
        with pytest.raises(KubeError) as refused:
            await user.request("GET", "/api/v1/secrets")
        assert refused.value.status == 403  # least privilege: not an admin
    finally:
        await user.close()

    cluster = unique("rbac")
    node = f"{cluster}-n"
    try:
        await kube.node(a_node(node).gpus(8).build())
        connector = await connectors.start(
            config(cluster, pull_secret_namespace="fedsched-system"), kubeconfig=user_config
        )
        await tap.wait(NodeObserved, node=node)
        job, tenant = unique("train"), TenantId(unique("tenant"))
        # A tenant with a pull secret and a quota: the connector copies the one and writes the other.
        policy = ImagePolicy(pull_secrets=("rbac-pull",))
        line = QuotaLine(resource=ResourceKind.GPU, guaranteed=1_000, limit=4_000)
        await scheduler.publish(
            [
                TenantRegistered(tenant=tenant, display_name=tenant, images=policy),
                QuotaSet(tenant=tenant, lines=(line,), set_by="ops"),
            ]
        )
        book = connector.executor.tenants
        await wait_until(lambda: book.images(tenant) == policy and book.quotas(tenant), 30, "the tenant's settings")
        async with quota_controller(kube.api):
            training = a_job(job, tenant=tenant, kind=JobKind.TRAINING)  # a run with a Service
            await scheduler.publish([training, a_placement(job, (node,), cluster=cluster)])
            (pod,) = await wait_until(lambda: kube.job_pods(cluster, job), 30, "the pod")
        assert len(await _services(kube, cluster, job)) == 1
        assert pod["spec"]["imagePullSecrets"] == [{"name": "rbac-pull"}]
        namespace = pod["metadata"]["namespace"]
        quota = await kube.api.request("GET", f"/api/v1/namespaces/{namespace}/resourcequotas/fedsched-quota")
        assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4", "requests.amd.com/gpu": "4"}
        await kube.api.request("GET", f"/api/v1/namespaces/{namespace}/secrets/rbac-pull")
        await kube.set_pod_status(pod, pod_status("Running", container_status(**running())))
        await tap.wait(JobStarted, job_id=job)
        await scheduler.publish(
            [JobPreemptionRequested(job_id=JobId(job), cycle_id=CycleId("c"), cluster=ClusterId(cluster), rule="r")]
        )
        await wait_until(lambda: _deleting(kube, cluster, job), 30, "the pod being deleted")
        await kube.delete_pod(pod, 0)  # the kubelet's final delete
        await tap.wait(JobPreempted, job_id=job)
        await wait_until(lambda: _none(kube, cluster, job), 30, "the pod gone (finalizer removed by the connector)")
        await wait_until(lambda: _no_services(kube, cluster, job), 30, "the run's Service deleted by the connector")
    finally:
        await delete_nodes(kube, (node,))


async def _deleting(kube: Kube, cluster: str, job: str) -> bool:
    pods = await kube.job_pods(cluster, job)
    return bool(pods) and all(p["metadata"].get("deletionTimestamp") for p in pods)


async def _none(kube: Kube, cluster: str, job: str) -> bool:
    return not await kube.job_pods(cluster, job)


async def _scraped_with_nodes(port: int, labels: str) -> dict[str, float] | None:
    scraped = await scrape(port)
    return scraped if scraped.get(f"fedsched_connector_nodes{labels}") == 1 else None


async def _get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.0\r\n\r\n".encode())
        raw = (await asyncio.wait_for(reader.read(), 10)).decode()
    finally:
        writer.close()
    head, _, body = raw.partition("\r\n\r\n")
    return int(head.split()[1]), body


async def _services(kube: Kube, cluster: str, job: str) -> list[Any]:
    selector = f"fedsched.io/cluster={cluster},fedsched.io/job-id={job}"
    listing = await kube.api.request("GET", "/api/v1/services", query={"labelSelector": selector})
    return list(listing.get("items") or [])


async def _no_services(kube: Kube, cluster: str, job: str) -> bool:
    return not await _services(kube, cluster, job)


@pytest.mark.slow
async def test_fedsched_connector_kubernetes_runs_until_sigterm(
    kube: Kube, tap: Tap, kube_config: str, log_url: str, tmp_path: Path
) -> None:
    cluster = unique("cli")
    node = f"{cluster}-n"
    await kube.node(a_node(node).gpus(2).build())
    settings = tmp_path / "connector.yaml"
    settings.write_text(
        "cluster: {site: from-file, currency: EUR, datasets: [imagenet], gpu_rates: {NVIDIA-A100-SXM4-80GB: 3000000}}\n"
        "connector: {cancel_grace_s: 5}\n"
    )
    url = log_url  # kafka://host:port or the PostgreSQL DSN, as the operator would pass it
    (port,) = free_ports(1)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        "connector",
        "kubernetes",
        "--cluster",
        cluster,
        "--kubeconfig",
        kube_config,
        "--log",
        url,
        "--config",
        str(settings),
        "--site",
        "lab",
        "--metrics",
        f"127.0.0.1:{port}",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        registered = (await tap.wait(ClusterRegistered, cluster=cluster, timeout_s=60))[0]
        assert (registered.site, registered.currency, registered.datasets) == ("lab", "EUR", ("imagenet",))  # flag wins
        assert {r.model: r.micro_per_gpu_hour for r in registered.gpu_rates} == {"NVIDIA-A100-SXM4-80GB": 3_000_000}
        await tap.wait(NodeObserved, cluster=cluster, node=node)
        labels = f'{{cluster="{cluster}"}}'
        scraped = await wait_until(lambda: _scraped_with_nodes(port, labels), 30, "/metrics counting the node")
        assert scraped[f"fedsched_connector_reachable{labels}"] == 1
        assert scraped[f'fedsched_connector_lists_total{{cluster="{cluster}",resource="nodes"}}'] >= 1
        assert "fedsched_consumer_lag" in " ".join(scraped)
        assert await _get(port, "/healthz") == (200, "ok\n")
        process.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(process.communicate(), 30)
        assert process.returncode == 0, err.decode()[-2000:]
        assert f"kubernetes connector {cluster}" in out.decode()
        assert "event=connector_stopped" in err.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await delete_nodes(kube, (node,))
