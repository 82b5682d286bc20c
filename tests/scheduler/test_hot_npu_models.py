"""Hot NPU models are governed as hot GPU models are: one definition of hot (``is_hot``: the allocated share
of a model's working devices reaches the policy's ``hot_pressure_milli``), a tenant's hot-model cap limits
its share of a hot NPU model (counted in milli-NPU, apart from its hot GPUs), a job that accepts several NPU
models is steered off a hot one, and the wait explains itself in NPU words."""

from __future__ import annotations

import pytest

from services.scheduler.core.policy import Place, Queue, ReasonCode, schedule
from services.scheduler.core.policy.capacity import npu_model_pressure
from services.scheduler.core.policy.fleet import FleetState
from tests.scheduler.builders import a_job, a_node, config, running_on_npus, snapshot, tenant

pytestmark = pytest.mark.timeout(30)

HOT = config(hot_pressure_milli=700)


def ascend_pool(*more):  # type: ignore[no-untyped-def]
    """Two Ascend910B nodes, 12 of their 16 NPUs held (750 per mille): team-b holds a1, team-a 4 of a2."""
    nodes = [
        a_node("a1").no_gpus().npus(8, taken=tuple(range(8))).build(),
        a_node("a2").no_gpus().npus(8, taken=(0, 1, 2, 3)).build(),
        *more,
    ]
    held = [
        running_on_npus(a_job("b-run").tenant("team-b").npus(8).build(), "cluster-a", ("a1", tuple(range(8)))),
        running_on_npus(a_job("a-run").tenant("team-a").npus(4).build(), "cluster-a", ("a2", (0, 1, 2, 3))),
    ]
    return nodes, held


def test_an_npu_models_pressure_is_its_allocated_share_of_working_npus() -> None:
    nodes, _ = ascend_pool(a_node("p1").no_gpus().npus(4, "Ascend310P", taken=(0,)).build())
    pressure = npu_model_pressure(FleetState(nodes))
    assert pressure == {"Ascend310P": 250, "Ascend910B": 750}


def test_a_tenant_over_its_cap_on_a_hot_npu_model_waits_and_says_why_in_npu_words() -> None:
    nodes, held = ascend_pool()
    capped = [tenant("team-a", hot_cap=5000), tenant("team-c", hot_cap=5000)]
    over = a_job("a-more").tenant("team-a").npus(2).submitted(0).build()
    within = a_job("c-new").tenant("team-c").npus(2).submitted(1).build()
    r = schedule(snapshot(nodes, [over, within], held, tenants=capped), HOT)
    assert [d.job_id for d in r.decisions if isinstance(d, Place)] == ["c-new"]
    q = next(d for d in r.decisions if isinstance(d, Queue))
    assert q.job_id == "a-more" and q.binding is ReasonCode.HOT_MODEL_CAP
    assert "team-a holds 4 NPUs of hot models (Ascend910B); this job would take it to 6, above its cap of 5" in (
        q.message
    )
    assert q.constraint is not None and (q.constraint.resource, q.constraint.requested, q.constraint.available) == (
        "npu",
        2,
        1,
    )


def test_the_same_job_is_placed_when_the_model_is_not_hot_or_the_tenant_has_no_cap() -> None:
    nodes, held = ascend_pool()
    job = a_job("a-more").tenant("team-a").npus(4).build()
    capped = [tenant("team-a", hot_cap=6000)]
    cool = schedule(snapshot(nodes, [job], held, tenants=capped))  # 750 per mille is under the default 900
    assert [d.job_id for d in cool.decisions if isinstance(d, Place)] == ["a-more"]
    uncapped = schedule(snapshot(nodes, [job], held), HOT)
    assert [d.job_id for d in uncapped.decisions if isinstance(d, Place)] == ["a-more"]


def test_a_job_that_accepts_several_npu_models_is_steered_off_a_hot_one() -> None:
    cool = a_node("p1").no_gpus().npus(8, "Ascend310P").build()
    nodes, held = ascend_pool(cool)
    job = a_job("any-npu").tenant("team-c").npus(2).build()
    r = schedule(snapshot(nodes, [job], held), HOT)
    [placed] = [d for d in r.decisions if isinstance(d, Place)]
    assert {replica.node_id for replica in placed.replicas} == {"p1"}
