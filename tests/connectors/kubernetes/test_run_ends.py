"""Runs that are over in the log lose their pods, and the pods of a run that is over report nothing.

The test plays scheduler and governance (it publishes submissions, placements and the end of a run on
the cluster's behalf) and kubelet (it writes pod status through the status subresource).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from connectors.kubernetes import names
from events.catalog.jobs import JobFailed, JobStarted
from events.catalog.reasons import ReasonCode
from events.catalog.topics import JOBS
from events.catalog.types import ClusterId, JobId
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement, container_status, pod_status, running
from .support import Kube, Obj, Running, Tap, config, delete_nodes, unique, wait_until
from .test_jobs import Scene
from .test_resilience import assert_no_duplicates

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(120)]

RUNNING = pod_status("Running", container_status(**running()))


@pytest_asyncio.fixture(loop_scope="session")
async def scene(kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running) -> AsyncIterator[Scene]:
    cluster = unique("ends")
    nodes = [f"{cluster}-n{i}" for i in range(2)]
    for node in nodes:
        await kube.node(a_node(node).gpus(8).build())
    the_scene = Scene(kube, tap, scheduler, cluster, nodes)
    the_scene.connector = await connectors.start(config(cluster))
    yield the_scene
    await delete_nodes(kube, nodes)


def lease_expired(job: str, cluster: str) -> JobFailed:
    """Governance's end of a run that was placed and never started (its allocation's lease ran out)."""
    return JobFailed(
        job_id=JobId(job),
        cluster=ClusterId(cluster),
        run=1,
        reason=ReasonCode.ALLOCATION_LEASE_EXPIRED,
        message="placed 10 min ago and never started; allocation released (rule lease)",
    )


def run_of(pod: Obj) -> int:
    return int(pod["metadata"]["labels"][names.LABEL_RUN])


async def test_a_run_failed_by_governance_loses_its_pods_and_reports_nothing_more(scene: Scene) -> None:
    job = unique("leased")
    await scene.submit_and_place(job, 2)
    pods = await scene.pods(job, 2)
    await scene.set_status(pods, pod_status("Pending"))
    # Governance releases the allocation of a run that never started, on the cluster's behalf.
    await scene.publish(lease_expired(job, scene.cluster))

    async def stopping() -> list[Obj] | None:
        found = await scene.kube.job_pods(scene.cluster, job)
        ok = len(found) == 2 and all(p["metadata"].get("deletionTimestamp") for p in found)
        return found if ok else None

    doomed = await wait_until(stopping, 30, "the pods of the ended run being deleted")
    assert {p["metadata"]["annotations"][names.ANN_STOP] for p in doomed} == {"ended"}
    assert {p["metadata"]["deletionGracePeriodSeconds"] for p in doomed} == {1}  # the cancel grace
    # The kubelet starts the containers anyway (it raced the deletion): that is no start of the job.
    await scene.set_status(doomed, RUNNING)
    await scene.gone(job)  # past the deadline, the connector finishes the deletion
    await scene.tap.poll()
    assert scene.tap.events(JobStarted, job_id=job) == []
    assert [f.reason for f in scene.tap.events(JobFailed, job_id=job)] == [ReasonCode.ALLOCATION_LEASE_EXPIRED]
    scene.no_duplicates()


async def test_the_pods_of_a_replaced_run_are_stopped_and_report_nothing(scene: Scene) -> None:
    job = unique("replaced")
    await scene.submit_and_place(job, 1)
    (old,) = await scene.pods(job, 1)
    await scene.kube.set_pod_status(old, pod_status("Pending"))
    # The scheduler placed the job again (run 2) with run 1 still here: run 1 is stale.
    await scene.publish(a_placement(job, (scene.nodes[1],), cluster=scene.cluster, run=2, gpus_each=1))

    async def replaced() -> list[Obj] | None:
        found = await scene.kube.job_pods(scene.cluster, job)
        runs = {run_of(p): p for p in found}
        ok = set(runs) == {1, 2} and runs[1]["metadata"].get("deletionTimestamp")
        return found if ok else None

    found = await wait_until(replaced, 30, "run 2's pod made and run 1's pod being deleted")
    stale, current = sorted(found, key=run_of)
    assert stale["metadata"]["annotations"][names.ANN_STOP] == "stale"
    assert not current["metadata"].get("deletionTimestamp") and current["spec"]["nodeName"] == scene.nodes[1]
    await scene.kube.set_pod_status(stale, RUNNING)  # the old run's kubelet starts it late

    async def only_run_2() -> bool:
        return [run_of(p) for p in await scene.kube.job_pods(scene.cluster, job)] == [2]

    await wait_until(only_run_2, 30, "the stale pod gone")
    await scene.kube.set_pod_status(current, RUNNING)
    (started,) = await scene.tap.wait(JobStarted, job_id=job)
    assert started.run == 2
    # A late copy of run 1's placement creates nothing.
    await scene.publish(a_placement(job, (scene.nodes[0],), cluster=scene.cluster, run=1, gpus_each=1))
    marker = unique("marker")
    await scene.publish(a_job(marker), a_placement(marker, (scene.nodes[0],), cluster=scene.cluster))
    await scene.pods(marker, 1)
    assert [run_of(p) for p in await scene.kube.job_pods(scene.cluster, job)] == [2]
    assert [e.run for e in scene.tap.events(JobStarted, job_id=job)] == [2]
    assert scene.tap.events(JobFailed, job_id=job) == []
    scene.no_duplicates()


async def test_a_run_ended_while_the_connector_was_away_reports_no_start_when_it_comes_back(
    scene: Scene, connectors: Running
) -> None:
    """The new connector knows the run's end from the log alone: no start is reported for pods the kubelet
    started while no connector ran, and the pods are stopped."""
    job = unique("away")
    await scene.submit_and_place(job, 1)
    pods = await scene.pods(job, 1)
    assert scene.connector is not None
    await connectors.stop(scene.connector)
    await scene.publish(lease_expired(job, scene.cluster))
    await scene.set_status(pods, RUNNING)  # the kubelet started it meanwhile
    scene.connector = await connectors.start(config(scene.cluster))
    await scene.gone(job)
    await scene.tap.poll()
    assert scene.tap.events(JobStarted, job_id=job) == []
    assert [f.reason for f in scene.tap.events(JobFailed, job_id=job)] == [ReasonCode.ALLOCATION_LEASE_EXPIRED]
    # Job events once each (the nodes were restated by the new connector, with the same ids: by design).
    assert_no_duplicates(scene.tap, scene.cluster, topic=JOBS.name)
