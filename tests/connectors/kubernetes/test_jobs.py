"""Decisions become pods in a real API server, and pod status becomes the job's lifecycle, once each.

The test plays scheduler (it publishes ``JobSubmitted`` and decisions) and kubelet (it writes pod
status through the status subresource and finishes deletions with grace 0).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from connectors.kubernetes import KubernetesConnector, names
from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobPreemptionRequested, JobReplicasAdded, ReplicaPlacement
from events.catalog.jobs import (
    InferenceSpec,
    JobCancelled,
    JobCancelRequested,
    JobFailed,
    JobKind,
    JobPreempted,
    JobStarted,
    JobSubmitted,
    JobSucceeded,
)
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, CycleId, JobId, NodeId
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement, container_status, pod_status, running, terminated
from .support import Kube, Obj, Running, Tap, config, delete_nodes, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]

RUNNING = pod_status("Running", container_status(**running()))
SUCCEEDED = pod_status("Succeeded", container_status(**terminated(0)))


class Scene:
    """One test's cluster: its nodes, its connector, and the scheduler and kubelet the test plays."""

    def __init__(self, kube: Kube, tap: Tap, scheduler: Publisher, cluster: str, nodes: list[str]) -> None:
        self.kube, self.tap, self.scheduler = kube, tap, scheduler
        self.cluster = cluster
        self.nodes = nodes
        self.connector: KubernetesConnector | None = None

    async def publish(self, *events: Event) -> None:
        await self.scheduler.publish(list(events))

    async def submit_and_place(self, job_id: str, replicas: int = 2, *, run: int = 1, **job: Any) -> None:
        nodes = tuple(self.nodes[i % len(self.nodes)] for i in range(replicas))
        await self.publish(a_job(job_id, **job), a_placement(job_id, nodes, cluster=self.cluster, run=run, gpus_each=1))

    async def pods(self, job_id: str, count: int) -> list[Obj]:
        async def check() -> list[Obj] | None:
            found = await self.kube.job_pods(self.cluster, job_id)
            return found if len(found) == count else None

        result: list[Obj] = await wait_until(check, 30, f"{count} pods of {job_id}")
        return result

    async def set_status(self, pods: list[Obj], status: Obj) -> None:
        for pod in pods:
            await self.kube.set_pod_status(pod, status)

    async def gone(self, job_id: str) -> None:
        await wait_until(lambda: self._none(job_id), 30, f"no pods of {job_id}")

    async def _none(self, job_id: str) -> bool:
        return not await self.kube.job_pods(self.cluster, job_id)

    def no_duplicates(self) -> None:
        ids = Counter(e.id for e in self.tap.seen if getattr(e.data, "cluster", None) == self.cluster)
        assert [i for i, n in ids.items() if n > 1] == []


@pytest_asyncio.fixture(loop_scope="session")
async def scene(kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running) -> AsyncIterator[Scene]:
    cluster = unique("jobs")
    nodes = [f"{cluster}-n{i}" for i in range(2)]
    for node in nodes:
        await kube.node(a_node(node).gpus(8).build())
    the_scene = Scene(kube, tap, scheduler, cluster, nodes)
    the_scene.connector = await connectors.start(config(cluster))
    yield the_scene
    await delete_nodes(kube, nodes)


async def test_a_placement_creates_exactly_the_pods_asked_for_on_the_right_nodes(scene: Scene) -> None:
    job = unique("train")
    await scene.submit_and_place(job, 2, tenant="team-vision")
    pods = await scene.pods(job, 2)
    assert [p["spec"]["nodeName"] for p in pods] == scene.nodes
    assert {p["metadata"]["namespace"] for p in pods} == {"fedsched-team-vision"}
    assert [p["metadata"]["labels"][names.LABEL_REPLICA] for p in pods] == ["0", "1"]
    assert {p["metadata"]["labels"][names.LABEL_JOB] for p in pods} == {job}
    limits = pods[0]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {names.GPU_RESOURCE: "1"}
    uids = sorted(p["metadata"]["uid"] for p in pods)

    # The same decision again (a redelivery), a decision for another cluster, then a marker placement:
    # decisions are read in order, so once the marker's pods exist the others were handled.
    other = unique("elsewhere")
    marker = unique("marker")
    await scene.publish(
        a_placement(job, tuple(scene.nodes), cluster=scene.cluster, gpus_each=1),
        a_job(other),
        a_placement(other, (scene.nodes[0],), cluster="some-other-cluster"),
    )
    await scene.submit_and_place(marker, 1)
    await scene.pods(marker, 1)
    assert sorted(p["metadata"]["uid"] for p in await scene.kube.job_pods(scene.cluster, job)) == uids
    assert await scene.kube.pods(f"{names.LABEL_JOB}={other}") == []
    assert scene.tap.events(JobFailed, cluster=scene.cluster) == []


async def test_pod_status_changes_become_lifecycle_events_once_each(scene: Scene) -> None:
    job = unique("train")
    await scene.submit_and_place(job, 2)
    pods = await scene.pods(job, 2)
    await scene.set_status(pods[:1], RUNNING)
    await scene.set_status(pods[1:], pod_status("Pending"))
    await scene.set_status(pods[1:], RUNNING)
    (started,) = await scene.tap.wait(JobStarted, job_id=job)
    assert (started.cluster, started.run) == (scene.cluster, 1)

    await scene.set_status(pods, SUCCEEDED)
    (succeeded,) = await scene.tap.wait(JobSucceeded, job_id=job)
    assert succeeded.run == 1

    async def settled() -> list[Obj] | None:
        found = await scene.kube.job_pods(scene.cluster, job)
        done = all(
            p["metadata"]["annotations"].get(names.ANN_REPORTED) == "started,succeeded"
            and names.FINALIZER not in (p["metadata"].get("finalizers") or [])
            for p in found
        )
        return found if done else None

    finished = await wait_until(settled, 30, "reported annotation and no finalizer")
    assert len(finished) == 2  # finished pods stay for their logs
    await scene.set_status(pods, SUCCEEDED)  # a late kubelet update changes nothing
    marker = unique("marker")
    await scene.submit_and_place(marker, 1)
    await scene.pods(marker, 1)
    assert len(scene.tap.events(JobStarted, job_id=job)) == 1 and len(scene.tap.events(JobSucceeded, job_id=job)) == 1
    scene.no_duplicates()


async def test_a_failed_replica_fails_the_job_with_the_containers_reason_and_stops_the_others(scene: Scene) -> None:
    job = unique("train")
    await scene.submit_and_place(job, 2)
    pods = await scene.pods(job, 2)
    await scene.set_status(pods, RUNNING)
    await scene.tap.wait(JobStarted, job_id=job)
    await scene.set_status(pods[1:], pod_status("Failed", container_status(**terminated(137, "OOMKilled"))))

    async def other_replica_deleted() -> bool:
        found = await scene.kube.job_pods(scene.cluster, job)
        return bool(found) and found[0]["metadata"].get("deletionTimestamp") is not None

    await wait_until(other_replica_deleted, 30, "the surviving replica deleted")
    # Replica 0 still holds its GPU: the job's outcome (which frees all of them) waits for it.
    await scene.tap.poll()
    assert scene.tap.events(JobFailed, job_id=job) == []
    await scene.kube.delete_pod(pods[0], 0)  # the kubelet finishes it
    (failed,) = await scene.tap.wait(JobFailed, job_id=job)
    assert (failed.reason, failed.exit_code, failed.node) == (ReasonCode.OUT_OF_MEMORY, 137, scene.nodes[1])
    assert "OOMKilled" in failed.message

    async def only_the_failed_one_left() -> bool:
        found = await scene.kube.job_pods(scene.cluster, job)
        names_left = [p["metadata"]["name"] for p in found]
        return names_left == [pods[1]["metadata"]["name"]] and not found[0]["metadata"].get("finalizers")

    await wait_until(only_the_failed_one_left, 30, "the failed pod kept for its logs, without our finalizer")
    assert len(scene.tap.events(JobFailed, job_id=job)) == 1


async def test_preemption_deletes_the_pods_with_a_grace_period_and_reports_when_they_stopped(scene: Scene) -> None:
    job = unique("train")
    await scene.submit_and_place(job, 2)
    pods = await scene.pods(job, 2)
    await scene.set_status(pods, RUNNING)
    await scene.tap.wait(JobStarted, job_id=job)
    await scene.publish(
        JobPreemptionRequested(
            job_id=JobId(job), cycle_id=CycleId("c-9"), cluster=ClusterId(scene.cluster), rule="prio", grace_period_s=3
        )
    )

    async def deleting() -> list[Obj] | None:
        found = await scene.kube.job_pods(scene.cluster, job)
        ok = all(p["metadata"].get("deletionTimestamp") for p in found) and len(found) == 2
        return found if ok else None

    doomed = await wait_until(deleting, 30, "pods marked for deletion")
    assert {p["metadata"]["deletionGracePeriodSeconds"] for p in doomed} == {3}
    assert {p["metadata"]["annotations"][names.ANN_STOP] for p in doomed} == {"preempted"}
    # The kubelet kills replica 0 (exit 143) and finishes its deletion; replica 1's kubelet is silent,
    # so the connector waits for the deadline (grace 3 s + margin 1 s).
    await scene.kube.set_pod_status(doomed[0], pod_status("Failed", container_status(**terminated(143, "Error"))))
    await scene.kube.delete_pod(doomed[0], 0)
    (preempted,) = await scene.tap.wait(JobPreempted, job_id=job)
    assert preempted.run == 1
    await scene.gone(job)
    assert scene.tap.events(JobFailed, job_id=job) == []
    scene.no_duplicates()


async def test_cancellation_deletes_the_pods_and_reports_who_asked(scene: Scene) -> None:
    job, early = unique("notebook"), unique("early")
    await scene.submit_and_place(job, 1)
    pods = await scene.pods(job, 1)
    await scene.set_status(pods, RUNNING)
    await scene.tap.wait(JobStarted, job_id=job)
    await scene.publish(JobCancelRequested(job_id=JobId(job), requester="alice@example.com"))
    (cancelled,) = await scene.tap.wait(JobCancelled, job_id=job)
    assert (cancelled.cluster, cancelled.run, cancelled.requester) == (scene.cluster, 1, "alice@example.com")
    await scene.gone(job)

    # Cancelled before its placement is read: no pods are made, and the run is reported cancelled.
    await scene.publish(a_job(early), JobCancelRequested(job_id=JobId(early), requester="bob"))
    await scene.publish(a_placement(early, (scene.nodes[0],), cluster=scene.cluster))
    (cancelled,) = await scene.tap.wait(JobCancelled, job_id=early)
    assert cancelled.requester == "bob"
    assert await scene.kube.job_pods(scene.cluster, early) == []


async def test_a_workload_the_cluster_cannot_run_is_a_failed_launch_and_leaves_no_pods(scene: Scene) -> None:
    bad_template, refused = unique("bad"), unique("refused")
    await scene.submit_and_place(bad_template, 1, template={"image": "x", "command": "not a list"})
    (failed,) = await scene.tap.wait(JobFailed, job_id=bad_template)
    assert failed.reason is ReasonCode.LAUNCH_FAILED and "list of strings" in failed.message
    # The API server refuses the second replica's pod (a container name that is not a DNS label
    # would fail every replica; an invalid env name is per pod too): replica 0 is made, then removed.
    spec = {"containers": [{"name": "Not_A_Dns_Label", "image": "busybox"}]}
    await scene.submit_and_place(refused, 2, template={"spec": spec})
    (failed,) = await scene.tap.wait(JobFailed, job_id=refused)
    assert failed.reason is ReasonCode.LAUNCH_FAILED and "refused pod" in failed.message
    await scene.gone(refused)


async def test_replicas_added_to_a_run_become_pods_and_the_run_succeeds_only_with_all_of_them(scene: Scene) -> None:
    job = unique("array")
    await scene.publish(
        a_job(job, replicas=4), a_placement(job, (scene.nodes[0], scene.nodes[0]), cluster=scene.cluster)
    )
    first = await scene.pods(job, 2)
    await scene.set_status(first, RUNNING)
    await scene.tap.wait(JobStarted, job_id=job)
    added = JobReplicasAdded(
        job_id=JobId(job),
        cycle_id=CycleId("cycle-2"),
        cluster=ClusterId(scene.cluster),
        run=1,
        replicas=tuple(
            ReplicaPlacement(replica=r, node=NodeId(scene.nodes[1]), gpu_indices=(r - 2,), gpu_milli_each=1000)
            for r in (2, 3)
        ),
        running_replicas=4,
        chosen=CandidateScore(cluster=ClusterId(scene.cluster), total=0),
        explanation="added 2 replicas",
    )
    await scene.publish(added, added)  # a redelivery creates nothing more
    pods = await scene.pods(job, 4)
    assert [p["spec"]["nodeName"] for p in pods[2:]] == [scene.nodes[1]] * 2
    assert [p["metadata"]["labels"][names.LABEL_REPLICA] for p in pods] == ["0", "1", "2", "3"]
    await scene.set_status(pods[2:], RUNNING)
    await scene.set_status(pods, SUCCEEDED)
    (succeeded,) = await scene.tap.wait(JobSucceeded, job_id=job)
    assert succeeded.message == "4 replica(s) succeeded"  # the pod watcher counted the added replicas
    assert scene.tap.events(JobFailed, job_id=job) == []


def spread_service(job: str) -> JobSubmitted:
    return a_job(job, replicas=4, kind=JobKind.INFERENCE, inference=InferenceSpec(spread_clusters=2))


def part_here(scene: Scene, job: str) -> JobReplicasAdded:
    """Replicas 2 and 3 of run 1 in the scene's cluster (0 and 1 were placed in another)."""
    return JobReplicasAdded(
        job_id=JobId(job),
        cycle_id=CycleId("cycle-2"),
        cluster=ClusterId(scene.cluster),
        run=1,
        replicas=tuple(
            ReplicaPlacement(replica=r, node=NodeId(scene.nodes[r - 2]), gpu_indices=(0,), gpu_milli_each=1000)
            for r in (2, 3)
        ),
        running_replicas=4,
        chosen=CandidateScore(cluster=ClusterId(scene.cluster), total=0),
        explanation="2 replicas in a second cluster",
    )


async def test_replicas_added_here_to_a_spread_run_placed_elsewhere_open_its_part_here_reported_as_here(
    scene: Scene,
) -> None:
    job, elsewhere = unique("svc"), unique("elsewhere")
    await scene.publish(spread_service(job), a_placement(job, ("far-0", "far-1"), cluster=elsewhere))
    await scene.publish(part_here(scene, job))
    pods = await scene.pods(job, 2)
    assert [p["metadata"]["labels"][names.LABEL_REPLICA] for p in pods] == ["2", "3"]
    assert {p["metadata"]["labels"][names.LABEL_RUN] for p in pods} == {"1"}
    assert {p["metadata"]["annotations"][names.ANN_PART_REPLICAS] for p in pods} == {"2"}
    await scene.set_status(pods, RUNNING)
    (started,) = await scene.tap.wait(JobStarted, job_id=job)
    assert (started.cluster, started.run, started.message) == (scene.cluster, 1, "2 replica(s) running")
    await scene.set_status(pods, SUCCEEDED)
    (succeeded,) = await scene.tap.wait(JobSucceeded, job_id=job)
    assert (succeeded.cluster, succeeded.run) == (scene.cluster, 1)
    assert scene.tap.events(JobFailed, job_id=job) == []
    assert scene.tap.events(JobStarted, job_id=job, cluster=elsewhere) == []  # nothing said for the other part
    scene.no_duplicates()


async def test_a_cancel_stops_a_spread_runs_part_here_and_one_read_before_the_part_cancels_it_at_once(
    scene: Scene,
) -> None:
    job, early = unique("svc"), unique("early")
    await scene.publish(spread_service(job), a_placement(job, ("far-0", "far-1"), cluster=unique("elsewhere")))
    await scene.publish(part_here(scene, job))
    pods = await scene.pods(job, 2)
    await scene.set_status(pods, RUNNING)
    await scene.tap.wait(JobStarted, job_id=job)
    await scene.publish(JobCancelRequested(job_id=JobId(job), requester="alice@example.com"))
    (cancelled,) = await scene.tap.wait(JobCancelled, job_id=job)
    assert (cancelled.cluster, cancelled.run, cancelled.requester) == (scene.cluster, 1, "alice@example.com")
    await scene.gone(job)

    # The cancel was read before the addition that opens the part here: no pods, the part ends cancelled.
    await scene.publish(spread_service(early), JobCancelRequested(job_id=JobId(early), requester="bob"))
    await scene.publish(part_here(scene, early))
    (cancelled,) = await scene.tap.wait(JobCancelled, job_id=early)
    assert (cancelled.cluster, cancelled.run, cancelled.requester) == (scene.cluster, 1, "bob")
    assert await scene.kube.job_pods(scene.cluster, early) == []
