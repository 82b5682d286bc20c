"""NPU health in the projections, folded in memory: a health report's NPU samples change the node's
profile as its GPU samples do (a failed NPU is not healthy and never free, and counts as a failure in the
node's health, failure history and stability), roll up into its cluster's stability weighted by devices,
and reach the nodes table (healthy and degraded NPUs)."""

from __future__ import annotations

from events.catalog.inventory import GpuHealthReported, NodeObserved, NpuDevice, NpuHealthSample
from events.catalog.profiles import ResourceProfileUpdated
from events.catalog.types import Health
from projections.readmodel.rows.entities import TABLES
from projections.stages.nodes import STAGE, NodeProfile, degraded_npus, healthy_npus
from tests.unit.projections.builders import Fold, a_node

DAY_S = 24 * 3600


def npu_node(node: str = "n1", cluster: str = "c1", generation: int = 1, failed: tuple[int, ...] = ()) -> NodeObserved:
    npus = tuple(
        NpuDevice(index=i, model="Ascend910B", memory_mib=65_536, health=Health.FAILED if i in failed else Health.OK)
        for i in range(8)
    )
    return a_node(cluster=cluster, node=node, gpus=0, generation=generation).model_copy(update={"npus": npus})


def npu_report(node: str = "n1", errors: int = 1, **states: Health) -> GpuHealthReported:
    """``npu3=Health.FAILED``: NPU 3 reported failed with ``errors`` errors, the others healthy and clean."""
    return GpuHealthReported(
        cluster="c1",
        node=node,
        npus=tuple(
            NpuHealthSample(
                index=i,
                health=states.get(f"npu{i}", Health.OK),
                errors=errors if f"npu{i}" in states else 0,
                last_error_code=0x80E01809 if f"npu{i}" in states else None,
                hbm_ecc_uncorrected=0,
            )
            for i in range(8)
        ),
    )


def profile(fold: Fold, node: str = "n1") -> ResourceProfileUpdated:
    said = [o.event for o in fold.outputs if isinstance(o.event, ResourceProfileUpdated) and o.event.node == node]
    return said[-1]


def rollup(fold: Fold, cluster: str = "c1") -> ResourceProfileUpdated:
    said = [o.event for o in fold.outputs if isinstance(o.event, ResourceProfileUpdated) and o.event.node is None]
    return [e for e in said if e.cluster == cluster][-1]


def stored(fold: Fold, node: str = "n1") -> NodeProfile:
    entity = fold.store.get(STAGE, f"c1/{node}")
    assert isinstance(entity, NodeProfile)
    return entity


def test_a_failed_npu_lowers_its_nodes_health_counts_as_a_failure_and_is_never_free() -> None:
    fold = Fold()
    fold.feed(npu_node())
    assert (profile(fold).health_milli, profile(fold).free.npus, profile(fold).recent_failures) == (1000, 8, 0)
    fold.feed(npu_report(npu3=Health.FAILED), at_s=100)
    failed = profile(fold)
    # 7 of 8 NPUs up (875) less 200 for a failure today.
    assert (failed.health_milli, failed.recent_failures, failed.capacity.npus, failed.free.npus) == (675, 1, 8, 7)
    assert failed.failures_per_kgpu_hour_milli > 0  # one failure over 100 s of 8 NPUs
    node = stored(fold)
    assert (healthy_npus(node), degraded_npus(node), node.failures) == (7, 0, 1)
    # The same report again changes nothing; the NPU's recovery frees it, and the failure stays counted.
    fold.feed(npu_report(npu3=Health.FAILED), at_s=110)
    assert stored(fold).failures == 1
    fold.feed(npu_report(npu3=Health.OK), at_s=200)
    back = profile(fold)
    assert (back.health_milli, back.recent_failures, back.free.npus) == (800, 1, 8)
    # The failure report appended again, late: the recovered NPU does not turn failed again.
    fold.feed(npu_report(npu3=Health.FAILED), at_s=100)
    assert healthy_npus(stored(fold)) == 8 and stored(fold).failures == 1


def test_a_degraded_npu_counts_half_and_is_still_healthy() -> None:
    fold = Fold()
    fold.feed(npu_node())
    fold.feed(npu_report(errors=0, npu2=Health.DEGRADED), at_s=10)
    node = stored(fold)
    assert (healthy_npus(node), degraded_npus(node), node.failures) == (8, 1, 0)
    assert (profile(fold).health_milli, profile(fold).free.npus) == ((7 * 1000 + 500) // 8, 8)


def test_an_error_reported_on_an_npu_that_keeps_working_is_a_failure_too() -> None:
    fold = Fold()
    fold.feed(npu_node())
    fold.feed(npu_report(errors=2, npu5=Health.OK), at_s=10)
    assert stored(fold).failures == 1 and profile(fold).recent_failures == 1


def test_an_npu_node_arriving_with_a_failed_npu_did_not_fail_under_us_but_a_later_snapshot_failing_one_did() -> None:
    fold = Fold()
    fold.feed(npu_node(failed=(0,)))
    assert stored(fold).failures == 0 and profile(fold).free.npus == 7
    fold.feed(npu_node(generation=2, failed=(0, 6)), at_s=10)
    assert stored(fold).failures == 1 and profile(fold).free.npus == 6


def test_a_clusters_stability_weighs_its_nodes_by_their_gpus_and_npus() -> None:
    fold = Fold()
    fold.feed(npu_node("n1"))
    fold.feed(a_node(cluster="c1", node="g1"))  # 8 GPUs, healthy
    fold.feed(npu_report("n1", npu3=Health.FAILED), at_s=100)
    shaken = rollup(fold)
    # n1 (8 NPUs) at 675, g1 (8 GPUs) at 1000: weighed by their devices.
    assert (shaken.health_milli, shaken.recent_failures) == ((675 + 1000) // 2, 1)
    assert shaken.failures_per_kgpu_hour_milli == 1 * 1000 * 1000 // (16 * 24)  # 1 failure, 384 device-hours
    fold.feed(npu_report("n1", npu3=Health.OK), at_s=100 + DAY_S)
    later = rollup(fold)
    assert (later.health_milli, later.recent_failures) == ((900 + 1000) // 2, 0)


def test_the_nodes_table_counts_healthy_and_degraded_npus() -> None:
    fold = Fold()
    fold.feed(npu_node())
    fold.feed(npu_report(npu1=Health.FAILED, npu2=Health.DEGRADED), at_s=10)
    (row,) = TABLES[STAGE].rows("c1/n1", stored(fold))
    assert row[-4:-1] == (7, 7, 1)  # NPUs free (the degraded one too), healthy (it included), degraded
