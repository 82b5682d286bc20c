"""NPU failures in the simulator: drawn for nodes with NPUs without moving anyone else's faults, shown in
the node's snapshot and health reports, fatal to the runs on that NPU only, and over when the fault ends
(after a restart too)."""

from __future__ import annotations

import hashlib
import json

import pytest

from connectors.sim import Fault, FaultKind, FaultPlan, History, NodeSpec, SimConfig, npu_pool
from connectors.sim.cluster import ClusterModel
from connectors.sim.faults import NPU_AI_CORE, NPU_ERRORS, NPU_HBM_ECC
from events.catalog.inventory import GpuHealthReported, NodeObserved
from events.catalog.jobs import JobFailed
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, Health, NodeId

from .builders import SOURCE, T0, Story, a_cluster, a_job, a_node, a_placement

pytestmark = pytest.mark.timeout(30)

CONFIG = SimConfig(fault_rate=0.5, seed=11, start_delay_s=0, fault_min_s=600, fault_max_s=1200)


def mixed_fleet() -> list[NodeSpec]:
    """Six 8-GPU nodes, two CPU nodes, three 8-NPU nodes and one node with 4 GPUs and 4 NPUs."""
    nodes = [
        *(a_node(f"gpu-{i:02d}").build() for i in range(6)),
        *(a_node(f"cpu-{i:02d}").gpus(0).build() for i in range(2)),
        *npu_pool(3),
        NodeSpec(
            NodeId("mixed-00"),
            64_000,
            262_144,
            4,
            "A100-SXM4-80GB",
            81_251,
            npus=4,
            npu_model="Ascend910B",
            npu_memory_mib=65_536,
        ),
    ]
    return sorted(nodes, key=lambda n: n.name)


def digest(rows: list[tuple[object, ...]]) -> str:
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def two_days() -> list[Fault]:
    plan = FaultPlan("sim-mixed", mixed_fleet(), SimConfig(fault_rate=0.5, seed=11), T0)
    return plan.between(T0 - 1, T0 + 48 * 3_600_000)


def has_npus(fault: Fault) -> bool:
    return fault.node.startswith(("npu-", "mixed-"))


def test_nodes_without_npus_keep_the_faults_they_had_before_npus_could_fail() -> None:
    faults = two_days()
    others = [
        (f.at_ms, f.until_ms, f.hour, f.number, f.kind.value, f.node, f.gpu, f.xid) for f in faults if not has_npus(f)
    ]
    # Both digests were taken of the same plan at e704d89, before NPUs could fail.
    assert len(others) == 194
    assert digest(others) == "3a83d894541495e7fafc96fa34f6e3246398db3f62572d385596c6cddbb3d306"  # type: ignore[arg-type]
    # And every fault, NPU nodes' included, starts and ends when it did: only what an NPU node's is changed.
    times = [(f.at_ms, f.until_ms, f.hour, f.number, f.node) for f in faults]
    assert digest(times) == "f02bf50116173bfe647c4b145447f549d50eb69dbb6ff873f4522a043e319009"  # type: ignore[arg-type]


def test_nodes_with_npus_get_npu_failures_and_a_mixed_node_both_kinds() -> None:
    faults = two_days()
    npu_failures = [f for f in faults if f.kind is FaultKind.NPU_FAILURE]
    assert {f.node for f in npu_failures} == {"npu-ascend-00", "npu-ascend-01", "npu-ascend-02", "mixed-00"}
    assert all(f.npu is not None and 0 <= f.npu < 8 and f.npu_error in NPU_ERRORS for f in npu_failures)
    assert all(f.gpu is None and f.xid is None for f in npu_failures)
    assert {f.npu_error for f in npu_failures} == set(NPU_ERRORS)
    assert all(f.npu is not None and f.npu < 4 for f in npu_failures if f.node == "mixed-00")
    mixed = {f.kind for f in faults if f.node == "mixed-00"}
    assert {FaultKind.GPU_FAILURE, FaultKind.NPU_FAILURE} <= mixed
    # A node without GPUs never has a GPU failure, a node without NPUs never an NPU failure.
    assert not [f for f in faults if f.kind is FaultKind.GPU_FAILURE and f.node.startswith(("npu-", "cpu-"))]
    assert not [f for f in npu_failures if not has_npus(f)]
    # The same seed draws the same NPU, code and kind again.
    assert npu_failures == [f for f in two_days() if f.kind is FaultKind.NPU_FAILURE]


def npu_cluster() -> Story:
    return Story(a_cluster(*npu_pool(2)), CONFIG)


def first_npu_fault() -> Fault:
    plan = FaultPlan("sim-test", a_cluster(*npu_pool(2)).nodes, CONFIG, T0)
    return next(f for f in plan.between(T0, T0 + 10 * 3_600_000) if f.kind is FaultKind.NPU_FAILURE)


def test_an_npu_failure_fails_the_runs_on_that_npu_only_and_the_npu_comes_back() -> None:
    fault = first_npu_fault()
    assert fault.npu is not None and fault.npu_error is not None
    other = (fault.npu + 4) % 8
    story = npu_cluster()
    story.start(
        a_job("hit").npus(2).runtime(10**6), a_placement("hit").on(fault.node, npus=(fault.npu, (fault.npu + 1) % 8))
    )
    story.start(a_job("spared").npus(1).runtime(10**6), a_placement("spared").on(fault.node, npus=(other,)))
    story.at((fault.at_ms - T0) / 1000)
    [failed] = story.events(JobFailed)
    assert failed.event.job_id == "hit" and failed.event.reason is ReasonCode.NPU_FAILURE  # type: ignore[attr-defined]
    assert failed.event.node == fault.node and failed.time_ms == fault.at_ms  # type: ignore[attr-defined]
    assert f"NPU {fault.npu} on node {fault.node} failed (error code 0x{fault.npu_error:08X})" == failed.event.message  # type: ignore[attr-defined]
    [report] = [e.event for e in story.events(GpuHealthReported) if e.event.node == fault.node]  # type: ignore[attr-defined]
    assert isinstance(report, GpuHealthReported) and report.gpus == () and len(report.npus) == 8
    sample = report.npus[fault.npu]
    hbm = 1 if fault.npu_error == NPU_HBM_ECC else 0
    assert (sample.health, sample.errors, sample.last_error_code, sample.hbm_ecc_uncorrected) == (
        Health.FAILED,
        1,
        fault.npu_error,
        hbm,
    )
    assert {s.health for s in report.npus if s.index != fault.npu} == {Health.OK}
    snapshot = [e.event for e in story.events(NodeObserved) if e.event.node == fault.node][-1]  # type: ignore[attr-defined]
    assert isinstance(snapshot, NodeObserved) and snapshot.npus[fault.npu].health is Health.FAILED
    # While it is down, a placement on it is refused; after recovery it is healthy again, its counters kept.
    story.start(a_job("late").npus(1), a_placement("late").on(fault.node, npus=(fault.npu,)))
    refused = story.events(JobFailed, "late")[0].event
    assert refused.reason is ReasonCode.GPU_UNHEALTHY and f"NPU {fault.npu} has failed" in refused.message  # type: ignore[attr-defined]
    story.at((fault.until_ms - T0) / 1000)
    snapshot = [e.event for e in story.events(NodeObserved) if e.event.node == fault.node][-1]  # type: ignore[attr-defined]
    assert isinstance(snapshot, NodeObserved) and snapshot.npus[fault.npu].health is Health.OK
    recovered = [e for e in story.events(GpuHealthReported) if e.event.node == fault.node][-1]  # type: ignore[attr-defined]
    assert recovered.id.endswith(f":health:{fault.name}:recovered")
    assert recovered.event.npus[fault.npu].health is Health.OK and recovered.event.npus[fault.npu].errors == 1  # type: ignore[attr-defined]
    assert not story.events(JobFailed, "spared")


def test_a_restart_during_an_npu_failure_keeps_the_npu_failed_until_the_fault_ends() -> None:
    fault = first_npu_fault()
    assert fault.npu is not None
    before = npu_cluster().at((fault.at_ms - T0) / 1000 + 1)
    history = History(ClusterId(before.spec.cluster), SOURCE)
    for record in [*before.inputs, *before.envelopes()]:
        history.add(record)
    model = ClusterModel(before.spec, before.config, source=SOURCE)
    model.restore(history)
    assert model.nodes[fault.node].npu_health(fault.npu) is Health.FAILED
    assert history.resume_ms is not None
    after = model.begin(history.resume_ms)
    # The snapshot it restates is the one it published: nothing new about the node.
    assert not [e for e in after if isinstance(e.event, NodeObserved) and e.event.node == fault.node]
    after += model.advance(fault.until_ms)
    recovered = [e for e in after if isinstance(e.event, GpuHealthReported) and e.event.node == fault.node]
    assert [e.id for e in recovered] == [f"sim:sim-test:{fault.node}:health:{fault.name}:recovered"]
    assert model.nodes[fault.node].npu_health(fault.npu) is Health.OK


def test_an_operators_npu_drill_fails_one_npu_for_a_while() -> None:
    story = Story(a_cluster(*npu_pool(1)), SimConfig(start_delay_s=0))
    story.start(a_job("hit").npus(8).runtime(10**6), a_placement("hit").on("npu-ascend-00", npus=range(8)))
    story.at(10)
    story.emitted += story.model.fail_npu(NodeId("npu-ascend-00"), 3, story.now_ms, 60_000)
    [failed] = story.events(JobFailed, "hit")
    assert failed.event.reason is ReasonCode.NPU_FAILURE  # type: ignore[attr-defined]
    assert failed.event.message == f"NPU 3 on node npu-ascend-00 failed (error code 0x{NPU_AI_CORE:08X})"  # type: ignore[attr-defined]
    story.at(71)
    assert story.model.nodes[NodeId("npu-ascend-00")].npu_health(3) is Health.OK
    reports = [e.event for e in story.events(GpuHealthReported)]
    assert [r.npus[3].health for r in reports] == [Health.FAILED, Health.OK]  # type: ignore[attr-defined]
    with pytest.raises(KeyError, match="has no NPU 8"):
        story.model.fail_npu(NodeId("npu-ascend-00"), 8, story.now_ms, 1000)
