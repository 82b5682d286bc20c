"""``fedsched up --kubernetes``: a Kubernetes cluster joined to the embedded service, end to end.

The real kube-apiserver (no kubelet: the test writes pod status as one would) and real PostgreSQL. A job
submitted over gRPC is placed on the Kubernetes node, gets its pod there, runs and succeeds; the cluster
is in the catalogue with its connector's counters in ``/metrics``; ``audit verify`` is 100% identical.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path

import pytest

from connectors.kubernetes import ConnectorConfig, KubeApi, KubeError, names
from connectors.kubernetes.kubeapi import MERGE_PATCH
from connectors.kubernetes.usage import UsageSettings
from events.catalog.types import ClusterId
from events.log.postgres import PostgresEventLog
from services.api.client import Client, ClientConfig
from services.api.pb import jobs_pb2
from services.audit.verify import verify
from services.runtime import up
from services.runtime.kubernetes import KubernetesJoin
from tests.connectors.kubernetes.builders import a_node, container_status, pod_status, running, terminated


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_for(predicate, timeout_s: float = 60.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not (result := await predicate()):
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.1)
    return result


@pytest.mark.asyncio(loop_scope="session")
@pytest.mark.postgres
@pytest.mark.kube
@pytest.mark.slow
async def test_a_job_submitted_to_fedsched_up_runs_on_a_joined_kubernetes_cluster(
    fresh_database: str, tmp_path: Path, kube_config: str
) -> None:
    cluster = f"kube-up-{os.getpid()}"
    node = f"{cluster}-n0"
    admin = await KubeApi.from_kubeconfig(kube_config)
    await admin.request("POST", "/api/v1/nodes", body=a_node(node).gpus(4).condition("Ready", "True").build())
    # No kubelet clears the taint the API server puts on a node it has not seen ready yet.
    await admin.request("PATCH", f"/api/v1/nodes/{node}", body={"spec": {"taints": None}}, content_type=MERGE_PATCH)
    api = f"127.0.0.1:{free_port()}"
    # No usage source: the API server is shared with other tests, whose exporter pods are not this cluster's.
    settings = ConnectorConfig(cluster=ClusterId(cluster), default_image="busybox:1.36", usage=UsageSettings(0))
    join = KubernetesJoin(settings, kube_config)
    config = up.UpConfig(
        data_dir=tmp_path, dsn=fresh_database, metrics_listen="127.0.0.1:0", api_listen=api, sim_clusters=()
    )
    config.kubernetes = (join,)
    started = await up.start(config)
    client = Client(ClientConfig(server=api, token=started.api_token))
    try:
        spec = jobs_pb2.JobSpec(
            name="train-on-kube",
            tenant="team-a",
            expected_runtime_s=60,
            resources=jobs_pb2.Resources(cpu_milli=2000, memory_mib=4096, gpus=2),
        )
        submitted = await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec))
        job_id = submitted.job_id
        selector = f"{names.LABEL_CLUSTER}={cluster},{names.LABEL_JOB}={names.job_label(job_id)}"

        async def pods() -> list[dict[str, object]]:
            listing = await admin.request("GET", "/api/v1/pods", query={"labelSelector": selector})
            return list(listing.get("items") or [])

        (pod,) = await wait_for(pods, 60, "the job's pod")
        assert pod["spec"]["nodeName"] == node  # type: ignore[index]
        meta = pod["metadata"]  # type: ignore[index]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        await admin.request(
            "PATCH",
            path,
            body={"status": pod_status("Running", container_status(**running()))},
            content_type=MERGE_PATCH,
        )

        async def status_is(wanted: str) -> bool:
            job = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
            return bool(job.status == wanted)

        await wait_for(lambda: status_is("running"), 60, "the job running")
        done = pod_status("Succeeded", container_status(**terminated(0)))
        await admin.request("PATCH", path, body={"status": done}, content_type=MERGE_PATCH)
        await wait_for(lambda: status_is("succeeded"), 60, "the job succeeded")

        body = started.metrics.render()
        assert f'fedsched_connector_nodes{{cluster="{cluster}"}} 1' in body
        assert f'fedsched_connector_pods_created_total{{cluster="{cluster}"}} 1' in body
        assert f'fedsched_consumer_lag{{component="connector-{cluster}"}}' in body
        assert started.metrics.failing() == []
    finally:
        await client.close()
        await up.stop(started)
        with contextlib.suppress(KubeError):
            await admin.request("DELETE", f"/api/v1/nodes/{node}")
        await admin.close()

    log = PostgresEventLog(fresh_database)
    await log.start()
    try:
        report = await verify(log)
    finally:
        await log.close()
    assert report.cycles >= 1 and report.identical_pct == 100.0, report.differences


def test_a_cluster_joined_twice_or_beside_a_fast_simulated_clock_is_refused_before_anything_starts(
    tmp_path: Path,
) -> None:
    join = KubernetesJoin(ConnectorConfig(cluster=ClusterId("k1")), "kubeconfig")
    twice = up.UpConfig(data_dir=tmp_path, sim_clusters=(), with_api=False, kubernetes=(join, join))
    with pytest.raises(up.SettingRefused, match="cluster k1 is named twice"):
        asyncio.run(up.start(twice))
    fast = up.UpConfig(data_dir=tmp_path, sim_speed=60.0, with_api=False, kubernetes=(join,))
    with pytest.raises(up.SettingRefused, match=r"--sim-speed 60\.0"):
        asyncio.run(up.start(fast))
