"""Job kinds on a real API server: a training gang finds its peers, a service is reachable and restarted,
a notebook is reachable, Services go when the run ends, and a template asking GPUs the job never asked
for is refused before any pod exists.

The test plays scheduler (it publishes ``JobSubmitted`` and decisions) and kubelet (it writes pod status
through the status subresource and finishes deletions with grace 0).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from connectors.kubernetes import KubernetesConnector, names
from events.catalog.inventory import GpuHealthReported
from events.catalog.jobs import JobCancelRequested, JobFailed, JobKind, JobStarted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import JobId
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement, container_status, pod_status, running, terminated
from .support import Kube, Obj, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]

RUNNING = pod_status("Running", container_status(**running()))


class Cluster:
    def __init__(self, kube: Kube, tap: Tap, scheduler: Publisher, name: str, nodes: list[str]) -> None:
        self.kube, self.tap, self.scheduler, self.name, self.nodes = kube, tap, scheduler, name, nodes
        self.connectors: Running | None = None
        self.connector: KubernetesConnector | None = None

    async def place(self, job_id: str, replicas: int, gpus: int = 1, **job: Any) -> None:
        nodes = tuple(self.nodes[i % len(self.nodes)] for i in range(replicas))
        submitted = a_job(job_id, gpus=gpus, replicas=replicas, **job)
        await self.scheduler.publish([submitted, a_placement(job_id, nodes, cluster=self.name, gpus_each=gpus)])

    async def pods(self, job_id: str, count: int) -> list[Obj]:
        async def check() -> list[Obj] | None:
            found = await self.kube.job_pods(self.name, job_id)
            return found if len(found) == count else None

        result: list[Obj] = await wait_until(check, 30, f"{count} pods of {job_id}")
        return result

    async def services(self, job_id: str) -> list[Obj]:
        selector = f"{names.LABEL_CLUSTER}={self.name},{names.LABEL_JOB}={job_id}"
        listing = await self.kube.api.request("GET", "/api/v1/services", query={"labelSelector": selector})
        return sorted(listing.get("items") or [], key=lambda s: s["metadata"]["name"])

    async def no_services(self, job_id: str) -> None:
        async def none() -> bool:
            return not await self.services(job_id)

        await wait_until(none, 30, f"no Services of {job_id}")


@pytest_asyncio.fixture(loop_scope="session")
async def cluster(kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running) -> AsyncIterator[Cluster]:
    name = unique("kinds")
    nodes = [f"{name}-n{i}" for i in range(4)]
    for node in nodes:
        await kube.node(a_node(node).gpus(8).build())
    the_cluster = Cluster(kube, tap, scheduler, name, nodes)
    the_cluster.connectors, the_cluster.connector = connectors, await connectors.start(config(name))
    yield the_cluster
    await delete_nodes(kube, nodes)


def env_of(pod: Obj) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


async def test_a_training_gang_of_four_gets_its_headless_service_and_the_rendezvous_env(cluster: Cluster) -> None:
    job = unique("llm")
    await cluster.place(job, 4, gpus=8, kind=JobKind.TRAINING, tenant="team-llm")
    pods = await cluster.pods(job, 4)
    (service,) = await cluster.services(job)
    name = names.service_name(JobId(job), 1)
    assert service["metadata"]["name"] == name and service["metadata"]["namespace"] == "fedsched-team-llm"
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["ports"][0]["port"] == 29500
    assert all(p["metadata"]["labels"].items() >= service["spec"]["selector"].items() for p in pods)
    envs = [env_of(p) for p in pods]
    master = f"{names.pod_name(JobId(job), 1, 0)}.{name}.fedsched-team-llm.svc.cluster.local"
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert {e["MASTER_ADDR"] for e in envs} == {master} and {e["MASTER_PORT"] for e in envs} == {"29500"}
    assert {(e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["PET_NNODES"]) for e in envs} == {("32", "8", "4")}
    assert [p["spec"]["hostname"] for p in pods] == [p["metadata"]["name"] for p in pods]
    assert {p["spec"]["subdomain"] for p in pods} == {name}

    for pod in pods:
        await cluster.kube.set_pod_status(pod, RUNNING)
    await cluster.tap.wait(JobStarted, job_id=job)
    for pod in pods:
        await cluster.kube.set_pod_status(pod, pod_status("Succeeded", container_status(**terminated(0))))
    await cluster.tap.wait(JobSucceeded, job_id=job)
    await cluster.no_services(job)  # the run ended: its Service goes, its finished pods stay for their logs
    assert len(await cluster.kube.job_pods(cluster.name, job)) == 4


async def test_an_inference_service_restarts_is_probed_and_reachable_until_it_is_cancelled(cluster: Cluster) -> None:
    job = unique("chat")
    template = {"image": "vllm:1", "port": 8000}
    await cluster.place(job, 2, kind=JobKind.INFERENCE, template=template)
    pods = await cluster.pods(job, 2)
    assert {p["spec"]["restartPolicy"] for p in pods} == {"Always"}
    assert {str(p["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]["port"]) for p in pods} == {"8000"}
    (service,) = await cluster.services(job)
    assert service["spec"]["type"] == "ClusterIP" and service["spec"]["clusterIP"] not in ("", "None")
    assert service["spec"]["ports"][0]["port"] == 8000 and service["spec"]["ports"][0]["targetPort"] == 8000

    for pod in pods:
        await cluster.kube.set_pod_status(pod, RUNNING)
    await cluster.tap.wait(JobStarted, job_id=job)
    await cluster.scheduler.publish([JobCancelRequested(job_id=JobId(job), requester="alice")])

    async def deleting() -> bool:
        found = await cluster.kube.job_pods(cluster.name, job)
        return len(found) == 2 and all(p["metadata"].get("deletionTimestamp") for p in found)

    await wait_until(deleting, 30, "the service's pods being deleted")
    for pod in pods:
        await cluster.kube.delete_pod(pod, 0)  # the kubelet's final delete
    await cluster.no_services(job)


async def test_a_crash_looping_service_fails_its_run_with_the_containers_last_exit(cluster: Cluster) -> None:
    job = unique("flaky")
    await cluster.place(job, 1, kind=JobKind.INFERENCE, template={"image": "vllm:1", "port": 8000})
    (pod,) = await cluster.pods(job, 1)
    await cluster.kube.set_pod_status(pod, RUNNING)
    await cluster.tap.wait(JobStarted, job_id=job)
    restarts = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}}
    last = {"terminated": {"exitCode": 2, "reason": "Error", "startedAt": "2026-12-02T13:00:00Z"}}
    looping = {"name": "main", "state": restarts, "lastState": last, "restartCount": 2, "ready": False}
    await cluster.kube.set_pod_status(pod, pod_status("Running", looping))  # a restart or two: no failure
    await cluster.kube.set_pod_status(pod, pod_status("Running", {**looping, "restartCount": 5}))

    async def deleting() -> bool:
        found = await cluster.kube.job_pods(cluster.name, job)
        return bool(found) and bool(found[0]["metadata"].get("deletionTimestamp"))

    await wait_until(deleting, 30, "the crash-looping pod being deleted")
    await cluster.tap.poll()
    assert cluster.tap.events(JobFailed, job_id=job) == []  # its GPU is still held until the pod is gone
    await cluster.kube.delete_pod(pod, 0)
    (failed,) = await cluster.tap.wait(JobFailed, job_id=job)
    assert (failed.reason, failed.exit_code) == (ReasonCode.NON_ZERO_EXIT, 2)
    assert "crash-looping: restarted 5 times" in failed.message
    await cluster.no_services(job)


async def test_a_notebook_gets_a_service_for_its_port(cluster: Cluster) -> None:
    job = unique("nb")
    await cluster.place(job, 1, gpus=1, kind=JobKind.NOTEBOOK, template={"image": "jupyter:1", "port": 8888})
    (pod,) = await cluster.pods(job, 1)
    assert pod["spec"]["restartPolicy"] == "Never"
    (service,) = await cluster.services(job)
    assert service["spec"]["ports"][0]["port"] == 8888 and service["spec"]["type"] == "ClusterIP"


async def test_a_template_asking_extra_gpus_is_refused_with_its_reason_and_no_pod_exists(cluster: Cluster) -> None:
    job = unique("greedy")
    template = {
        "spec": {
            "containers": [
                {"name": "trainer", "image": "train:1"},
                {"name": "profiler", "image": "prof:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}},
            ]
        }
    }
    await cluster.place(job, 2, kind=JobKind.TRAINING, template=template)
    (failed,) = await cluster.tap.wait(JobFailed, job_id=job)
    assert failed.reason is ReasonCode.LAUNCH_FAILED
    assert "template.spec.containers[1] (profiler) limits nvidia.com/gpu: 2, beyond the job's request" in failed.message
    assert await cluster.kube.job_pods(cluster.name, job) == []
    assert await cluster.services(job) == []


async def test_a_replica_failing_on_a_gpu_its_node_reports_failed_is_a_gpu_failure(cluster: Cluster) -> None:
    job = unique("xid")
    await cluster.place(job, 1, gpus=2, kind=JobKind.BATCH)
    (pod,) = await cluster.pods(job, 1)
    assert pod["spec"]["nodeName"] == cluster.nodes[0]
    # The node's health agent reports GPU 1 failed with XID 79 on the pod's node.
    health = '[{"index": 1, "health": "failed", "xid_errors": 1, "last_xid": 79}]'
    await cluster.kube.patch_node(
        pod["spec"]["nodeName"], {"metadata": {"annotations": {names.ANN_GPU_HEALTH: health}}}
    )
    await cluster.tap.until(
        lambda: any(
            any(g.index == 1 and g.health == "failed" for g in e.gpus)
            for e in cluster.tap.events(GpuHealthReported, cluster=cluster.name)
        ),
        what="the failed GPU reported",
    )
    await cluster.kube.set_pod_status(pod, RUNNING)
    await cluster.kube.set_pod_status(pod, pod_status("Failed", container_status(**terminated(1, "Error"))))
    (failed,) = await cluster.tap.wait(JobFailed, job_id=job)
    assert failed.reason is ReasonCode.GPU_FAILURE and failed.exit_code == 1
    assert "reports GPU 1 (XID 79) failed, held by this replica" in failed.message


async def test_a_run_that_ended_while_the_connector_was_away_loses_its_service_on_restart(cluster: Cluster) -> None:
    job = unique("away")
    await cluster.place(job, 1, kind=JobKind.FINE_TUNE)
    (pod,) = await cluster.pods(job, 1)
    assert len(await cluster.services(job)) == 1
    assert cluster.connectors is not None and cluster.connector is not None
    await cluster.connectors.stop(cluster.connector)
    await cluster.kube.set_pod_status(pod, pod_status("Succeeded", container_status(**terminated(0))))
    await cluster.connectors.start(config(cluster.name))
    await cluster.tap.wait(JobSucceeded, job_id=job)
    await cluster.no_services(job)


async def test_a_newer_run_replaces_the_stale_runs_service_with_its_own(cluster: Cluster) -> None:
    job = unique("rerun")
    await cluster.place(job, 1, kind=JobKind.TRAINING)
    (old,) = await cluster.pods(job, 1)
    await cluster.kube.set_pod_status(old, RUNNING)
    await cluster.tap.wait(JobStarted, job_id=job)
    await cluster.scheduler.publish([a_placement(job, (cluster.nodes[1],), cluster=cluster.name, run=2)])

    async def old_deleting() -> bool:
        found = {p["metadata"]["name"]: p for p in await cluster.kube.job_pods(cluster.name, job)}
        stale = found.get(old["metadata"]["name"])
        return stale is not None and bool(stale["metadata"].get("deletionTimestamp"))

    await wait_until(old_deleting, 30, "the stale run's pod being deleted")
    await cluster.kube.delete_pod(old, 0)

    async def only_the_new_service() -> bool:
        return [s["metadata"]["name"] for s in await cluster.services(job)] == [names.service_name(JobId(job), 2)]

    await wait_until(only_the_new_service, 30, "run 2's Service alone")
