"""Cut watches, a restarted API server and a restarted connector: nothing lost, nothing reported twice."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable
from functools import partial
from pathlib import Path

import pytest

from connectors.kubernetes import KubernetesConnector, names
from events.catalog.decisions import CandidateScore, JobPreemptionRequested, JobReplicasAdded, ReplicaPlacement
from events.catalog.inventory import ClusterStatus, ClusterStatusChanged, NodeObserved
from events.catalog.jobs import InferenceSpec, JobKind, JobPreempted, JobStarted, JobSucceeded
from events.catalog.topics import JOBS
from events.catalog.types import ClusterId, CycleId, JobId, NodeId
from events.log.publisher import Publisher

from .builders import a_job, a_node, a_placement, container_status, pod_status, running, terminated
from .support import Kube, Obj, Proxy, Running, Tap, config, delete_nodes, kubeconfig_via, unique, wait_until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.kube, pytest.mark.timeout(180)]

RUNNING = pod_status("Running", container_status(**running()))
SUCCEEDED = pod_status("Succeeded", container_status(**terminated(0)))


def resumed(connector: KubernetesConnector, watches: int) -> bool:
    return connector.node_reflector.stats.watches > watches


def snapshots(tap: Tap, node: str, count: int) -> bool:
    return len(tap.events(NodeObserved, node=node)) >= count


def assert_no_duplicates(tap: Tap, cluster: str, *, topic: str | None = None) -> None:
    ids = Counter(
        e.id for e in tap.seen if getattr(e.data, "cluster", None) == cluster and topic in (None, e.data.topic)
    )
    assert [i for i, n in ids.items() if n > 1] == []


async def test_cut_watches_resume_without_lost_or_doubled_events(
    kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running, kube_config: str, tmp_path: Path
) -> None:
    cluster = unique("cut")
    nodes = [f"{cluster}-n{i}" for i in range(3)]
    api = kube.api.host.removeprefix("https://").split(":")
    proxy = Proxy(api[0], int(api[1]))
    await proxy.start()
    try:
        for node in nodes:
            await kube.node(a_node(node).gpus(4).build())
        connector = await connectors.start(
            config(cluster), kubeconfig=kubeconfig_via(kube_config, proxy.port, tmp_path)
        )
        for node in nodes:
            await tap.wait(NodeObserved, node=node)
        job = unique("train")
        await scheduler.publish([a_job(job), a_placement(job, (nodes[0],), cluster=cluster)])
        pods = await wait_until(lambda: kube.job_pods(cluster, job), 30, "the pod")

        # Changes land while the connections are being cut: each is seen once, in order.
        versions: dict[str, list[int]] = {n: [int(tap.events(NodeObserved, node=n)[0].generation)] for n in nodes}
        for round_ in range(6):
            for node in nodes:
                changed = await kube.patch_node(node, {"metadata": {"labels": {"example.com/round": str(round_)}}})
                versions[node].append(int(changed["metadata"]["resourceVersion"]))
            watches = connector.node_reflector.stats.watches
            await wait_until(lambda: proxy.open, 30, "an open connection")
            proxy.cut()
            await wait_until(partial(resumed, connector, watches), 30, "the watch resumed")
            if round_ == 2:
                await kube.set_pod_status(pods[0], RUNNING)
        for node in nodes:
            await tap.until(partial(snapshots, tap, node, 7), 30, f"7 snapshots of {node}")
        await tap.wait(JobStarted, job_id=job)
        await kube.set_pod_status(pods[0], SUCCEEDED)
        await tap.wait(JobSucceeded, job_id=job)
        for node in nodes:
            assert [o.generation for o in tap.events(NodeObserved, node=node)] == versions[node]
        assert len(tap.events(JobStarted, job_id=job)) == 1
        stats = connector.node_reflector.stats
        assert stats.watch_breaks >= 1 and stats.relists_gone == 0 and stats.lists == 1
        assert_no_duplicates(tap, cluster)
    finally:
        await proxy.close()
        await delete_nodes(kube, nodes)


@pytest.mark.slow
async def test_api_server_restarted_mid_stream(kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running) -> None:
    cluster = unique("restart")
    nodes = [f"{cluster}-n{i}" for i in range(2)]
    try:
        for node in nodes:
            await kube.node(a_node(node).gpus(8).build())
        await connectors.start(config(cluster))
        await tap.wait(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.REACHABLE)
        first, second = unique("before"), unique("during")
        await scheduler.publish([a_job(first), a_placement(first, (nodes[0],), cluster=cluster)])
        (pod,) = await wait_until(lambda: kube.job_pods(cluster, first), 30, "the first job's pod")
        await kube.set_pod_status(pod, RUNNING)
        await tap.wait(JobStarted, job_id=first)

        await kube.stop()
        (down,) = await tap.wait(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.UNREACHABLE)
        assert down.reason == "ClusterApiUnavailable" and "has not answered" in down.message
        # A decision arrives while the cluster is away: it waits, then runs.
        await scheduler.publish([a_job(second), a_placement(second, (nodes[1],), cluster=cluster)])
        await kube.start()
        await tap.wait(ClusterStatusChanged, 2, cluster=cluster, status=ClusterStatus.REACHABLE)

        (pod2,) = await wait_until(lambda: kube.job_pods(cluster, second), 60, "the second job's pod")
        await kube.set_pod_status(pod2, RUNNING)
        await kube.set_pod_status(pod, SUCCEEDED)
        await tap.wait(JobStarted, job_id=second)
        await tap.wait(JobSucceeded, job_id=first)
        changed = await kube.patch_node(nodes[0], {"metadata": {"labels": {"example.com/after": "restart"}}})
        await tap.until(
            lambda: [o for o in tap.events(NodeObserved, node=nodes[0]) if o.labels.get("example.com/after")],
            30,
            "the node change after the restart",
        )
        assert tap.events(NodeObserved, node=nodes[0])[-1].generation == int(changed["metadata"]["resourceVersion"])
        assert len(tap.events(JobStarted, job_id=first)) == 1
        assert len(tap.events(ClusterStatusChanged, cluster=cluster, status=ClusterStatus.UNREACHABLE)) == 1
        assert_no_duplicates(tap, cluster)
    finally:
        await kube.start()  # idempotent: the other tests need it up
        await delete_nodes(kube, nodes)


async def test_a_restarted_connector_reports_what_happened_while_it_was_away_once(
    kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running
) -> None:
    cluster = unique("conn")
    nodes = [f"{cluster}-n{i}" for i in range(2)]
    try:
        for node in nodes:
            await kube.node(a_node(node).gpus(8).build())
        first = await connectors.start(config(cluster))
        done, victim, later = unique("done"), unique("victim"), unique("later")
        await scheduler.publish(
            [
                a_job(done),
                a_placement(done, (nodes[0],), cluster=cluster),
                a_job(victim),
                a_placement(victim, (nodes[1],), cluster=cluster),
                a_job(later),  # submitted now, placed after the restart
            ]
        )
        (pod,) = await wait_until(lambda: kube.job_pods(cluster, done), 30, "a pod")
        (victim_pod,) = await wait_until(lambda: kube.job_pods(cluster, victim), 30, "the victim's pod")
        await kube.set_pod_status(pod, RUNNING)
        await kube.set_pod_status(victim_pod, RUNNING)
        await tap.wait(JobStarted, job_id=done)
        await tap.wait(JobStarted, job_id=victim)

        async def recorded_on_the_pods() -> bool:
            # The connector records a report on the pods right after publishing it; stop it only once
            # both are recorded, so this test is about what happens while it is away.
            pods = await kube.job_pods(cluster, done) + await kube.job_pods(cluster, victim)
            return all("started" in p["metadata"].get("annotations", {}).get(names.ANN_REPORTED, "") for p in pods)

        await wait_until(recorded_on_the_pods, 30, "the reports recorded on the pods")
        await wait_until(lambda: first.book.entry(JobId(later)), 30, "the later job's submission read")
        await connectors.stop(first)

        # Away: the job finishes, a preemption and a placement are decided.
        await kube.set_pod_status(pod, SUCCEEDED)
        await scheduler.publish(
            [
                JobPreemptionRequested(
                    job_id=JobId(victim),
                    cycle_id=CycleId("c-1"),
                    cluster=ClusterId(cluster),
                    rule="r",
                    grace_period_s=1,
                ),
                a_placement(later, (nodes[0],), cluster=cluster),
            ]
        )
        second = await connectors.start(config(cluster))
        await tap.wait(JobSucceeded, job_id=done)
        await tap.wait(JobPreempted, job_id=victim)
        (later_pod,) = await wait_until(lambda: kube.job_pods(cluster, later), 30, "the later job's pod")
        assert later_pod["spec"]["nodeName"] == nodes[0]
        assert second.book.scans >= 1  # its submission was found on the jobs topic, not in memory
        assert len(tap.events(JobStarted, job_id=done)) == 1 and len(tap.events(JobStarted, job_id=victim)) == 1
        (kept,) = await kube.job_pods(cluster, done)
        assert kept["metadata"]["annotations"][names.ANN_REPORTED] == "started,succeeded"
        # Job events once each; the nodes were restated by the new connector (same ids: by design).
        assert_no_duplicates(tap, cluster, topic=JOBS.name)
    finally:
        await delete_nodes(kube, nodes)


async def test_a_restarted_connector_recognises_a_spread_runs_part_by_its_pods_and_never_reopens_it(
    kube: Kube, tap: Tap, scheduler: Publisher, connectors: Running
) -> None:
    cluster = unique("part")
    nodes = [f"{cluster}-n{i}" for i in range(2)]
    try:
        for node in nodes:
            await kube.node(a_node(node).gpus(8).build())
        first = await connectors.start(config(cluster))
        job = unique("svc")
        added = JobReplicasAdded(
            job_id=JobId(job),
            cycle_id=CycleId("cycle-2"),
            cluster=ClusterId(cluster),
            run=1,
            replicas=tuple(
                ReplicaPlacement(replica=r, node=NodeId(nodes[r - 2]), gpu_indices=(0,), gpu_milli_each=1000)
                for r in (2, 3)
            ),
            running_replicas=4,
            chosen=CandidateScore(cluster=ClusterId(cluster), total=0),
            explanation="2 replicas in a second cluster",
        )
        service = a_job(job, replicas=4, kind=JobKind.INFERENCE, inference=InferenceSpec(spread_clusters=2))
        await scheduler.publish([service, a_placement(job, ("far-0", "far-1"), cluster=unique("first")), added])
        pods = await wait_until(lambda: _exactly(kube.job_pods(cluster, job), 2), 30, "the part's 2 pods")
        for pod in pods:
            await kube.set_pod_status(pod, RUNNING)
        await tap.wait(JobStarted, job_id=job)
        await wait_until(lambda: _reported(kube, cluster, job, "started"), 30, "the start recorded on the pods")
        await connectors.stop(first)

        for pod in pods:  # away: the part's replicas finish
            await kube.set_pod_status(pod, SUCCEEDED)
        second = await connectors.start(config(cluster))
        (ended,) = await tap.wait(JobSucceeded, job_id=job)
        assert (ended.cluster, ended.run, ended.message) == (cluster, 1, "2 replica(s) succeeded")
        assert len(tap.events(JobStarted, job_id=job)) == 1

        # The part's pods are cleaned away; the addition that opened it, read again, opens nothing.
        await wait_until(lambda: _reported(kube, cluster, job, "started,succeeded"), 30, "the end recorded")
        for pod in await kube.job_pods(cluster, job):
            await kube.delete_pod(pod, 0)
        await wait_until(lambda: _gone(kube.job_pods(cluster, job)), 30, "the part's pods gone")
        await scheduler.publish([added])
        marker = unique("marker")
        await scheduler.publish([a_job(marker), a_placement(marker, (nodes[0],), cluster=cluster)])
        await wait_until(lambda: _exactly(kube.job_pods(cluster, marker), 1), 30, "the marker's pod")
        await wait_until(lambda: second.book.run_ended(JobId(job), 1), 30, "the part's end read")
        assert await kube.job_pods(cluster, job) == []
        assert_no_duplicates(tap, cluster, topic=JOBS.name)
    finally:
        await delete_nodes(kube, nodes)


async def _exactly(found: Awaitable[list[Obj]], count: int) -> list[Obj] | None:
    pods = await found
    return pods if len(pods) == count else None


async def _gone(found: Awaitable[list[Obj]]) -> bool:
    return not await found


async def _reported(kube: Kube, cluster: str, job: str, reported: str) -> bool:
    pods = await kube.job_pods(cluster, job)
    return bool(pods) and all(p["metadata"].get("annotations", {}).get(names.ANN_REPORTED) == reported for p in pods)
