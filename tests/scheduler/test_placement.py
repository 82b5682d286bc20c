"""Placement constraints and node policies, as narrative cases on tiny fleets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.inventory import (
    ClusterKind,
    ClusterRegistered,
    ClusterStatus,
    ClusterStatusChanged,
    GpuDevice,
    NodeObserved,
    Taint,
)
from events.catalog.jobs import InferenceSpec, JobKind, JobSubmitted, PriorityClass, Toleration
from events.catalog.types import Resources, TaintEffect
from events.wire.envelope import Envelope
from services.scheduler.core.policy import (
    Demand,
    FleetState,
    FragModel,
    Health,
    NodePolicy,
    Place,
    Placer,
    Preempt,
    Queue,
    ReasonCode,
    Shape,
    schedule,
    scoring,
    typical_shapes,
)
from services.scheduler.core.state import SchedulerState
from tests.scheduler.builders import a_job, a_node, config, running, snapshot

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


def one_node_cluster(gpus: int = 8, **node: object) -> list[Event]:
    """A cluster ``c`` of one A100 node ``n``, as a connector reports them."""
    return [
        ClusterRegistered(cluster="c", kind=ClusterKind.SIMULATED, site="c", region="eu", currency="EUR"),
        NodeObserved(
            cluster="c", node="n", generation=1, cpu_milli=64_000, memory_mib=512_000,
            gpus=tuple(GpuDevice(index=i, model="A100", memory_mib=81_920) for i in range(gpus)), **node,  # type: ignore[arg-type]
        ),
    ]  # fmt: skip


def folded(facts: list[Event]) -> SchedulerState:
    """The scheduler's state after reading ``facts``, one log millisecond apart."""
    state = SchedulerState()
    for i, data in enumerate(facts):
        state.fold(Envelope(id=f"e-{i}", time_ms=1_000 + i, data=data))
    return state


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
    assert queued(r, "j").constraint.reason is reason, case


@pytest.mark.parametrize(
    ("case", "node", "job", "numbers"),
    [
        # resource, GPU model, requested, available: one replica's, on the best node of the cluster
        ("too many gpus", a_node("n1").gpus(4), a_job("j").gpus(8), ("gpu", None, 8000, 4000)),
        ("too many of one model", a_node("n1").model("T4").gpus(4), a_job("j").gpus(8).models("T4"),
         ("gpu", "T4", 8000, 4000)),
        ("more memory than a node has", a_node("n1"), a_job("j").gpus(1).memory(10**9), ("memory", None, 10**9, None)),
        ("wrong model", a_node("n1").model("T4"), a_job("j").gpus(2).models("A100"), ("gpu", "A100", 2000, 0)),
        ("cpu short", a_node("n1").cpu(64000, 2000), a_job("j").gpus(1).cpu(8000), ("cpu", None, 8000, 2000)),
        ("gpus taken", a_node("n1").gpus(8, (1000,) * 3 + (0,) * 5), a_job("j").gpus(4), ("gpu", None, 4000, 3000)),
        ("share too big", a_node("n1").gpus(2, (300, 500)), a_job("j").share(600), ("gpu", None, 600, 500)),
        # Each replica fits on the node, not all four: no one resource's numbers say so ("room for 2 of 4")
        ("replicas", a_node("n1").gpus(16, (1000,) * 8 + (0,) * 8), a_job("j").gpus(4).replicas(4), (None, None, 0, 0)),
        ("gang of two, one gpu short", a_node("n1").gpus(8, (1000,) * 3 + (0,) * 5), a_job("j").gpus(4).replicas(2),
         ("gpu", None, 4000, 3000)),
    ],
)  # fmt: skip
def test_the_binding_constraint_carries_its_numbers(case, node, job, numbers):
    built = node.build()
    q = queued(schedule(snapshot([built], [job.build()])), "j")
    c = q.constraint
    resource, model, requested, available = numbers
    if available is None:  # what the node has
        available = built.memory_mib
    assert (c.resource, c.gpu_model, c.requested, c.available) == (resource, model, requested, available), case
    assert c.cluster == built.cluster, case


def test_the_smallest_change_names_the_field_of_the_request_and_its_values():
    q = queued(schedule(snapshot([a_node("n1").gpus(4).build()], [a_job("j").gpus(8).build()])), "j")
    assert q.change is not None
    assert (q.change.field, q.change.current, q.change.suggested) == ("resources.gpus", "8", "4")
    nodes = [a_node("a1").cluster("cluster-a").model("T4").build()]
    q = queued(schedule(snapshot(nodes, [a_job("m").gpus(1).models("A100").build()])), "m")
    assert q.change is not None
    assert (q.change.field, q.change.current, q.change.suggested) == ("resources.gpu_models", "A100", "any")
    assert "cluster-a" in q.change.message


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


def test_a_job_goes_only_to_nodes_whose_hard_taints_it_tolerates():
    nodes = [
        a_node("a-tainted").tainted("reserved", "research").build(),
        a_node("b-soft").tainted("spot", "yes", "PreferNoSchedule").gpus(2).build(),
    ]
    # The tainted node is the better fit for 8 GPUs, but the job may not go there: it waits.
    r = schedule(snapshot(nodes, [a_job("big").gpus(8).build()]))
    q = queued(r, "big")
    assert q.binding is ReasonCode.TAINT_NOT_TOLERATED
    assert "reserved=research:NoSchedule" in q.per_cluster[0].detail
    # A small job goes to the node with only a soft taint (PreferNoSchedule asks, it does not refuse).
    assert placed(schedule(snapshot(nodes, [a_job("small").gpus(1).build()])), "small").replicas[0].node_id == "b-soft"
    # Tolerated by key and value, by key alone, or not tolerated with another value or effect.
    for job, fits in (
        (a_job("kv").gpus(8).tolerates("reserved", "research"), True),
        (a_job("k").gpus(8).tolerates("reserved"), True),
        (a_job("k-effect").gpus(8).tolerates("reserved", None, "NoSchedule"), True),
        (a_job("other-value").gpus(8).tolerates("reserved", "prod"), False),
        (a_job("other-effect").gpus(8).tolerates("reserved", None, "NoExecute"), False),
    ):
        r = schedule(snapshot(nodes, [job.build()]))
        decided = {d.job_id for d in r.decisions if isinstance(d, Place)}
        assert (job.build().job_id in decided) is fits, job.build().job_id


def test_a_job_that_tolerates_nothing_never_lands_on_a_tainted_node_of_a_busy_fleet():
    nodes = [a_node(f"n{i}").gpus(1).build() for i in range(3)] + [a_node("t").tainted("gpu", "a100").gpus(8).build()]
    jobs = [a_job(f"j{i}").gpus(1).build() for i in range(6)]
    r = schedule(snapshot(nodes, jobs))
    places = [d for d in r.decisions if isinstance(d, Place)]
    assert len(places) == 3 and all(p.replicas[0].node_id != "t" for p in places)


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
    # The terms shown are the weighted points the total is made of: they add up to it, and the message
    # gives the same sum.
    for candidate in (p.chosen, p.runner_up):
        terms = {name: points for name, points in candidate.breakdown if name != "total"}
        assert sum(terms.values()) == dict(candidate.breakdown)["total"]
    chosen = dict(p.chosen.breakdown)
    assert chosen["locality"] > 0  # the dataset is nowhere: the term counts, weighted
    shown = p.message.split(f"federation score {chosen['total']} = ", 1)[1].split(" (weighted", 1)[0]
    assert dict(term.rsplit(" ", 1) for term in shown.split(" + ")) == {
        name: str(points) for name, points in chosen.items() if name != "total"
    }


def test_fgd_puts_a_cpu_only_job_where_the_gpus_are_already_taken():
    nodes = [a_node("a-idle").build(), a_node("b-gpus-taken").gpus(8, (0,) * 8).build()]
    r = schedule(snapshot(nodes, [a_job("cpu").cpu(8000).build()]))
    assert placed(r, "cpu").replicas[0].node_id == "b-gpus-taken"


def test_gpu_clustering_keeps_shares_with_shares_and_whole_gpus_apart():
    nodes = [a_node(f"n{i}").gpus(4).build() for i in range(3)]
    fs = FleetState(nodes)
    placer = Placer(fs, NodePolicy.CLUSTERING)
    share, whole = Demand(cpu_milli=1000, gpu_milli=300), Demand(cpu_milli=1000, gpus=1)
    first = placer.choose(share)
    assert first is not None
    placer.place(share, first)
    again = placer.choose(share)
    assert again is not None and again.node == first.node  # with the other shares
    other = placer.choose(whole)
    assert other is not None and other.node != first.node  # a whole GPU avoids the node of shares
    placer.place(whole, other)
    nxt = placer.choose(whole)
    assert nxt is not None and nxt.node == other.node


def test_authors_packing_shares_a_used_gpu_and_leaves_cpu_only_jobs_to_the_stable_rank():
    nodes = [a_node("a").build(), a_node("b").gpus(8, (1000,) * 7 + (600,)).build()]
    fs = FleetState(nodes)
    placer = Placer(fs, NodePolicy.PACKING)
    c = placer.choose(Demand(cpu_milli=1000, gpu_milli=500))
    assert c is not None and fs.node_ids[c.node] == "b" and c.slots == (7,)
    cpu = placer.choose(Demand(cpu_milli=1000))
    assert cpu is not None and cpu.node == 0  # every node scores 0: the rank decides


node_st = st.tuples(
    st.lists(st.sampled_from([0, 100, 190, 300, 530, 1000]), min_size=1, max_size=8),
    st.sampled_from([4000, 16000, 64000]),
    st.sampled_from(["A100", "T4"]),
)
demand_st = st.sampled_from([
    Demand(cpu_milli=2000), Demand(cpu_milli=4000, gpu_milli=470), Demand(cpu_milli=8000, gpu_milli=810),
    Demand(cpu_milli=8000, gpus=1), Demand(cpu_milli=16000, gpus=2), Demand(cpu_milli=4000, gpus=1, models=("T4",)),
])  # fmt: skip
TYPICAL = [
    Shape(2000, 0, 0, (), 10), Shape(4000, 470, 1, (), 20), Shape(8000, 810, 1, (), 30),
    Shape(8000, 1000, 1, (), 30), Shape(16000, 1000, 2, (), 5), Shape(4000, 1000, 1, ("T4",), 5),
]  # fmt: skip


@pytest.mark.property
@settings(max_examples=80, deadline=None)
@given(specs=st.lists(node_st, min_size=1, max_size=12), d=demand_st)
def test_fgd_takes_the_least_increase_exactly_for_shares_and_within_its_window_otherwise(specs, d):
    nodes = [
        a_node(f"n{i:02d}").model(m).gpus(len(free), tuple(free)).cpu(64000, cpu).build()
        for i, (free, cpu, m) in enumerate(specs)
    ]
    fs = FleetState(nodes)
    fm = FragModel(TYPICAL, fs.models)
    placer = Placer(fs, NodePolicy.FRAGMENTATION, fm, frag_window_milli=60, frag_share_window_milli=0)
    ok = np.flatnonzero(fs.feasible(d))
    c = placer.choose(d)
    if not ok.size:
        assert c is None
        return
    assert c is not None and c.node in ok
    cost, _ = scoring.fragmentation_model_aware(fs, ok, d, fm)
    mine = int(cost[list(ok).index(c.node)])
    window = 0 if d.is_share else 60 * fm.total_weight
    assert mine <= int(cost.min()) + window
    if not (d.gpus or d.gpu_milli):  # CPU-only: the least free GPU among the equally good nodes
        near = ok[cost <= int(cost.min()) + window]
        assert int(fs.gpu_free[c.node].sum()) == int(fs.gpu_free[near].sum(axis=1).min())


def test_fgd_scores_gpu_shares_exactly_even_inside_the_whole_gpu_window():
    """470m on a GPU with 480m free strands 10m, with 530m free 60m: a few expected milli-GPU apart (less
    than the 60m window of whole-GPU replicas), yet the share takes the tighter GPU over the better rank."""
    nodes = [a_node("a-loose").gpus(2, (0, 530)).build(), a_node("b-tight").gpus(2, (0, 480)).build()]
    job = a_job("s").share(470).cpu(4000).build()
    r = schedule(snapshot(nodes, [job]), config(typical_shapes=tuple(TYPICAL)))
    assert placed(r, "s").replicas[0].node_id == "b-tight"


def test_the_authors_fgd_gives_a_share_the_first_gpu_with_the_best_quantised_score():
    """Their plugin keeps the first GPU with the highest 0..100 score; exact increases may differ below it."""
    node = a_node("n").gpus(4, (1000, 530, 480, 1000)).build()
    fs = FleetState([node])
    fm = FragModel(TYPICAL, fs.models)
    d = Demand(cpu_milli=4000, gpu_milli=470)
    cost, slot = scoring.fragmentation_paper(fs, np.array([0]), d, fm)
    scores = []
    for j in range(4):
        after = fs.gpu_free.copy()
        after[0, j] -= 470
        inc = fm.frag(after, fs.cpu_free - 4000, fs.model_of) - fm.frag(fs.gpu_free, fs.cpu_free, fs.model_of)
        scores.append(int(-scoring.paper_score(inc, fm)[0]))
    assert int(cost[0]) == min(scores) and int(slot[0]) == scores.index(min(scores))


def test_taints_and_tolerations_reach_the_policy_from_the_events_as_a_connector_reports_them():
    reserved = Taint(key="reserved", value="research", effect=TaintEffect.NO_SCHEDULE)
    soft = Taint(key="spot", value="", effect=TaintEffect.PREFER_NO_SCHEDULE)
    state = folded(
        [
            *one_node_cluster(taints=(reserved, soft)),
            JobSubmitted(job_id="plain", name="plain", tenant="t", resources=Resources(gpus=1)),
            JobSubmitted(
                job_id="tolerant", name="tolerant", tenant="t", resources=Resources(gpus=1),
                tolerations=(Toleration(key="reserved", value="research"),),
            ),
        ]
    )  # fmt: skip
    r = schedule(state.snapshot(10_000), state.policy_config())
    assert placed(r, "tolerant").replicas[0].node_id.endswith("n")
    assert queued(r, "plain").binding is ReasonCode.TAINT_NOT_TOLERATED


def test_an_inference_service_starts_with_as_many_replicas_as_fit_down_to_its_min_replicas():
    nodes = [a_node("a1").gpus(2).build(), a_node("a2").gpus(1).build()]
    service = a_job("svc").kind(JobKind.INFERENCE).gpus(1).replicas(5, gang=False)
    # Three of five fit now: a service that may start with two starts with three, and says so.
    p = placed(schedule(snapshot(nodes, [service.min_replicas(2).build()])), "svc")
    assert len(p.replicas) == 3 and "running 3 of 5 replicas; 2 wait for room" in p.message
    # One that needs four waits; a gang, or a job of another kind, waits for all five.
    assert queued(schedule(snapshot(nodes, [service.min_replicas(4).build()])), "svc")
    for job in (
        a_job("gang").kind(JobKind.INFERENCE).gpus(1).replicas(5, gang=True).build(),
        a_job("batch").gpus(1).replicas(5, gang=False).build(),
    ):
        assert not [d for d in schedule(snapshot(nodes, [job])).decisions if isinstance(d, Place)]


def test_a_service_that_may_start_smaller_still_preempts_for_all_its_replicas_first():
    nodes = [a_node("a1").gpus(2, free=(0, 1000)).build()]
    busy = a_job("busy").gpus(1).priority(PriorityClass.BEST_EFFORT).build()
    service = a_job("svc").kind(JobKind.INFERENCE).priority(PriorityClass.PRODUCTION_INFERENCE)
    service = service.gpus(1).replicas(2, gang=False)
    r = schedule(snapshot(nodes, [service.min_replicas(1).build()], [running(busy, "cluster-a", ("a1", (0,), 1000))]))
    assert [d.victim for d in r.decisions if isinstance(d, Preempt)] == ["busy"]
    assert not [d for d in r.decisions if isinstance(d, Place)]


def test_a_service_started_smaller_holds_only_the_replicas_it_was_given():
    state = folded(
        [
            *one_node_cluster(gpus=4),
            JobSubmitted(
                job_id="svc", name="svc", tenant="t", kind=JobKind.INFERENCE, replicas=8, resources=Resources(gpus=1),
                inference=InferenceSpec(min_replicas=2),
            ),
        ]
    )  # fmt: skip
    p = placed(schedule(state.snapshot(10_000), state.policy_config()), "svc")
    assert len(p.replicas) == 4
    replicas = tuple(
        ReplicaPlacement(replica=i, node="n", gpu_indices=x.gpu_indices, gpu_milli_each=1000)
        for i, x in enumerate(p.replicas)
    )
    state.fold(
        Envelope(
            id="placed", time_ms=20_000,
            data=JobPlaced(
                job_id="svc", cycle_id="c1", cluster="c", replicas=replicas,
                chosen=CandidateScore(cluster="c", total=0), explanation="x",
            ),
        )
    )  # fmt: skip
    (run,) = state.snapshot(30_000).running
    assert (run.job.replicas, run.job.total_gpu_milli(), len(run.placements)) == (4, 4000, 4)


def test_a_wait_binds_on_the_cluster_that_comes_closest_to_holding_the_job_when_none_has_room_now():
    full = (0,) * 8
    nodes = [a_node(f"a{i}").cluster("cluster-a").gpus(8, free=full).build() for i in range(3)]
    nodes += [a_node(f"b{i}").cluster("cluster-b").gpus(8, free=full).build() for i in range(5)]
    q = queued(schedule(snapshot(nodes, [a_job("g").gpus(8).replicas(6).build()])), "g")
    assert q.binding is ReasonCode.GANG_TOO_LARGE
    assert "cluster-b: holds at most 5 of 6 replicas even when empty" in q.message


def test_a_replica_that_asks_more_cpu_or_memory_than_any_node_has_free_is_told_the_most_it_could_have():
    nodes = [a_node("n1").cpu(64_000, free=48_000).build(), a_node("n2").cpu(96_000).model("T4").build()]
    q = queued(schedule(snapshot(nodes, [a_job("cpu").cpu(100_000).build()])), "cpu")
    assert q.change is not None
    assert (q.change.field, q.change.current, q.change.suggested) == ("resources.cpu_milli", "100000", "96000")
    # Only nodes where the rest of the replica fits count: on T4 nodes an A100 job's CPU is no help.
    q = queued(schedule(snapshot(nodes, [a_job("a100").cpu(100_000).gpus(1).models("A100").build()])), "a100")
    assert q.change is not None and q.change.suggested == "48000"
    big = a_node("n3").memory(256_000, free=100_000).build()
    q = queued(schedule(snapshot([big], [a_job("mem").memory(300_000).build()])), "mem")
    assert q.change is not None and (q.change.field, q.change.suggested) == ("resources.memory_mib", "100000")


def test_a_cluster_its_connector_reports_unreachable_or_draining_is_said_to_be_so_not_cordoned():
    for status, reason in (
        (ClusterStatus.UNREACHABLE, ReasonCode.CLUSTER_UNREACHABLE),
        (ClusterStatus.DRAINING, ReasonCode.CLUSTER_DRAINING),
    ):
        state = folded(
            [
                *one_node_cluster(),
                ClusterStatusChanged(cluster="c", status=status, reason=reason),
                JobSubmitted(job_id="j", name="j", tenant="t", resources=Resources(gpus=1)),
            ]
        )
        q = queued(schedule(state.snapshot(10_000), state.policy_config()), "j")
        assert q.binding is reason and "cordoned" not in q.message


def test_scoring_against_every_shape_keeps_the_hole_a_rare_share_fits():
    # 4% of the work are 160 milli-GPU shares: the authors' 95% coverage leaves them out, and then a hole
    # of 190 (beside an 810 share) and one of 300 look alike to a 110 share. Scored against every shape,
    # the 110 goes to the 300, and both 160 shares that follow find room; at 95% the rank sends the 110
    # into the 190, the 300 takes one 160 and the other is stranded.
    samples = [Shape(8000, 1000, 1, (), 60), Shape(8000, 810, 1, (), 36), Shape(2000, 160, 1, (), 4)]
    small, rare = Demand(cpu_milli=1000, gpu_milli=110), Demand(cpu_milli=1000, gpu_milli=160)

    def placed_of(coverage: int) -> int:
        nodes = [a_node("a-beside-810").gpus(1, (190,)).build(), a_node("b-beside-700").gpus(1, (300,)).build()]
        fs = FleetState(nodes)
        placer = Placer(fs, NodePolicy.FRAGMENTATION, FragModel(typical_shapes(samples, coverage), fs.models))
        n = 0
        for d in (small, rare, rare):
            c = placer.choose(d)
            if c is not None:
                placer.place(d, c)
                n += 1
        return n

    assert len(typical_shapes(samples, 95)) == 2
    assert placed_of(95) == 2
    assert placed_of(100) == 3


def test_a_share_leaves_the_hole_a_rare_share_size_fills_at_the_authors_coverage():
    # As above, at the authors' 95%: the rare 160 shares (two CPU asks, one naming a model) are left out
    # of the typical shapes, but our policy keeps one filler for their size, so the 110 share takes the
    # 300 hole and both 160 shares find room; without the filler the rank sends the 110 into the 190.
    samples = [
        Shape(8000, 1000, 1, (), 60),
        Shape(8000, 810, 1, (), 36),
        Shape(2000, 160, 1, (), 2),
        Shape(4000, 160, 1, ("A100",), 2),
    ]
    small, rare = Demand(cpu_milli=1000, gpu_milli=110), Demand(cpu_milli=1000, gpu_milli=160)

    def placed_of(fillers: bool) -> int:
        nodes = [a_node("a-beside-810").gpus(1, (190,)).build(), a_node("b-beside-700").gpus(1, (300,)).build()]
        fs = FleetState(nodes)
        fm = FragModel(typical_shapes(samples, 95, fillers), fs.models)
        placer = Placer(fs, NodePolicy.FRAGMENTATION, fm)
        n = 0
        for d in (small, rare, rare):
            c = placer.choose(d)
            if c is not None:
                placer.place(d, c)
                n += 1
        return n

    assert typical_shapes(samples, 95, fillers=True)[2:] == (Shape(2000, 160, 1, (), 4),)
    assert placed_of(fillers=False) == 2
    assert placed_of(fillers=True) == 3


def test_the_cycle_scores_our_policy_against_the_rare_share_sizes_too():
    # The typical shapes come from the jobs: 60 whole GPUs and 36 shares of 810 that fit nowhere cover
    # 95%, the 110 share and the two 160 shares are the tail. Our policy keeps fillers for 110 and 160,
    # so the 110 goes to the 300 hole and leaves the 190 beside an 810 share to a 160: all three run.
    nodes = [a_node("a-beside-810").gpus(1, (190,)).build(), a_node("b-beside-700").gpus(1, (300,)).build()]
    jobs = [
        a_job("small").share(110).cpu(1000).submitted(1).build(),
        a_job("rare-1").share(160).cpu(1000).submitted(2).build(),
        a_job("rare-2").share(160).cpu(1000).submitted(3).build(),
        a_job("whole").gpus(1).cpu(8000).replicas(60, gang=False).submitted(4).build(),
        a_job("large-share").share(810).cpu(8000).replicas(36, gang=False).submitted(5).build(),
    ]
    ours = schedule(snapshot(nodes, jobs), config())
    assert placed(ours, "small").replicas[0].node_id == "b-beside-700"
    assert {placed(ours, j).replicas[0].node_id for j in ("rare-1", "rare-2")} == {"a-beside-810", "b-beside-700"}
    # The authors' FGD keeps their list (no fillers): the 110 and one 160 share the 300 hole, the other
    # 160 waits.
    paper = schedule(snapshot(nodes, jobs), config(node_policy=NodePolicy.FGD_PAPER))
    assert len([d for d in paper.decisions if isinstance(d, Place)]) == 2
