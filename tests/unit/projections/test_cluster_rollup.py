"""A cluster's roll-up profile is its own: congestion against its free GPUs, stability from its nodes'
failure history (decayed), fit for training and inference from its nodes, folded in memory."""

from __future__ import annotations

from events.catalog.inventory import GpuHealthReported, GpuHealthSample, NodeObserved, NodeRemoved
from events.catalog.profiles import ResourceProfileUpdated
from events.catalog.reasons import ReasonCode
from events.catalog.types import Health
from tests.unit.projections.builders import Fold, a_job, a_node, placed

DAY_S = 24 * 3600


def rollup(fold: Fold, cluster: str) -> ResourceProfileUpdated:
    said = [o.event for o in fold.outputs if isinstance(o.event, ResourceProfileUpdated) and o.event.node is None]
    return [e for e in said if e.cluster == cluster][-1]


def failed(node: str, *indices: int, xid: int = 1) -> GpuHealthReported:
    return GpuHealthReported(
        cluster="c1", node=node,
        gpus=tuple(GpuHealthSample(index=i, health=Health.FAILED, xid_errors=xid, last_xid=79) for i in indices),
    )  # fmt: skip


def test_congestion_is_the_demand_its_gpus_could_serve_against_its_own_free_gpus() -> None:
    fold = Fold()
    fold.feed(a_node(cluster="c1", node="a1"))
    fold.feed(a_node(cluster="c2", node="b1"))
    fold.feed(a_job("running", gpus=6))
    fold.feed(placed("running", node="b1", cluster="c2", gpus=(0, 1, 2, 3, 4, 5)), at_s=1)
    fold.feed(a_job("waiting", gpus=2), at_s=2)
    # 2 GPUs wanted: a quarter of c1's 8 free, all of c2's 2 (the fleet's figure, 2 of 10, said both 200).
    assert (rollup(fold, "c1").congestion_milli, rollup(fold, "c2").congestion_milli) == (250, 1000)


def test_a_cluster_whose_gpus_failed_in_the_last_day_is_less_stable_and_recovers_as_the_failure_ages() -> None:
    fold = Fold()
    fold.feed(a_node(cluster="c1", node="n1"))
    fold.feed(a_node(cluster="c1", node="n2"))
    fold.feed(a_node(cluster="c2", node="m1"))
    fold.feed(failed("n1", 3), at_s=100)
    shaken, steady = rollup(fold, "c1"), rollup(fold, "c2")
    # n1: 7 of 8 GPUs up (875) less 200 for a failure today; n2 whole: (675 + 1000) / 2 by their GPUs.
    assert (shaken.health_milli, steady.health_milli) == (837, 1000)
    assert shaken.failures_per_kgpu_hour_milli == 1 * 1000 * 1000 // (16 * 24)  # 1 failure, 384 GPU-hours
    assert steady.failures_per_kgpu_hour_milli == 0
    assert (shaken.recent_failures, steady.recent_failures) == (1, 0)
    # A day on (the node reports the same counters), the penalty has halved and the failure is no longer
    # in the last day.
    fold.feed(failed("n1", 3), at_s=100 + DAY_S)
    later = rollup(fold, "c1")
    assert (later.health_milli, later.failures_per_kgpu_hour_milli) == ((775 + 1000) // 2, 0)
    assert later.recent_failures == 0
    gone = NodeRemoved(cluster="c1", node="n1", generation=1, reason=ReasonCode.NODE_DELETED)
    fold.feed(gone, at_s=200 + DAY_S)  # it leaves: n2 alone
    assert rollup(fold, "c1").health_milli == 1000


def test_fit_for_training_and_inference_rolls_up_from_the_nodes() -> None:
    fold = Fold()
    fold.feed(a_node(cluster="c1", node="small", gpus=4))  # 4 GPUs, no fast interconnect: not for training
    assert (rollup(fold, "c1").fit_training, rollup(fold, "c1").fit_inference) == (False, True)
    fold.feed(a_node(cluster="c1", node="big", gpus=8))
    assert rollup(fold, "c1").fit_training
    linked = a_node(cluster="c2", node="linked", gpus=4).model_dump() | {"nvlink_domain": "nv-0"}
    fold.feed(NodeObserved.model_validate(linked))
    assert rollup(fold, "c2").fit_training
    fold.feed(failed("big", 0, 1))  # health 750 - 400: fit for neither
    assert (rollup(fold, "c1").fit_training, rollup(fold, "c1").fit_inference) == (False, True)  # small serves
