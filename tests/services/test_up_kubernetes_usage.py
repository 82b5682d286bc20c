"""GPU usage of a Kubernetes cluster end to end (issue 22): ``fedsched up``'s components in one process on
real PostgreSQL (no simulated cluster), the Kubernetes connector on the real kube-apiserver, and a real
HTTP server answering as the NVIDIA DCGM exporters of two of its nodes with the recorded output
(``tests/fixtures/dcgm``), its pod names those of the pods the connector made.

- A two-replica training gang, one replica per node, measured at 92/88% on one and 31% on the other, and
  a notebook at 0%: the governance report shows the cluster's GPU utilisation from those measurements;
  the gang's slow replica is found straggling; the idle notebook is warned, then reclaimed, and its pod
  stopped while the training job runs on.
- The cluster's third node runs no exporter (its GPU model is measured nowhere): a job holds one of its
  GPUs, and the report says "no usage data" for that row, not 0% used, 100% idle.

No kubelet runs: the test writes pod status as one would. ``audit verify`` re-executes every cycle. (One
API server serves one cluster: a second connector on it would see the same nodes, so the cluster without
any usage source is shown by ``tests/governance/test_report_unmeasured_gpus.py`` on report rows.)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from connectors.kubernetes import KubeApi, KubernetesConnector
from connectors.kubernetes.throttle import RateLimiter
from connectors.kubernetes.usage import UsageSettings
from events.catalog.decisions import JobReclaimRequested
from events.catalog.governance import JobIdleWarning
from events.catalog.inventory import NodeUsageReported
from events.plumbing.tasks import cancel_and_wait
from services.api.pb import jobs_pb2, resources_pb2
from services.cli.gov_report_cmd import show_report
from services.governance.core.config import GovConfig, IdleRule
from services.runtime import up
from tests.connectors.kubernetes.builders import a_node, container_status, pod_status, running
from tests.connectors.kubernetes.support import Kube, config, unique
from tests.connectors.kubernetes.test_usage_scrape import (
    FIXTURES,
    Exporters,
    exporter_pod,
    host_address,
    remove_exporters,
)
from tests.services.embedded import free_port, stack, verified_history, wait_for

pytestmark = [
    pytest.mark.asyncio(loop_scope="session"),
    pytest.mark.postgres,
    pytest.mark.kube,
    pytest.mark.slow,
    pytest.mark.timeout(300),
]

RUNNING = pod_status("Running", container_status(**running()))
# Idle for 3 s, then 2 s of grace: the default rule's 45 minutes in wall time a test can wait.
QUICK_IDLE = GovConfig(idle=(IdleRule(idle_after_ms=3_000, grace_ms=2_000),))


async def test_kubernetes_usage_reaches_the_report_and_an_idle_notebook_is_reclaimed(
    fresh_database: str, kube_config: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = await KubeApi.from_kubeconfig(kube_config, limiter=RateLimiter(200.0, 400))
    kube = Kube(api, Path(kube_config).parent)
    exporters = Exporters()
    await exporters.start()
    lit = unique("k8s-usage")
    node_a, node_b, node_c = f"{lit}-a", f"{lit}-b", f"{lit}-c"
    # GPU models no other test's nodes have, so the scheduler can only choose these.
    for node, product in ((node_a, "NVIDIA-H200"), (node_b, "NVIDIA-A100-PCIE-40GB"), (node_c, "NVIDIA-L40S")):
        await ready_node(kube, a_node(node).gpus(4, product).condition("Ready", "True").build())
    namespace = unique("gpu-operator")
    await api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    await exporter_pod(kube, namespace, node_a, host_address(), "nvidia-dcgm-exporter")
    await exporter_pod(kube, namespace, node_b, "127.0.0.2", "nvidia-dcgm-exporter")
    usage = UsageSettings(interval_s=1.0, scrape_s=0.25, timeout_s=5.0, namespace=namespace, port=exporters.port)

    settings = up.UpConfig(
        data_dir=tmp_path / "data",
        dsn=fresh_database,
        metrics_listen="127.0.0.1:0",
        sim_clusters=(),
        api_listen=f"127.0.0.1:{free_port()}",
        governance=QUICK_IDLE,
    )
    connectors: list[Any] = []
    try:
        async with stack(settings) as (stack_running, client):
            connector_api = await KubeApi.from_kubeconfig(kube_config, limiter=RateLimiter(200.0, 400))
            connector = KubernetesConnector(config(lit, usage=usage), stack_running.log, connector_api)
            connectors.append((connector, _start(connector)))

            async def models() -> dict[str, str]:
                answer = await client.call(client.resources.ListNodes, resources_pb2.ListNodesRequest())
                return {n.node: n.gpu_model for n in answer.nodes if n.gpu_model}

            await wait_for(lambda: _has(models, {node_a, node_b, node_c}), 60)
            model = await models()

            async def submit(name: str, tenant: str, kind: str, gpus: int, *models: str, replicas: int = 1) -> str:
                resources = jobs_pb2.Resources(cpu_milli=1000, memory_mib=2048, gpus=gpus, gpu_models=list(models))
                spec = jobs_pb2.JobSpec(name=name, tenant=tenant, kind=kind, resources=resources, replicas=replicas)
                request = jobs_pb2.SubmitJobRequest(spec=spec, client_request_id=name)
                return str((await client.call(client.jobs.SubmitJob, request)).job_id)

            # 3 GPUs a replica on nodes of 4: one replica on each of the two nodes its models allow.
            train = await submit("train", "team-a", "training", 3, model[node_a], model[node_b], replicas=2)
            notebook = await submit("notebook", "team-a", "notebook", 1, model[node_b])
            unseen = await submit("unseen", "team-b", "batch", 1, model[node_c])
            pods: dict[tuple[str, str], dict[str, Any]] = {}  # (job, node) -> its pod there
            for job, count in ((train, 2), (notebook, 1), (unseen, 1)):

                async def made(j: str = job, n: int = count) -> bool:
                    return len(await kube.job_pods(lit, j)) == n

                try:
                    await wait_for(made, 60)
                except AssertionError:
                    answer = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job))
                    raise AssertionError(f"no pods of {job}: {answer}") from None
                for pod in await kube.job_pods(lit, job):
                    pods[(job, pod["spec"]["nodeName"])] = pod
                    await kube.set_pod_status(pod, RUNNING)
            assert {node for job, node in pods if job == train} == {node_a, node_b}

            def named(fixture: str, *renames: tuple[str, str, str]) -> str:
                """The recorded answer with its pods (namespace, name) those the connector made."""
                text = (FIXTURES / fixture).read_text()
                for old_namespace, old_pod, job in renames:
                    meta = pods[(job, node_a if fixture == "node-a.prom" else node_b)]["metadata"]
                    old = f'namespace="{old_namespace}",pod="{old_pod}"'
                    text = text.replace(old, f'namespace="{meta["namespace"]}",pod="{meta["name"]}"')
                return text

            exporters.answers = {
                # GPUs 0-1 at 92/88%: the gang's replica on node a
                host_address(): named("node-a.prom", ("fedsched-team-a", "train-job-1-0", train)),
                # GPU 0 at 0%: the notebook; GPU 1 at 31%: the gang's replica on node b (sharing it)
                "127.0.0.2": named(
                    "node-b.prom",
                    ("fedsched-team-a", "idle-job-1-0", notebook),
                    ("fedsched-team-b", "serve-job-1-0", train),
                ),
            }

            async def report() -> dict[str, Any]:
                args = argparse.Namespace(period="1d", until=None, tenant="", format="json", out=None)
                assert await show_report(args, client) == 0
                return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]

            async def measured() -> bool:
                rows = (await report())["utilisation"]
                return any(r["cluster"] == lit and r["used_pct"] not in (0.0, "no usage data") for r in rows)

            try:
                await wait_for(measured, 60)
            except AssertionError:
                raise AssertionError(f"no utilisation measured: {await report()}") from None
            shown = await report()
            rows = {(r["cluster"], r["gpu_model"]): r for r in shown["utilisation"]}
            fast, slow = rows[(lit, model[node_a])], rows[(lit, model[node_b])]
            # Node a: the replica's GPUs at 92 and 88% (90%); node b: the replica at 31%, the notebook at 0%.
            # (Seconds of GPU time: the GPU-hours round to a few thousandths; the shares tell.)
            assert 0 < fast["used_pct"] <= 90.0 and isinstance(slow["used_pct"], float)
            assert slow["used_pct"] < fast["used_pct"] and slow["idle_gpu_h"] != "no usage data"
            unmeasured = rows[(lit, model[node_c])]
            assert (unmeasured["used_pct"], unmeasured["idle_gpu_h"]) == ("no usage data", "no usage data")
            idle = {r["tenant"]: r for r in shown["idle"]}
            assert idle["team-b"]["idle_pct"] == "no usage data"
            assert idle["team-b"]["unmeasured_gpu_h"] == idle["team-b"]["allocated_gpu_h"]

            async def notebook_stopped() -> bool:
                await kube_finish_deletions(kube, lit, notebook)
                answer = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=notebook))
                return answer.status == "cancelled"

            try:
                await wait_for(notebook_stopped, 60)
            except AssertionError:
                answer = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=notebook))
                raise AssertionError(f"notebook not stopped: {answer}") from None
            still = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=train))
            assert still.status == "running", "the training job is no notebook: not reclaimed"
            found = [f for f in (await report())["findings"] if f["subject"] == train]
            assert [f["rule"] for f in found] == ["straggling-gang"], found
    finally:
        for connector, task in connectors:
            await cancel_and_wait([task], again_after_s=10.0)
            await connector.api.close()
        for node in (node_a, node_b, node_c):
            await kube.delete_node(node)
        await remove_exporters(kube, namespace)
        await exporters.close()
        await api.close()

    verified, events = await verified_history(fresh_database)
    assert verified.identical_pct == 100.0, verified.differences
    reports = [e.data for e in events if isinstance(e.data, NodeUsageReported)]
    assert {r.node for r in reports} == {node_a, node_b}, "the node without an exporter reported no usage"
    [warning] = [e.data for e in events if isinstance(e.data, JobIdleWarning) and e.data.job_id == notebook]
    assert warning.rule == "idle-notebook"
    [reclaim] = [e.data for e in events if isinstance(e.data, JobReclaimRequested) and e.data.job_id == notebook]
    assert reclaim.cluster == lit and reclaim.message.startswith("1 GPU idle for ")


async def ready_node(kube: Kube, node: dict[str, Any]) -> None:
    """A node as its kubelet registers it and the node controller then sees it: Ready, and without the
    not-ready taint the API server puts on a node that registers (no controller runs to lift it)."""
    await kube.node(node)
    await kube.patch_node(node["metadata"]["name"], {"spec": {"taints": None}})


def _start(connector: KubernetesConnector) -> Any:
    import asyncio

    return asyncio.create_task(connector.run())


async def _has(models: Any, wanted: set[str]) -> bool:
    return wanted <= set(await models())


async def kube_finish_deletions(kube: Kube, cluster: str, job: str) -> None:
    """Play the kubelet for pods being deleted: they stop (the connector then reports the run's end)."""
    for pod in await kube.job_pods(cluster, job):
        if pod["metadata"].get("deletionTimestamp"):
            await kube.set_pod_status(pod, pod_status("Failed", container_status(**_killed())))


def _killed() -> dict[str, Any]:
    return {"state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
