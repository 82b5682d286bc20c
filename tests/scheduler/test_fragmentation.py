"""The fragmentation measure against a brute-force reading of the paper's definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scheduler.core.policy import FleetState, FragModel, Shape, typical_shapes
from tests.scheduler.builders import a_node

pytestmark = pytest.mark.timeout(60)


def brute_force(free: list[int], cpu: int, model: str, shapes: list[Shape]) -> float:
    """Expected fragmented milli-GPU of one node, straight from the paper's case analysis."""
    total = sum(s.weight for s in shapes)
    out = 0.0
    for s in shapes:
        p = s.weight / total
        left = sum(free)
        if s.gpus == 0:
            out += p * left
            continue
        if s.models and model not in s.models:
            out += p * left
            continue
        enough = sum(1 for f in free if f >= s.gpu_milli) >= s.gpus
        if enough and cpu >= s.cpu_milli:
            out += p * sum(f for f in free if f < s.gpu_milli)
        else:
            out += p * left
    return out


shape_st = st.builds(
    Shape,
    cpu_milli=st.sampled_from([0, 4000, 16000, 64000]),
    gpu_milli=st.sampled_from([100, 250, 500, 1000]),
    gpus=st.sampled_from([0, 1, 2, 4]),
    models=st.sampled_from([(), ("A100",), ("T4",)]),
    weight=st.integers(1, 50),
)


@pytest.mark.property
@settings(max_examples=60, deadline=None)
@given(
    free=st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    cpu=st.one_of(st.integers(0, 64000), st.sampled_from([0, 3999, 4000, 16000, 64000])),
    model=st.sampled_from(["A100", "T4"]),
    shapes=st.lists(shape_st, min_size=1, max_size=6),
)
def test_integer_fragmentation_equals_the_definition(free, cpu, model, shapes):
    shapes = [Shape(s.cpu_milli, s.gpu_milli if s.gpus else 0, s.gpus, s.models, s.weight) for s in shapes]
    node = a_node("n").model(model).gpus(len(free), tuple(free)).cpu(64000, cpu).build()
    fs = FleetState([node])
    fm = FragModel(shapes, fs.models)
    got = int(fm.frag(fs.gpu_free, fs.cpu_free, fs.model_of)[0]) / fm.total_weight
    assert got == pytest.approx(brute_force(free, cpu, model, shapes), abs=1e-6)
    # One node in Python ints (shapes of one share and GPU count grouped by CPU) gives the same number.
    cnt, on, total = fm.features_one(free)
    assert fm.frag_one(cnt, on, total, cpu, int(fs.model_of[0])) == int(
        fm.frag(fs.gpu_free, fs.cpu_free, fs.model_of)[0]
    )


def test_typical_shapes_cover_the_requested_share_of_samples():
    samples = [Shape(1000, 1000, 1)] * 70 + [Shape(2000, 500, 1)] * 20 + [Shape(0, 0, 0)] * 10
    got = typical_shapes(samples, 80)
    assert [s.weight for s in got] == [70, 20]
    assert sum(s.weight for s in typical_shapes(samples, 100)) == 100


def test_fillers_stand_for_each_share_size_below_the_smallest_typical_one():
    samples = (
        [Shape(8000, 1000, 1)] * 80
        + [Shape(4000, 500, 1)] * 15
        + [Shape(7000, 700, 1)]  # left out too, but every hole it fits a typical 500 fits: no filler
        + [Shape(6000, 100, 1, ("T4",)), Shape(3000, 100, 1, ("A100",))]  # every one names models
        + [Shape(4000, 200, 1, ("T4",)), Shape(5000, 200, 1)]  # one asks any model
    )
    typical = typical_shapes(samples, 95)
    assert [s.weight for s in typical] == [80, 15]
    assert typical_shapes(samples, 95, fillers=True) == (
        *typical,
        Shape(3000, 100, 1, ("A100", "T4"), 2),
        Shape(4000, 200, 1, (), 2),
    )
    assert typical_shapes(samples, 100, fillers=True) == typical_shapes(samples, 100)


def test_a_node_that_can_host_every_shape_has_no_fragment():
    node = a_node("n").gpus(2).build()
    fs = FleetState([node])
    fm = FragModel([Shape(1000, 1000, 1), Shape(1000, 500, 1)], fs.models)
    assert int(fm.frag(fs.gpu_free, fs.cpu_free, fs.model_of)[0]) == 0
    fs.gpu_free[0] = np.array([300, 0])  # 300m left: too small for both shapes
    assert int(fm.frag(fs.gpu_free, fs.cpu_free, fs.model_of)[0]) == 300 * fm.total_weight


def restricted(shapes: list[Shape], model: str) -> list[Shape]:
    """The shapes that can run on ``model`` (CPU-only and model-free ones included)."""
    return [s for s in shapes if not (s.gpus and s.models and model not in s.models)]


@pytest.mark.property
@settings(max_examples=60, deadline=None)
@given(
    free=st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    cpu=st.integers(8000, 64000),
    model=st.sampled_from(["A100", "T4"]),
    shapes=st.lists(shape_st, min_size=1, max_size=6),
    take=st.sampled_from([(0, 0), (0, 250), (1, 0), (2, 0)]),
)
def test_the_model_aware_increase_is_the_increase_against_the_shapes_that_can_run_there(free, cpu, model, shapes, take):
    """dF_m * W / W_m (floored), from the brute-force definition restricted to the node's model."""
    shapes = [Shape(s.cpu_milli, s.gpu_milli if s.gpus else 0, s.gpus, s.models, s.weight) for s in shapes]
    gpus, share = take
    free = sorted(free, reverse=True)
    if (gpus and sum(1 for f in free if f == 1000) < gpus) or (share and free[0] < share):
        return
    after = list(free)
    if gpus:
        after[:gpus] = [0] * gpus
    elif share:
        after[0] -= share
    node = a_node("n").model(model).gpus(len(free), tuple(free)).cpu(64000, cpu).build()
    fs = FleetState([node])
    fm = FragModel(shapes, fs.models)
    total = fm.total_weight
    inc = int(fm.frag(np.array([after]), fs.cpu_free - 4000, fs.model_of)[0]) - int(
        fm.frag(fs.gpu_free, fs.cpu_free, fs.model_of)[0]
    )
    got = int(fm.model_aware_increase(np.array([inc]), fs.model_of, gpus * 1000 + share)[0])
    mine = restricted(shapes, model)
    w_m = sum(s.weight for s in mine)
    if not w_m:
        return
    want = (brute_force(after, cpu - 4000, model, mine) - brute_force(free, cpu, model, mine)) * w_m
    assert got == (round(want) * total) // w_m
    if len(mine) == len(shapes):  # nothing excluded: the paper's increase, unchanged
        assert got == inc
