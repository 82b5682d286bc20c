"""The simulated cluster on the real log (Kafka and the embedded PostgreSQL log): registration,
lifecycle timing in simulated time, stops, refusals, usage and seeded faults."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from connectors.sim import ClusterModel, ClusterSpec, History, SimCluster, SimConfig, SimFleet, load_nodes
from events.catalog.inventory import (
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuHealthReported,
    NodeObserved,
    NodeRemoved,
    NodeUsageReported,
)
from events.catalog.jobs import JobCancelled, JobFailed, JobPreempted, JobReclaimed, JobStarted, JobSucceeded
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, NodeId
from events.log import EventLog
from events.wire.envelope import Envelope

from .builders import (
    FIXTURES,
    a_job,
    a_node,
    a_placement,
    cancel_request,
    preemption_request,
    reclaim_request,
    replicas_added,
)
from .logtools import Client, Tail, drain, unique

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(60)]

ALLOCATION = "sim.fedsched.io/gpu-allocation"
SHARED = SimConfig(speed=200, start_delay_s=10, stop_delay_s=4, usage_interval_s=60, notebook_active_s=120)


@pytest_asyncio.fixture(loop_scope="session", scope="module")
async def shared(sim_log: EventLog) -> AsyncIterator[SimCluster]:
    """One running cluster the lifecycle tests share (each uses its own jobs and nodes)."""
    nodes = [a_node(f"a100-{i}").build() for i in range(4)] + [a_node("t4-0").gpus(4, "T4", 15109).build()]
    cluster = SimCluster(sim_log, ClusterSpec.build(unique("sim-shared"), nodes), SHARED)
    await cluster.start()
    yield cluster
    await cluster.stop()


async def test_a_fleet_built_from_a_trace_slice_registers_every_node(sim_log: EventLog) -> None:
    names = [unique("sim-fleet") for _ in range(3)]
    slice_path = FIXTURES / "sim_openb_nodes.csv"
    fleet = SimFleet.from_node_list(sim_log, slice_path, names=names, config=SimConfig(speed=50))
    tails = [await Tail(sim_log, name).__aenter__() for name in names]
    try:
        await fleet.start()
        for index, (tail, name) in enumerate(zip(tails, names, strict=True)):
            expected = load_nodes(slice_path, split=(3, index)).nodes
            count = len(expected)
            await tail.wait_for(lambda t=tail, n=count: len(t.of(NodeObserved)) >= n, f"{name}'s nodes")
            await tail.wait_for(lambda t=tail: t.of(ClusterRegistered), f"{name} registered")
            seen = {e.data.node: e for e in tail.of(NodeObserved)}  # type: ignore[attr-defined]
            assert sorted(seen) == sorted(n.name for n in expected)
            for node in expected:
                snapshot = seen[node.name]
                assert snapshot.subject == f"{name}/{node.name}"
                assert [g.model for g in snapshot.data.gpus] == [node.gpu_model] * node.gpus  # type: ignore[attr-defined]
                assert snapshot.id == f"sim:{name}:{node.name}:g1"
        assert fleet.clusters[0].clock is fleet.clusters[2].clock
    finally:
        await fleet.stop()
        for tail in tails:
            await drain(tail)
            await tail.__aexit__()
    for tail in tails:
        assert tail.events(ClusterStatusChanged)[-1].status is ClusterStatus.UNREACHABLE


async def test_a_fleet_built_from_a_yaml_node_list_registers_its_cluster_section(sim_log: EventLog) -> None:
    """``fedsched up --sim-nodes X.yaml`` (embedded mode) states the file's datasets, rates and names, as
    ``fedsched connector sim`` does."""
    names = [unique("sim-lab") for _ in range(3)]
    fleet = SimFleet.from_node_list(sim_log, FIXTURES / "sim_nodes.yaml", names=names, config=SimConfig(speed=50))
    tails = [await Tail(sim_log, name).__aenter__() for name in names]
    try:
        await fleet.start()
        for tail, name in zip(tails, names, strict=True):
            await tail.wait_for(functools.partial(tail.of, ClusterRegistered), f"{name} registered")
            registered = tail.events(ClusterRegistered)[0]
            assert registered.datasets == ("imagenet",)
            assert ("A100-SXM4-80GB", 3_000_000) in {(r.model, r.micro_per_gpu_hour) for r in registered.gpu_rates}
            assert (registered.display_name, registered.site, registered.region) == ("Lab cluster", "lab", "eu-west")
            assert (registered.currency, registered.labels["tier"]) == ("EUR", "lab")
    finally:
        await fleet.stop()
        for tail in tails:
            await drain(tail)
            await tail.__aexit__()


async def test_a_placement_starts_after_the_delay_and_succeeds_after_its_runtime_in_simulated_time(
    sim_log: EventLog, shared: SimCluster
) -> None:
    job = unique("train")
    async with Tail(sim_log, shared.cluster) as tail, Client(sim_log) as client:
        await client.send(a_job(job).gpus(2).runtime(120).submitted())
        await client.send(a_placement(job).cluster(shared.cluster).on("a100-0", 2, 3).placed())
        await tail.wait_for(lambda: tail.of(JobSucceeded, job), "the job to succeed")

        def taken() -> list[Envelope]:
            return [e for e in tail.of(NodeObserved) if e.data.labels.get(ALLOCATION) == "0,0,1000,1000,0,0,0,0"]  # type: ignore[attr-defined]

        await tail.wait_for(taken, "the snapshot of the node with the job's GPUs taken")
    [started], [succeeded], [accepted] = tail.of(JobStarted, job), tail.of(JobSucceeded, job), taken()
    assert started.time_ms - accepted.time_ms == 10_000
    assert succeeded.time_ms - started.time_ms == 120_000
    assert started.id == f"sim:{shared.cluster}:{job}:1:started" and started.tenant == "team-a"
    assert started.causation_id is not None


async def test_cancellation_preemption_and_reclaim_stop_running_jobs(sim_log: EventLog, shared: SimCluster) -> None:
    cancelled, preempted, reclaimed = unique("cancel-me"), unique("preempt-me"), unique("reclaim-me")
    async with Tail(sim_log, shared.cluster) as tail, Client(sim_log) as client:
        for index, job in enumerate((cancelled, preempted, reclaimed)):
            await client.send(a_job(job).gpus(1).runtime(10**6).submitted())
            await client.send(a_placement(job).cluster(shared.cluster).on("a100-1", index).placed())
        await tail.wait_for(lambda: len(tail.of(JobStarted)) >= 3, "three jobs running")
        await client.send(
            cancel_request(cancelled),
            preemption_request(preempted, grace_s=60, cluster=shared.cluster),
            reclaim_request(reclaimed, grace_s=0, cluster=shared.cluster),
        )
        await tail.wait_for(
            lambda: tail.of(JobCancelled) and tail.of(JobPreempted) and tail.of(JobReclaimed), "all three stopped"
        )
    [c], [p], [r] = (
        tail.events(JobCancelled, cancelled),
        tail.events(JobPreempted, preempted),
        tail.events(JobReclaimed, reclaimed),
    )
    assert c.requester == "alice@example.com" and p.checkpointed and not r.checkpointed
    assert not tail.of(JobSucceeded)


async def test_a_placement_that_over_commits_or_wants_another_gpu_model_is_refused(
    sim_log: EventLog, shared: SimCluster
) -> None:
    resident, greedy, picky = unique("resident"), unique("greedy"), unique("picky")
    async with Tail(sim_log, shared.cluster) as tail, Client(sim_log) as client:
        await client.send(a_job(resident).gpus(8).runtime(10**6).submitted(), a_job(greedy).gpus(1).submitted())
        await client.send(a_job(picky).gpus(1).models("T4").submitted())
        await client.send(a_placement(resident).cluster(shared.cluster).on("a100-2", *range(8)).placed())
        await client.send(a_placement(greedy).cluster(shared.cluster).on("a100-2", 5).placed())
        await client.send(a_placement(picky).cluster(shared.cluster).on("a100-3", 0).placed())
        await tail.wait_for(lambda: len(tail.of(JobFailed)) >= 2, "two refusals")
        await client.send(cancel_request(resident))
    greedy_failed, picky_failed = tail.events(JobFailed, greedy)[0], tail.events(JobFailed, picky)[0]
    assert greedy_failed.reason is ReasonCode.INSUFFICIENT_GPU and "GPU 5 has 0 milli-GPU free" in greedy_failed.message
    assert picky_failed.reason is ReasonCode.GPU_MODEL_UNAVAILABLE and "allows only T4" in picky_failed.message
    assert (greedy_failed.node, picky_failed.node) == ("a100-2", "a100-3")


async def test_an_idle_notebook_shows_low_utilisation(sim_log: EventLog, shared: SimCluster) -> None:
    notebook = unique("notebook")
    async with Tail(sim_log, shared.cluster) as tail, Client(sim_log) as client:
        await client.send(a_job(notebook).notebook().gpus(1).submitted())
        await client.send(a_placement(notebook).cluster(shared.cluster).on("t4-0", 1).placed())

        def usage() -> list[int]:
            return [u.utilisation_pct for r in tail.events(NodeUsageReported) for u in r.jobs if u.job_id == notebook]

        await tail.wait_for(lambda: len(usage()) >= 4, "four usage windows of the notebook")
        await client.send(cancel_request(notebook))
    # Busy in its first two minutes: the first window is averaged over the part it ran, the next is whole.
    assert usage()[1] >= 20, usage()
    assert all(pct <= 3 for pct in usage()[3:]), usage()
    last = [r for r in tail.events(NodeUsageReported) if r.jobs][-1]
    assert last.window_ms == 60_000 and last.gpus[1].utilisation_pct <= 3


async def test_seeded_faults_on_the_log_are_the_seeded_schedule(sim_log: EventLog) -> None:
    config = SimConfig(speed=20_000, seed=11, fault_rate=0.5, fault_min_s=600, fault_max_s=3600)
    spec = ClusterSpec.build(unique("sim-faulty"), [a_node(f"n-{i}").gpus(4, "T4", 15109).build() for i in range(8)])
    cluster = SimCluster(sim_log, spec, config)
    async with Tail(sim_log, spec.cluster) as tail:
        await cluster.start()
        await tail.wait_for(
            lambda: len(tail.of(GpuHealthReported)) >= 10 and tail.of(NodeRemoved),
            "ten GPU health reports and a lost node",
            timeout_s=30,
        )
        await cluster.stop()
        await tail.wait_for(lambda: len(tail.envelopes) >= cluster.stats.published, "every published event")
    origin = tail.of(ClusterRegistered)[0].time_ms
    last = max(e.time_ms for e in tail.envelopes if not isinstance(e.data, ClusterStatusChanged))
    model = ClusterModel(spec, config, source=cluster.source)
    model.restore(History(ClusterId(spec.cluster), cluster.source))
    offline = [*model.begin(origin), *model.advance(last)]
    kinds = (GpuHealthReported, NodeRemoved, NodeObserved)
    on_log = sorted((e.time_ms, e.id, e.data) for e in tail.envelopes if isinstance(e.data, kinds))
    assert on_log == sorted((e.time_ms, e.id, e.event) for e in offline if isinstance(e.event, kinds))


async def test_a_spread_services_part_opened_here_survives_a_restart_and_ends_once(sim_log: EventLog) -> None:
    config = SimConfig(speed=200, start_delay_s=10, usage_interval_s=600)
    spec = ClusterSpec.build(unique("sim-part"), [a_node("p-0").gpus(4, "T4", 15109).build()])
    job, elsewhere = unique("svc"), unique("sim-first")
    service = a_job(job).spread(2).gpus(1).replicas(4).runtime(2000).submitted()
    first = SimCluster(sim_log, spec, config)
    async with Tail(sim_log, spec.cluster) as tail, Client(sim_log) as client:
        await first.start()
        await client.send(service, a_placement(job).cluster(elsewhere).on("far-0", 0).on("far-0", 1).placed())
        await client.send(replicas_added(job, 2, ("p-0", (0,)), ("p-0", (1,)), cluster=spec.cluster))
        await tail.wait_for(lambda: tail.of(JobStarted, job), "the part to start here")
        await first.stop()
        again = SimCluster(sim_log, spec, config)  # a restart: rebuilt from the log
        await again.start()
        try:
            await tail.wait_for(lambda: tail.of(JobSucceeded, job), "the part to end here", timeout_s=40)
        finally:
            await again.stop()
    [started], [ended] = tail.of(JobStarted, job), tail.of(JobSucceeded, job)
    assert (started.data.cluster, ended.data.cluster, ended.data.run) == (spec.cluster, spec.cluster, 1)  # type: ignore[attr-defined]
    assert ended.time_ms - started.time_ms == 2_000_000  # as it would have ended without the restart
    assert again.model is not None and again.model.nodes[NodeId("p-0")].gpu_milli == [0, 0, 0, 0]
