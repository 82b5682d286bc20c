"""``fleet_for`` with a memo builds, cycle after cycle, the same fleet as ``FleetState(nodes)`` from scratch.

The memo patches the rows of changed nodes, skips the sort while nodes come in fleet order, and hands
out copies that own only what placing changes; Hypothesis drives node changes, reorderings, arrivals
and departures through it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.core.policy.fleet import STAMP, Demand, FleetMemo, FleetState, fleet_for
from services.scheduler.core.policy.model import Health, Node
from tests.scheduler.builders import a_node


def _node(name: str, free: int, model: str = "A100") -> Node:
    """Four GPUs; every third node also has NPUs (one taken or degraded by ``free``), and every third
    other one has cards of another model (a mixed node)."""
    built = a_node(name).model(model).gpus(4, free=(free, 1000, 1000, 1000))
    k = int(name[1:])
    if k % 3 == 1:
        built = built.npus(2, taken=(0,) if free < 500 else ())
        if free % 2:
            built = built.npu_health(1, Health.DEGRADED)
    node = built.build()
    if k % 3 == 2:
        other = tuple(replace(g, model="H200", memory_mib=143_360) if g.index >= 2 else g for g in node.gpus)
        node = replace(node, gpus=other)
    return node


def _same(a: FleetState, b: FleetState) -> None:
    assert a.nodes == b.nodes and a.node_ids == b.node_ids and a.index == b.index
    for name, value in vars(b).items():
        if isinstance(value, np.ndarray) and name != "version":  # a memo's rows carry stamps (below)
            assert np.array_equal(getattr(a, name), value), name


step = st.one_of(
    st.tuples(st.just("change"), st.integers(0, 9), st.integers(0, 1000)),
    st.tuples(st.just("shuffle"), st.integers(0, 9), st.just(0)),
    st.tuples(st.just("add"), st.integers(10, 14), st.integers(0, 1000)),
    st.tuples(st.just("remove"), st.integers(0, 14), st.just(0)),
    st.tuples(st.just("same"), st.just(0), st.just(0)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=30))
def test_the_memo_builds_the_fleet_a_rebuild_builds(steps: list[tuple[str, int, int]]) -> None:
    nodes = [_node(f"n{i}", 1000) for i in range(10)]
    memo = FleetMemo()
    seen: dict[int, Node] = {}  # stamp -> the node it was given to: one stamp names one state of one row
    for what, at, value in steps:
        if what == "change" and at < len(nodes):
            nodes[at] = _node(nodes[at].node_id, value, nodes[at].gpu_model)
        elif what == "shuffle" and nodes:
            nodes = nodes[at % len(nodes) :] + nodes[: at % len(nodes)]
        elif what == "add" and all(n.node_id != f"n{at}" for n in nodes):
            nodes.append(_node(f"n{at}", value, "H100"))
        elif what == "remove" and at < len(nodes):
            del nodes[at]
        fleet = fleet_for(nodes, memo)
        _same(fleet, FleetState(nodes))
        for i, stamp in enumerate(fleet.version.tolist()):  # scores cached across cycles rely on this
            assert stamp % STAMP == 0
            assert seen.setdefault(stamp, fleet.nodes[i]) is fleet.nodes[i], "a stamp given to two states"
        # What a cycle does to its copy stays in it.
        if fleet.size:
            free = int(fleet.gpu_free.sum())
            d = Demand(cpu_milli=1, memory_mib=1, gpus=0, gpu_milli=100)
            i = int(np.flatnonzero(fleet.feasible(d))[0]) if fleet.feasible(d).any() else -1
            if i >= 0:
                slot = int(np.flatnonzero(fleet.gpu_free[i] >= 100)[0])
                fleet.take(i, d, [slot])
                assert int(fleet.gpu_free.sum()) == free - 100
                assert fleet.version[i] % STAMP != 0  # a row a cycle changed carries no stamp
                assert memo.base is not None and int(memo.base.gpu_free.sum()) == free


def test_a_copy_cannot_change_what_it_shares_with_the_memo() -> None:
    memo = FleetMemo()
    fleet = fleet_for([_node("n1", 1000), _node("n2", 500)], memo)
    with pytest.raises(ValueError, match="read-only"):
        fleet.cpu_cap[0] = 1
    fleet.cpu_free[0] = 1  # what placing changes is its own
    assert memo.base is not None and memo.base.cpu_free[0] != 1


def test_cards_given_out_of_index_order_build_what_cards_in_order_build() -> None:
    nodes = [_node(f"n{i}", 300) for i in range(4)]
    shuffled = [replace(n, gpus=tuple(reversed(n.gpus))) if i % 2 else n for i, n in enumerate(nodes)]
    a, b = FleetState(nodes), FleetState(shuffled)
    for name, value in vars(a).items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(getattr(b, name), value), name
    assert a.mixed == b.mixed == (2,)
