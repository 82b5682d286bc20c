"""NPUs first-class in the scheduling core, and GPUs described per card on mixed nodes.

Narrative cases through ``schedule`` (the one pure function every caller uses): where an NPU job goes
and which NPUs it takes, that work asking no NPU keeps off free NPUs, why an NPU job waits, the ``npu``
and ``npu:<MODEL>`` quota lines, preemption for NPUs, a replica asking GPUs and NPUs, and the cards a
replica takes on a node whose GPUs differ.
"""

from __future__ import annotations

import pytest

from events.catalog.jobs import PriorityClass
from services.scheduler.core.policy import Health, Place, Preempt, Queue, Quota, ReasonCode, schedule
from tests.scheduler.builders import a_job, a_node, running_on_npus, snapshot, tenant

pytestmark = pytest.mark.timeout(30)


def placed(result):
    return {d.job_id: d for d in result.decisions if isinstance(d, Place)}


def queued(result):
    return {d.job_id: d for d in result.decisions if isinstance(d, Queue)}


def gpu_node(name: str):
    return a_node(name).gpus(8)


def npu_node(name: str, n: int = 8, model: str = "Ascend910B", **kw):
    return a_node(name).no_gpus().npus(n, model, **kw)


# -- where an NPU job goes, and which NPUs it takes -------------------------------------------------------


def test_an_npu_job_goes_to_a_node_with_enough_free_npus_of_a_model_it_accepts():
    nodes = [
        gpu_node("a-gpu").build(),
        npu_node("b-small", 2).build(),
        npu_node("c-other", 8, "Ascend310P").build(),
        npu_node("d-right", 8).build(),
    ]
    job = a_job("npu-job").npus(4, "Ascend910B").build()
    p = placed(schedule(snapshot(nodes, [job])))["npu-job"]
    (replica,) = p.replicas
    assert replica.node_id == "d-right"
    assert replica.npu_indices == (0, 1, 2, 3)
    assert replica.gpu_indices == ()
    assert "d-right[npu 0,1,2,3]" in p.message


def test_npu_choice_skips_taken_and_failed_npus_and_takes_degraded_ones_last():
    node = npu_node("n1", 6, taken=(0,)).npu_health(1, Health.FAILED).npu_health(2, Health.DEGRADED).build()
    p = placed(schedule(snapshot([node], [a_job("j").npus(3).build()])))["j"]
    assert p.replicas[0].npu_indices == (3, 4, 5)
    p = placed(schedule(snapshot([node], [a_job("j").npus(4).build()])))["j"]
    assert p.replicas[0].npu_indices == (2, 3, 4, 5)


def test_two_npu_jobs_of_one_cycle_take_different_npus_and_the_third_waits():
    node = npu_node("n1", 8).build()
    jobs = [a_job(f"j{i}").npus(4).submitted(i).build() for i in range(3)]
    r = schedule(snapshot([node], jobs))
    got = placed(r)
    assert sorted(got) == ["j0", "j1"]
    taken = [i for d in got.values() for i in d.replicas[0].npu_indices]
    assert sorted(taken) == list(range(8))
    assert queued(r)["j2"].binding is ReasonCode.INSUFFICIENT_NPU


def test_an_npu_job_prefers_the_node_it_fills_best():
    nodes = [npu_node("a-big", 8).build(), npu_node("b-half", 8, taken=(0, 1, 2, 3)).build()]
    p = placed(schedule(snapshot(nodes, [a_job("j").npus(4).build()])))["j"]
    assert p.replicas[0].node_id == "b-half"


def test_an_npu_job_asks_for_something():
    job = a_job("j").cpu(0).npus(1).build()
    r = schedule(snapshot([npu_node("n1").cpu(64000).build()], [job]))
    assert "j" in placed(r)


# -- work that asks no NPU keeps off free NPUs --------------------------------------------------------------


def test_cpu_work_never_takes_npus_and_goes_to_an_npu_node_only_when_nothing_else_fits():
    nodes = [npu_node("a-npu").build(), a_node("b-cpu").no_gpus().cpu(8000).build()]
    r = schedule(snapshot(nodes, [a_job("small").cpu(4000).build(), a_job("large").cpu(32000).submitted(1).build()]))
    got = placed(r)
    assert got["small"].replicas[0].node_id == "b-cpu"
    assert got["large"].replicas[0].node_id == "a-npu"
    assert got["large"].replicas[0].npu_indices == ()


def test_gpu_work_keeps_off_a_node_whose_npus_are_free():
    nodes = [a_node("a-hybrid").gpus(8).npus(8).build(), a_node("b-gpu").gpus(8).build()]
    p = placed(schedule(snapshot(nodes, [a_job("g").gpus(2).build()])))["g"]
    assert p.replicas[0].node_id == "b-gpu"
    assert p.replicas[0].npu_indices == ()


# -- why an NPU job waits -------------------------------------------------------------------------------------


def test_an_npu_job_on_a_fleet_without_npus_waits_saying_no_node_has_npus():
    q = queued(schedule(snapshot([gpu_node("n1").build()], [a_job("j").npus(2).build()])))["j"]
    assert "asks for nothing" not in q.message
    assert "no node here has NPUs" in q.message
    assert q.binding is ReasonCode.GPU_MODEL_UNAVAILABLE  # category misconfigured: waiting changes nothing


def test_an_npu_job_of_a_model_no_node_has_is_told_which_models_exist():
    q = queued(
        schedule(snapshot([npu_node("n1", 8, "Ascend310P").build()], [a_job("j").npus(2, "Ascend910B").build()]))
    )
    why = q["j"]
    assert why.binding is ReasonCode.GPU_MODEL_UNAVAILABLE
    assert "no Ascend910B NPU node; has Ascend310P NPUs" in why.message


def test_a_busy_npu_node_explains_its_largest_free_block_and_the_smallest_change():
    node = npu_node("n1", 8, taken=(0, 1, 2, 3, 4, 5)).build()
    q = queued(schedule(snapshot([node], [a_job("j").npus(4).build()])))["j"]
    assert q.binding is ReasonCode.INSUFFICIENT_NPU
    assert "largest free NPU block is 2 NPUs on n1" in q.message
    assert q.constraint is not None and (q.constraint.resource, q.constraint.requested) == ("npu", 4)
    assert q.change is not None and (q.change.field, q.change.suggested) == ("resources.npus", "2")
    assert "4 NPUs" in q.message or "would fit now with 2 NPUs" in q.smallest_change


def test_more_npus_than_any_node_has_never_fits_and_says_so():
    q = queued(schedule(snapshot([npu_node("n1", 8).build()], [a_job("j").npus(16).build()])))["j"]
    assert q.binding is ReasonCode.NO_FEASIBLE_NODE
    assert q.constraint is not None and (q.constraint.resource, q.constraint.requested, q.constraint.available) == (
        "npu",
        16,
        8,
    )


def test_too_little_npu_memory_is_named():
    node = npu_node("n1", 8, memory_mib=32768).build()
    q = queued(schedule(snapshot([node], [a_job("j").npus(1, min_memory_mib=65536).build()])))["j"]
    assert q.binding is ReasonCode.GPU_MEMORY_TOO_SMALL
    assert "NPU with 65536 MiB" in q.message


# -- GPUs and NPUs on one replica -------------------------------------------------------------------------


def test_a_replica_asking_gpus_and_npus_goes_to_a_node_that_has_both():
    nodes = [gpu_node("a-gpu").build(), npu_node("b-npu").build(), a_node("c-both").gpus(8).npus(8).build()]
    p = placed(schedule(snapshot(nodes, [a_job("j").gpus(2).npus(2).build()])))["j"]
    (replica,) = p.replicas
    assert (replica.node_id, replica.gpu_indices, replica.npu_indices) == ("c-both", (0, 1), (0, 1))


def test_a_replica_asking_gpus_and_npus_where_no_node_has_both_waits_saying_so():
    nodes = [gpu_node("a-gpu").build(), npu_node("b-npu").build()]
    q = queued(schedule(snapshot(nodes, [a_job("j").gpus(2).npus(2).build()])))["j"]
    assert q.binding is ReasonCode.GPU_MODEL_UNAVAILABLE
    assert "no node here has both GPUs and NPUs" in q.message


# -- quota lines ----------------------------------------------------------------------------------------------


def test_the_npu_quota_line_counts_running_and_placed_npu_jobs():
    node = npu_node("n1", 16, taken=(0, 1, 2, 3)).build()
    held = running_on_npus(a_job("old").npus(4).build(), "cluster-a", ("n1", (0, 1, 2, 3)))
    t = tenant("team-a", Quota("npu", 8, 8))
    jobs = [a_job("fits").npus(4).submitted(1).build(), a_job("over").npus(4).submitted(2).build()]
    r = schedule(snapshot([node], jobs, [held], [t]))
    assert list(placed(r)) == ["fits"]
    over = queued(r)["over"]
    assert over.binding is ReasonCode.QUOTA_EXCEEDED
    assert "quota npu used 8 NPUs/8 NPUs, job asks 4 NPUs" in over.message


def test_the_npu_model_quota_line_holds_jobs_placed_on_that_model():
    nodes = [npu_node("a", 8, "Ascend910B").build()]
    t = tenant("team-a", Quota("npu:Ascend910B", 2, 2))
    r = schedule(snapshot(nodes, [a_job("j").npus(4).build()], tenants=[t]))
    q = queued(r)["j"]
    assert q.binding is ReasonCode.QUOTA_EXCEEDED
    assert q.constraint is not None and (q.constraint.resource, q.constraint.gpu_model) == ("npu", "Ascend910B")
    other = schedule(snapshot([npu_node("a", 8, "Ascend310P").build()], [a_job("j").npus(4).build()], tenants=[t]))
    assert "j" in placed(other)  # the line is about another model


def test_npu_borrowing_is_bounded_by_the_cohort():
    node = npu_node("n1", 16).build()
    lender = tenant("lender", Quota("npu", 4, 16), cohort="c")
    borrower = tenant("team-a", Quota("npu", 4, 16), cohort="c")
    r = schedule(snapshot([node], [a_job("j").npus(12).build()], tenants=[lender, borrower]))
    q = queued(r)["j"]
    assert q.binding is ReasonCode.QUOTA_EXCEEDED and "its cohort has 8 NPUs unused" in q.message
    r = schedule(snapshot([node], [a_job("j").npus(8).build()], tenants=[lender, borrower]))
    p = placed(r)["j"]
    assert p.borrowed


# -- preemption counts NPU room -----------------------------------------------------------------------------


def test_an_important_npu_job_preempts_a_best_effort_one_holding_the_npus():
    node = npu_node("n1", 8, taken=tuple(range(8))).build()
    victim = a_job("be").npus(8).priority(PriorityClass.BEST_EFFORT).build()
    held = running_on_npus(victim, "cluster-a", ("n1", tuple(range(8))))
    job = a_job("prod").npus(4).priority(PriorityClass.CRITICAL_TRAINING).build()
    r = schedule(snapshot([node], [job], [held]))
    assert [d.victim for d in r.decisions if isinstance(d, Preempt)] == ["be"]
    assert queued(r)["prod"].binding is ReasonCode.WAITING_FOR_PREEMPTION


def test_stopping_a_cpu_only_job_gives_no_npus():
    node = npu_node("n1", 8, taken=tuple(range(8))).build()
    cpu_job = a_job("cpu").cpu(1000).priority(PriorityClass.BEST_EFFORT).build()
    held = running_on_npus(cpu_job, "cluster-a", ("n1", ()))
    r = schedule(snapshot([node], [a_job("prod").npus(4).priority(PriorityClass.CRITICAL_TRAINING).build()], [held]))
    assert not [d for d in r.decisions if isinstance(d, Preempt)]


# -- mixed-GPU nodes ----------------------------------------------------------------------------------------------


def mixed(name: str):
    return a_node(name).cards(("A100", 40960), ("A100", 40960), ("H100", 81920), ("H100", 81920))


def test_a_replica_takes_only_cards_of_a_model_it_accepts_on_a_mixed_node():
    r = schedule(snapshot([mixed("n1").build()], [a_job("j").gpus(2).models("H100").build()]))
    assert placed(r)["j"].replicas[0].gpu_indices == (2, 3)


def test_a_memory_floor_picks_the_large_cards_of_a_mixed_node():
    r = schedule(snapshot([mixed("n1").build()], [a_job("j").gpus(1).min_gpu_memory(65536).build()]))
    assert placed(r)["j"].replicas[0].gpu_indices == (2,)


def test_a_share_on_a_mixed_node_goes_to_a_card_of_its_model():
    r = schedule(snapshot([mixed("n1").build()], [a_job("j").share(500).models("H100").build()]))
    assert placed(r)["j"].replicas[0].gpu_indices[0] in (2, 3)


def test_a_mixed_node_has_only_as_many_cards_of_a_model_as_it_holds():
    r = schedule(snapshot([mixed("n1").build()], [a_job("j").gpus(3).models("H100").build()]))
    assert "j" in queued(r)
    r = schedule(snapshot([mixed("n1").build()], [a_job("j").gpus(4).build()]))
    assert placed(r)["j"].replicas[0].gpu_indices == (0, 1, 2, 3)


def test_a_gpu_model_quota_counts_the_model_of_the_cards_taken_on_a_mixed_node():
    t = tenant("team-a", Quota("gpu:H100", 1000, 1000))
    r = schedule(snapshot([mixed("n1").build()], [a_job("j").gpus(2).models("H100").build()], tenants=[t]))
    q = queued(r)["j"]
    assert q.binding is ReasonCode.QUOTA_EXCEEDED and "gpu:H100" in q.message
    r = schedule(snapshot([mixed("n1").build()], [a_job("j").gpus(2).models("A100").build()], tenants=[t]))
    assert "j" in placed(r)


# -- fair share -------------------------------------------------------------------------------------------------


def test_a_tenant_holding_most_npus_waits_behind_one_holding_none():
    node = npu_node("n1", 8, taken=(0, 1, 2, 3, 4, 5)).cpu(64000).build()
    held = running_on_npus(a_job("old").tenant("rich").cpu(0).npus(6).build(), "cluster-a", ("n1", tuple(range(6))))
    rich = a_job("r").tenant("rich").npus(2).submitted(0).build()
    poor = a_job("p").tenant("poor").npus(2).submitted(5).build()
    r = schedule(snapshot([node], [rich, poor], [held]))
    assert list(placed(r)) == ["p"]


def test_borrowing_npus_names_the_npus_once():
    node = npu_node("n1", 16).build()
    lender = tenant("lender", Quota("npu", 4, 16), cohort="c")
    borrower = tenant("team-a", Quota("npu", 4, 16), cohort="c")
    q = queued(schedule(snapshot([node], [a_job("j").npus(12).build()], tenants=[lender, borrower])))["j"]
    assert "team-a would borrow 8 NPUs above its guaranteed 4 NPUs" in q.message
    assert "NPUs npu" not in q.message


def test_borrowed_amounts_say_what_they_are_of_once():
    from services.scheduler.core.policy.quota import borrowed_amount

    assert borrowed_amount("npu", 8) == "8 NPUs"
    assert borrowed_amount("npu:Ascend910B", 1) == "1 NPU of Ascend910B"
    assert borrowed_amount("gpu", 2500) == "2.5 gpu"
    assert borrowed_amount("memory", 1024) == "1024 MiB memory"


# -- waits for failed devices ----------------------------------------------------------------------------


def test_a_job_kept_off_by_failed_npus_or_gpus_waits_saying_they_failed_and_where():
    npus = npu_node("n1", 8)
    gpus = gpu_node("g1")
    for i in range(3):
        npus, gpus = npus.npu_health(i, Health.FAILED), gpus.gpu_health(i, Health.FAILED)
    npu_wait = queued(schedule(snapshot([npus.build()], [a_job("j").npus(6).build()])))["j"]
    gpu_wait = queued(schedule(snapshot([gpus.build()], [a_job("j").gpus(6).build()])))["j"]
    for wait, kind in ((npu_wait, "NPU"), (gpu_wait, "GPU")):
        assert wait.binding is ReasonCode.GPU_UNHEALTHY
        assert f"3 {kind}s it could use failed (3 on " in wait.message
        assert "no node holds it until they are back" in wait.message
    assert (npu_wait.constraint.requested, npu_wait.constraint.available) == (6, 5)


def test_every_npu_of_a_cluster_failed_is_said_so_not_that_it_has_none():
    node = npu_node("n1", 4)
    for i in range(4):
        node = node.npu_health(i, Health.FAILED)
    wait = queued(schedule(snapshot([node.build()], [a_job("j").npus(2).build()])))["j"]
    assert wait.binding is ReasonCode.GPU_UNHEALTHY and "4 NPUs it could use failed (4 on n1)" in wait.message
    assert "no node here has NPUs" not in wait.message


def test_a_job_too_large_even_with_its_failed_npus_back_says_so_rather_than_blame_them():
    node = npu_node("n1", 8).npu_health(0, Health.FAILED).build()
    wait = queued(schedule(snapshot([node], [a_job("j").npus(16).build()])))["j"]
    assert wait.binding is ReasonCode.NO_FEASIBLE_NODE
