"""Topology constraints: a job's replicas inside one NVLink domain or RDMA fabric, hard when it requires
it, preferred otherwise; what a wait for a domain says; preemption and reservations inside one domain."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.jobs import PriorityClass
from events.catalog.pending_reasons import PendingReason, pending_reason_of
from services.scheduler.core.policy import Place, Preempt, Queue, ReasonCode, Reserve, schedule
from tests.scheduler.builders import a_job, a_node, running, snapshot

pytestmark = pytest.mark.timeout(30)


def placed_on(result, job_id: str) -> set[str]:
    for d in result.decisions:
        if isinstance(d, Place) and d.job_id == job_id:
            return {p.node_id for p in d.replicas}
    raise AssertionError(f"{job_id} not placed: {[x.message for x in result.decisions]}")


def queued(result, job_id: str) -> Queue:
    for d in result.decisions:
        if isinstance(d, Queue) and d.job_id == job_id:
            return d
    raise AssertionError(f"{job_id} not queued: {[x.message for x in result.decisions]}")


def full(node_id: str):
    return a_node(node_id).gpus(8, (0,) * 8)


def test_a_job_requiring_nvlink_lands_inside_one_nvlink_domain_where_a_preference_spreads():
    # The stable rank fills d1 first; d1 has two nodes, d2 three: only d2 holds all three replicas.
    nodes = [a_node(n).domain("d1").build() for n in ("n1", "n2")]
    nodes += [a_node(n).domain("d2").build() for n in ("n3", "n4", "n5")] + [a_node("n6").build()]
    hard = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(3).nvlink(required=True).build()]))
    assert placed_on(hard, "t") == {"n3", "n4", "n5"}
    soft = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(3).nvlink().build()]))
    assert len(placed_on(soft, "t") & {"n1", "n2"}) == 2  # preferred: starts in d1, spills over


def test_a_job_requiring_rdma_stays_inside_one_fabric_whatever_its_nvlink_domains():
    # One NVLink domain over every node, two fabrics: the fabric decides, not the NVLink domain.
    nodes = [a_node(n).domain("nvl").fabric("ib-a").build() for n in ("n1", "n2")]
    nodes += [a_node(n).domain("nvl").fabric("ib-b").build() for n in ("n3", "n4", "n5")]
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(3).rdma(required=True).build()]))
    assert placed_on(r, "t") == {"n3", "n4", "n5"}
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(3).nvlink(required=True).build()]))
    assert placed_on(r, "t") == {"n1", "n2", "n3"}  # all in the one NVLink domain, in rank order


def test_a_preference_keeps_replicas_together_in_the_domain_of_the_interconnect_it_asks_for():
    nodes = [
        a_node("n1").domain("nv-a").fabric("ib-a").build(),
        a_node("n2").domain("nv-b").fabric("ib-a").build(),
        a_node("n3").domain("nv-a").fabric("ib-b").build(),
        a_node("n4").domain("nv-b").fabric("ib-b").build(),
    ]
    assert placed_on(schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(2).nvlink().build()])), "t") == {"n1", "n3"}
    assert placed_on(schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(2).rdma().build()])), "t") == {"n1", "n2"}


def test_nodes_without_a_domain_never_count_as_sharing_one():
    # A preference: the first replica on a node without a fabric pulls nothing towards the other such
    # node (n3); the rank order decides (before, the empty fabric was one shared by n1 and n3).
    nodes = [a_node("n1").build(), a_node("n2").fabric("ib-a").build(), a_node("n3").build()]
    assert placed_on(schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(2).rdma().build()])), "t") == {"n1", "n2"}
    # A requirement: two nodes without a fabric are no fabric of two; the only fabric holds one replica.
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(2).rdma(required=True).build()]))
    assert not [d for d in r.decisions if isinstance(d, Place)]
    q = queued(r, "t")
    assert q.binding is ReasonCode.INTERCONNECT_DOMAIN_TOO_SMALL
    assert "needs 2 replicas in one RDMA fabric; the largest, ib-a, holds at most 1 even when empty" in q.message


def test_a_job_no_domain_has_room_for_now_waits_naming_the_largest_domain_with_room():
    nodes = [full("n1").domain("d1").build(), full("n2").domain("d1").build()]
    nodes += [a_node(n).domain("d1").build() for n in ("n3", "n4")]
    nodes += [a_node(n).domain("d2").build() for n in ("n5", "n6", "n7")]
    busy = [running(a_job(f"r{i}").gpus(8).build(), "cluster-a", (f"n{i}", tuple(range(8)), 1000)) for i in (1, 2)]
    job = a_job("t").gpus(8).replicas(4).nvlink(required=True).build()
    r = schedule(snapshot(nodes, [job], busy))
    assert not [d for d in r.decisions if isinstance(d, Place | Preempt)]
    q = queued(r, "t")
    assert q.binding is ReasonCode.INTERCONNECT_UNAVAILABLE
    assert pending_reason_of(q.binding) is PendingReason.TOPOLOGY
    assert "needs 4 replicas in one NVLink domain; the largest with room is d2 in cluster-a with room for 3" in (
        q.message
    )
    # What would start it now: fewer replicas, or the interconnect as a preference over the two domains.
    assert q.change is not None and (q.change.field, q.change.suggested) == ("replicas", "3")
    assert "would fit now in cluster-a across several NVLink domains (as a preference)" in q.smallest_change


def test_a_job_no_domain_of_the_fleet_could_ever_hold_is_misconfigured():
    # cluster-a holds 5 replicas but its largest domain 3; cluster-b's one domain holds 2.
    nodes = [a_node(n).domain("d1").build() for n in ("n1", "n2", "n3")]
    nodes += [a_node(n).domain("d3").build() for n in ("n4", "n5")]
    nodes += [a_node(n).domain("d2").cluster("cluster-b").build() for n in ("m1", "m2")]
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(4).nvlink(required=True).build()]))
    q = queued(r, "t")
    assert q.binding is ReasonCode.INTERCONNECT_DOMAIN_TOO_SMALL
    assert pending_reason_of(q.binding) is PendingReason.MISCONFIGURED
    assert "cluster-a: needs 4 replicas in one NVLink domain; the largest, d1, holds at most 3 even when empty" in (
        q.message
    )
    assert {w.reason for w in q.per_cluster} == {ReasonCode.INTERCONNECT_DOMAIN_TOO_SMALL, ReasonCode.GANG_TOO_LARGE}
    # Without the requirement the same job fits: cluster-a holds it across domains.
    assert len(placed_on(schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(4).nvlink().build()])), "t")) == 4


def test_preemption_makes_room_inside_one_domain():
    # d1 = n1, n2 (both busy); d2 = n3 (busy), n4 (free). Stopping v1 frees room for two replicas in the
    # cluster, but one in each domain: only stopping v3 frees two in one domain.
    nodes = [full("n1").domain("d1").build(), full("n2").domain("d1").build()]
    nodes += [full("n3").domain("d2").build(), a_node("n4").domain("d2").build()]
    victims = [
        running(a_job(v).gpus(8).priority(PriorityClass.BEST_EFFORT).build(), "cluster-a", (n, tuple(range(8)), 1000))
        for v, n in (("v1", "n1"), ("v2", "n2"), ("v3", "n3"))
    ]
    crit = a_job("crit").gpus(8).replicas(2).priority(PriorityClass.CRITICAL_TRAINING)
    r = schedule(snapshot(nodes, [crit.nvlink(required=True).build()], victims))
    assert [d.victim for d in r.decisions if isinstance(d, Preempt)] == ["v3"]
    r = schedule(snapshot(nodes, [crit.nvlink().build()], victims))
    assert [d.victim for d in r.decisions if isinstance(d, Preempt)] == ["v1"]  # a preference: any room


def test_a_reservation_for_a_job_requiring_rdma_holds_nodes_of_one_fabric():
    # n1 frees first but its fabric's other node late; both nodes of ib-b free at the same later time.
    ends = {"n1": 3600, "n2": 3 * 3600, "n3": 2 * 3600, "n4": 2 * 3600}
    nodes = [full("n1").fabric("ib-a").build(), full("n2").fabric("ib-a").build()]
    nodes += [full("n3").fabric("ib-b").build(), full("n4").fabric("ib-b").build()]
    busy = [
        running(a_job(f"r-{n}").gpus(8).runtime(s).build(), "cluster-a", (n, tuple(range(8)), 1000))
        for n, s in ends.items()
    ]
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(2).rdma(required=True).build()], busy, now_ms=0))
    held = [d for d in r.decisions if isinstance(d, Reserve)]
    assert held and held[0].nodes == ("n3", "n4")
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(2).rdma().build()], busy, now_ms=0))
    held = [d for d in r.decisions if isinstance(d, Reserve)]
    assert held and held[0].nodes == ("n1", "n3")  # a preference: the earliest room, in rank order


def test_a_required_domain_chooses_the_cluster_where_the_job_fits_whole():
    # cluster-a has more free GPUs, over two domains; cluster-b fewer, in one.
    nodes = [a_node(n).domain(f"a{i % 2}").build() for i, n in enumerate(("a1", "a2", "a3", "a4"))]
    nodes += [a_node(n).cluster("cluster-b").domain("b").build() for n in ("b1", "b2", "b3")]
    r = schedule(snapshot(nodes, [a_job("t").gpus(8).replicas(3).nvlink(required=True).build()]))
    assert placed_on(r, "t") == {"b1", "b2", "b3"}


def test_a_single_replica_requiring_a_fabric_goes_only_to_a_node_on_one():
    nodes = [a_node("n1").build(), a_node("n2").fabric("ib-a").build()]
    assert placed_on(schedule(snapshot(nodes, [a_job("t").gpus(8).rdma(required=True).build()])), "t") == {"n2"}
    q = queued(schedule(snapshot(nodes[:1], [a_job("t").gpus(8).rdma(required=True).build()])), "t")
    assert "needs 1 replica in one RDMA fabric; no node it fits on is in one" in q.message


@settings(max_examples=80, deadline=None)
@given(
    layout=st.lists(
        st.tuples(st.sampled_from(["", "d0", "d1", "d2"]), st.sampled_from([0, 4, 8])), min_size=1, max_size=9
    ),
    asks=st.lists(st.tuples(st.sampled_from([1, 2, 4, 8]), st.integers(1, 4), st.booleans()), min_size=1, max_size=6),
)
def test_every_replica_of_a_job_requiring_nvlink_shares_one_domain(layout, asks) -> None:  # type: ignore[no-untyped-def]
    nodes = [
        a_node(f"n{i}").domain(dom).gpus(8, (0,) * busy + (1000,) * (8 - busy)).build()
        for i, (dom, busy) in enumerate(layout)
    ]
    domain = {n.node_id: n.nvlink_domain for n in nodes}
    jobs = [
        a_job(f"j{k}").gpus(g).replicas(r).nvlink(required=hard).submitted(k).build()
        for k, (g, r, hard) in enumerate(asks)
    ]
    for d in schedule(snapshot(nodes, jobs)).decisions:
        if isinstance(d, Place) and next(j for j in jobs if j.job_id == d.job_id).interconnect_required:
            shared = {domain[p.node_id] for p in d.replicas}
            assert len(shared) == 1 and "" not in shared, d.message
