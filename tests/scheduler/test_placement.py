"""Placement constraints and node policies, as narrative cases on tiny fleets."""

from __future__ import annotations

import pytest

from services.scheduler.policy import Health, NodePolicy, Place, Queue, ReasonCode, schedule
from tests.scheduler.builders import a_job, a_node, config, snapshot

pytestmark = pytest.mark.timeout(30)


def placed(result, job_id: str) -> Place:
    for d in result.decisions:
        if isinstance(d, Place) and d.job_id == job_id:
            return d
    raise AssertionError(f"{job_id} not placed: {[x.message for x in result.decisions]}")


def queued(result, job_id: str) -> Queue:
    for d in result.decisions:
        if isinstance(d, Queue) and d.job_id == job_id:
            return d
    raise AssertionError(f"{job_id} not queued")


def test_a_whole_gpu_job_gets_distinct_free_gpus_on_one_node():
    r = schedule(snapshot([a_node("n1").build()], [a_job("j").gpus(4).build()]))
    p = placed(r, "j")
    assert len(p.replicas) == 1 and len(set(p.replicas[0].gpu_indices)) == 4
    assert p.replicas[0].gpu_milli_each == 1000


def test_a_gpu_share_goes_to_the_tightest_gpu_that_fits_under_best_fit():
    node = a_node("n1").gpus(4, (1000, 600, 300, 250)).build()
    r = schedule(snapshot([node], [a_job("j").share(280).build()]), config(node_policy=NodePolicy.BEST_FIT))
    assert placed(r, "j").replicas[0].gpu_indices == (2,)


@pytest.mark.parametrize(
    ("case", "node", "job", "reason"),
    [
        ("wrong model", a_node("n1").model("T4"), a_job("j").gpus(1).models("A100"), ReasonCode.GPU_MODEL_UNAVAILABLE),
        ("gpu memory", a_node("n1").model("T4", 15000), a_job("j").gpus(1).min_gpu_memory(40000),
         ReasonCode.GPU_MEMORY_TOO_SMALL),
        ("cordoned", a_node("n1").cordoned(), a_job("j").gpus(1), ReasonCode.NODE_UNSCHEDULABLE),
        ("too many gpus", a_node("n1").gpus(4), a_job("j").gpus(8), ReasonCode.NO_FEASIBLE_NODE),
        ("cpu short", a_node("n1").cpu(64000, 2000), a_job("j").gpus(1).cpu(8000), ReasonCode.INSUFFICIENT_CPU),
    ],
)  # fmt: skip
def test_a_job_that_cannot_fit_is_queued_with_the_binding_constraint(case, node, job, reason):
    r = schedule(snapshot([node.build()], [job.build()]))
    assert queued(r, "j").binding is reason, case


def test_failed_gpus_are_never_used_and_degraded_ones_only_when_nothing_else_fits():
    node = a_node("n1").gpus(4).gpu_health(0, Health.FAILED).gpu_health(1, Health.DEGRADED).build()
    r = schedule(snapshot([node], [a_job("a").gpus(2).build()]))
    assert set(placed(r, "a").replicas[0].gpu_indices) == {2, 3}
    r = schedule(snapshot([node], [a_job("b").gpus(3).build()]))
    assert set(placed(r, "b").replicas[0].gpu_indices) == {1, 2, 3}
    r = schedule(snapshot([node], [a_job("c").gpus(4).build()]))
    assert queued(r, "c")


def test_a_gang_is_placed_in_one_cluster_or_not_at_all():
    nodes = [
        a_node("a1").cluster("cluster-a").build(),
        a_node("b1").cluster("cluster-b").build(),
        a_node("b2").cluster("cluster-b").build(),
    ]
    r = schedule(snapshot(nodes, [a_job("g").gpus(8).replicas(2).build()]))
    p = placed(r, "g")
    assert p.cluster == "cluster-b" and {x.node_id for x in p.replicas} == {"b1", "b2"}
    r = schedule(snapshot(nodes, [a_job("h").gpus(8).replicas(3).build()]))
    q = queued(r, "h")
    assert q.binding is ReasonCode.GANG_TOO_LARGE
    assert not [d for d in r.decisions if isinstance(d, Place)]


def test_multi_node_training_prefers_one_nvlink_domain():
    nodes = [
        a_node("n1").domain("d1").build(),
        a_node("n2").domain("d2").build(),
        a_node("n3").domain("d1").build(),
    ]
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(2).nvlink().build()]))
    assert {x.node_id for x in placed(r, "t").replicas} == {"n1", "n3"}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (NodePolicy.BEST_FIT, "busy"),
        (NodePolicy.PACKING, "busy"),
        (NodePolicy.SPREAD, "idle"),
        (NodePolicy.FRAGMENTATION, "busy"),
    ],
)
def test_each_policy_picks_its_kind_of_node(policy, expected):
    nodes = [a_node("idle").build(), a_node("busy").gpus(8, (0, 0, 0, 0, 1000, 1000, 1000, 1000)).build()]
    job = a_job("j").gpus(4).build()
    shapes = config().typical_shapes
    r = schedule(snapshot(nodes, [job]), config(node_policy=policy, typical_shapes=shapes))
    assert placed(r, "j").replicas[0].node_id == expected


def test_the_random_policy_is_seeded_and_repeatable():
    nodes = [a_node(f"n{i}").build() for i in range(20)]
    jobs = [a_job(f"j{i}").gpus(1).build() for i in range(10)]
    runs = [schedule(snapshot(nodes, jobs), config(node_policy=NodePolicy.RANDOM, seed=7)).to_json() for _ in range(2)]
    assert runs[0] == runs[1]
    other = schedule(snapshot(nodes, jobs), config(node_policy=NodePolicy.RANDOM, seed=8)).to_json()
    assert other != runs[0]


def test_a_placement_carries_the_score_of_the_chosen_and_the_runner_up_cluster():
    nodes = [a_node("a1").cluster("cluster-a").build(), a_node("b1").cluster("cluster-b").model("T4").build()]
    r = schedule(snapshot(nodes, [a_job("j").gpus(2).datasets("imagenet").build()]))
    p = placed(r, "j")
    assert p.runner_up is not None and p.runner_up.cluster != p.cluster
    assert dict(p.chosen.breakdown)["total"] <= dict(p.runner_up.breakdown)["total"]
    assert "placement cost" in p.message
