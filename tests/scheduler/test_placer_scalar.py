"""The placer's shortcuts for our policy give exactly the keys of its array refresh: its node-by-node
refresh, and the scores the cycle memo keeps across cycles.

A placement dirties one node, and the placer then rescores it in Python ints (``_refresh_scalar``)
instead of some forty array operations: any difference would change decisions, so both are compared on
random fleets (GPU models, failed and degraded GPUs, nodes without GPUs, cordoned nodes, typical shapes
restricted to one model), after each of a run of placements.
"""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.core.policy import Demand, FleetState, FragModel, Health, NodePolicy, Placer, Shape
from services.scheduler.core.policy import placer as placer_module
from services.scheduler.core.policy.fleet import FleetMemo, fleet_for
from tests.scheduler.builders import a_node

pytestmark = pytest.mark.timeout(60)
SCALAR_DEFAULT = placer_module.SCALAR_MAX

FREE = [0, 100, 190, 300, 470, 530, 810, 1000]
DEMANDS = [
    Demand(cpu_milli=2000, memory_mib=1024),
    Demand(cpu_milli=4000, gpu_milli=470),
    Demand(cpu_milli=8000, gpu_milli=810, models=("A100",)),
    Demand(cpu_milli=500, gpu_milli=100),
    Demand(cpu_milli=8000, gpus=1),
    Demand(cpu_milli=16000, gpus=2, min_gpu_memory_mib=40000),
    Demand(cpu_milli=4000, gpus=1, models=("T4",)),
    Demand(cpu_milli=60000, memory_mib=300_000),
    Demand(cpu_milli=2000, npus=2),
    Demand(cpu_milli=4000, npus=1, npu_models=("Ascend910B",), min_npu_memory_mib=32768),
    Demand(cpu_milli=8000, gpus=1, npus=1),
    Demand(cpu_milli=4000, gpus=1, models=("H200",)),
    Demand(cpu_milli=2000, gpu_milli=470, min_gpu_memory_mib=100_000),
]


@st.composite
def nodes_st(draw: st.DrawFn, i: int) -> object:
    model = draw(st.sampled_from(["A100", "T4", ""]))
    b = a_node(f"n{i:02d}")
    if model:
        free = draw(st.lists(st.sampled_from(FREE), min_size=1, max_size=8))
        b = b.model(model, 81920 if model == "A100" else 15360).gpus(len(free), tuple(free))
        for j in range(len(free)):
            health = draw(st.sampled_from([Health.OK, Health.OK, Health.OK, Health.DEGRADED, Health.FAILED]))
            if health is not Health.OK:
                b = b.gpu_health(j, health)
    else:
        b = b.model("", 0).gpus(0)
    b = b.cpu(64000, draw(st.sampled_from([0, 4000, 16000, 64000])))
    b = b.memory(256_000, draw(st.sampled_from([0, 2048, 256_000])))
    if draw(st.integers(0, 9)) == 0:
        b = b.cordoned()
    npus = draw(st.integers(0, 4))
    if npus:
        taken = tuple(j for j in range(npus) if draw(st.booleans()))
        b = b.npus(npus, draw(st.sampled_from(["Ascend910B", "Ascend310P"])), taken=taken)
        if draw(st.booleans()):
            b = b.npu_health(0, draw(st.sampled_from([Health.DEGRADED, Health.FAILED])))
    node = b.build()
    if node.gpus and draw(st.integers(0, 3)) == 0:  # a mixed node: its last cards of another model
        node = replace(
            node, gpus=tuple(replace(g, model="H200", memory_mib=143_360) if g.index >= 1 else g for g in node.gpus)
        )
    return node


shapes_st = st.lists(
    st.builds(
        Shape,
        st.sampled_from([0, 2000, 8000, 16000]),
        st.sampled_from([100, 470, 810, 1000]),
        st.integers(0, 2),
        st.sampled_from([(), ("A100",), ("T4",)]),
        st.integers(1, 40),
    ),
    min_size=1,
    max_size=6,
)


def _entry(placer: Placer, d: Demand, scalar_max: int) -> tuple[list[int], list[int], list[int] | None]:
    with mock.patch.object(placer_module, "SCALAR_MAX", scalar_max):
        e = placer._entry(d)
    key = e.key.tolist()
    slot = [s if k < int(placer_module.INF) else -1 for s, k in zip(e.slot.tolist(), key, strict=True)]
    return (
        key,
        slot,
        None
        if e.tie is None
        else [t if k < int(placer_module.INF) else 0 for t, k in zip(e.tie.tolist(), key, strict=True)],
    )


@pytest.mark.property
@settings(max_examples=150, deadline=None)
@given(data=st.data(), shapes=shapes_st, picks=st.lists(st.integers(0, len(DEMANDS) - 1), min_size=1, max_size=12))
def test_the_node_by_node_refresh_equals_the_array_refresh_through_a_run_of_placements(data, shapes, picks):
    count = data.draw(st.integers(1, 10))
    fleet = FleetState([data.draw(nodes_st(i)) for i in range(count)])
    fm = FragModel(shapes, fleet.models)
    live = Placer(fleet, NodePolicy.FRAGMENTATION, fm, frag_window_milli=60)
    with mock.patch.object(placer_module, "SCALAR_MAX", 10**9):  # every refresh node by node
        for d in DEMANDS:
            live._entry(d)
    for pick in picks:
        for d in DEMANDS:
            fresh = Placer(fleet, NodePolicy.FRAGMENTATION, fm, frag_window_milli=60)
            assert _entry(live, d, 10**9) == _entry(fresh, d, 0), d
        d = DEMANDS[pick]
        choice = live.choose(d)
        if choice is not None:
            live.place(d, choice)  # dirties that node: the next round rescores it alone


def test_the_node_by_node_path_is_the_one_taken_after_a_placement():
    fleet = FleetState([a_node(f"n{i}").gpus(8).build() for i in range(8)])
    fm = FragModel([Shape(4000, 470, 1, (), 3)], fleet.models)
    placer = Placer(fleet, NodePolicy.FRAGMENTATION, fm)
    d = Demand(cpu_milli=4000, gpu_milli=470)
    placer.place(d, placer.choose(d))
    with (
        mock.patch.object(Placer, "_refresh_scalar", side_effect=AssertionError("scalar")) as scalar,
        pytest.raises(AssertionError, match="scalar"),
    ):
        placer.choose(d)
    assert scalar.call_count == 1
    assert np.array_equal(placer._entry(d).seen, fleet.version)


@pytest.mark.property
@settings(max_examples=100, deadline=None)
@given(data=st.data(), cycles=st.integers(1, 6))
def test_scores_kept_across_cycles_give_the_keys_of_a_placer_that_scores_every_node(data, cycles):
    """The cycle memo's score cache (``ScoreCache``) against a fresh placer, cycle after cycle: rows
    patched or not, weights and typical shapes changing, nodes placed on before a shape is first asked."""
    count = data.draw(st.integers(1, 8))
    nodes = [data.draw(nodes_st(i)) for i in range(count)]
    memo, scores, generation = FleetMemo(), {}, -1
    for _ in range(cycles):
        for i in data.draw(st.lists(st.integers(0, count - 1), max_size=3)):
            if data.draw(st.booleans()):  # another state of the same layout: the row is patched
                node = nodes[i]
                free = tuple(data.draw(st.sampled_from(FREE)) for _ in node.gpus)
                gpus = tuple(replace(g, free_milli=f) for g, f in zip(node.gpus, free, strict=True))
                nodes[i] = replace(node, gpus=gpus, cpu_free_milli=data.draw(st.sampled_from([0, 4000, 64000])))
            else:  # perhaps another layout: a rebuild
                nodes[i] = data.draw(nodes_st(i))
        fleet = fleet_for(nodes, memo)
        if memo.generation != generation:  # as the cycle does: a new layout starts the cache over
            scores, generation = {}, memo.generation
        fm = FragModel(data.draw(shapes_st), fleet.models)
        kept = Placer(fleet, NodePolicy.FRAGMENTATION, fm, frag_window_milli=60, scores=scores)
        for pick in data.draw(st.lists(st.integers(0, len(DEMANDS) - 1), min_size=1, max_size=6)):
            d = DEMANDS[pick]
            fresh = Placer(fleet, NodePolicy.FRAGMENTATION, fm, frag_window_milli=60)
            assert _entry(kept, d, SCALAR_DEFAULT) == _entry(fresh, d, 0), d
            choice = kept.choose(d)
            if choice is not None:
                kept.place(d, choice)


def test_the_kept_scores_stay_within_their_budget_and_drop_the_least_recently_used() -> None:
    fleet = fleet_for([a_node(f"n{i}").gpus(8).build() for i in range(50)], FleetMemo())
    fm = FragModel([Shape(4000, 470, 1, (), 3), Shape(8000, 1000, 1, (), 2)], fleet.models)
    kept: dict = {}
    share, whole, cpu = Demand(cpu_milli=4000, gpu_milli=470), Demand(cpu_milli=8000, gpus=1), Demand(cpu_milli=500)
    for d in (share, whole, cpu, share):
        Placer(fleet, NodePolicy.FRAGMENTATION, fm, scores=kept).choose(d)
    assert [d for d, _ in kept] == [whole, cpu, share]  # the share was asked last: kept, moved to the end
    budget = kept[(share, fm.signature)].nbytes + kept[(cpu, fm.signature)].nbytes
    with mock.patch.object(placer_module, "MAX_BYTES", budget):
        Placer(fleet, NodePolicy.FRAGMENTATION, fm, scores=kept).choose(whole)
    assert [d for d, _ in kept] == [share, whole]  # the CPU-only one went: least recently used
    assert sum(c.nbytes for c in kept.values()) <= budget


def test_a_row_a_cycle_changed_is_never_kept_for_a_later_cycle_that_changes_it_otherwise() -> None:
    """A placement adds to the row's version, and the next cycle's copy starts from the same stamp again: a
    row cached at "stamp + 1" after one cycle's placement would read as valid after another's."""
    nodes = [a_node("n0").gpus(8).build()]
    memo, kept = FleetMemo(), {}
    fm_shapes = [Shape(4000, 470, 1, (), 3), Shape(8000, 1000, 1, (), 2)]
    asked, first, second = Demand(cpu_milli=4000, gpu_milli=470), Demand(cpu_milli=8000, gpus=1), Demand(gpu_milli=530)
    for placed_first in (first, second):  # two cycles on the same rows, each placing something else first
        fleet = fleet_for(nodes, memo)
        fm = FragModel(fm_shapes, fleet.models)
        placer = Placer(fleet, NodePolicy.FRAGMENTATION, fm, scores=kept)
        placer.place(placed_first, placer.choose(placed_first))
        fresh = Placer(fleet, NodePolicy.FRAGMENTATION, fm)
        assert _entry(placer, asked, SCALAR_DEFAULT) == _entry(fresh, asked, 0)
