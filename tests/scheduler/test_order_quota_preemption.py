"""Order and fairness, quotas, hot-spot governance, preemption, reservation and backfill."""

from __future__ import annotations

import random
import re

import pytest

from events.catalog.jobs import JobKind, PriorityClass
from services.scheduler.core.policy import (
    Place,
    PolicyConfig,
    Preempt,
    Queue,
    Quota,
    ReasonCode,
    Reserve,
    UsageRecord,
    schedule,
)
from services.scheduler.core.policy.usage import UsageLedger, decayed, history_of
from tests.scheduler.builders import a_job, a_node, config, running, snapshot, tenant

pytestmark = pytest.mark.timeout(30)


def kinds(result):
    return [(d.kind, getattr(d, "job_id", getattr(d, "victim", None))) for d in result.decisions]


def one_node_with(free_gpus: int):
    free = tuple([1000] * free_gpus + [0] * (8 - free_gpus))
    return a_node("n1").gpus(8, free).cpu(64000, 64000 - (8 - free_gpus) * 1000)


def test_a_more_important_class_goes_first_whatever_the_submission_order():
    node = a_node("n1").gpus(8).build()
    late_important = a_job("prod").gpus(8).priority(PriorityClass.PRODUCTION_INFERENCE).submitted(9).build()
    early_batch = a_job("batch").gpus(8).priority(PriorityClass.BEST_EFFORT).submitted(1).build()
    r = schedule(snapshot([node], [early_batch, late_important]))
    assert [d.job_id for d in r.decisions if isinstance(d, Place)] == ["prod"]


def test_inside_a_class_the_tenant_holding_less_goes_first():
    node = one_node_with(4).build()
    held = running(a_job("old").tenant("rich").gpus(4).build(), "cluster-a", ("n1", (4, 5, 6, 7), 1000))
    rich = a_job("r").tenant("rich").gpus(4).submitted(0).build()
    poor = a_job("p").tenant("poor").gpus(4).submitted(5).build()
    r = schedule(snapshot([node], [rich, poor], [held]))
    assert [d.job_id for d in r.decisions if isinstance(d, Place)] == ["p"]


def test_decayed_usage_history_lowers_a_tenants_turn():
    node = a_node("n1").gpus(4).build()
    heavy = tenant("heavy")
    usage = history_of([UsageRecord(at_ms=900_000, gpu_milli_ms=10**15)], PolicyConfig().usage_half_life_ms)
    heavy = type(heavy)(heavy.tenant_id, usage=usage)
    jobs = [
        a_job("h").tenant("heavy").gpus(4).submitted(0).build(),
        a_job("l").tenant("light").gpus(4).submitted(1).build(),
    ]
    r = schedule(snapshot([node], jobs, tenants=[heavy]))
    assert [d.job_id for d in r.decisions if isinstance(d, Place)] == ["l"]


def test_usage_halves_every_half_life():
    def left(at_ms: int, now_ms: int) -> int:
        return decayed(history_of([UsageRecord(at_ms, 1_000_000)], 100), now_ms)

    assert left(0, 0) == 1_000_000
    assert left(0, 100) == 500_000
    assert left(0, 300) == 125_000
    assert 700_000 <= left(0, 50) <= 710_000
    # Across an epoch boundary (32 half-lives) and from any start on the grid, the same.
    assert left(3150, 3250) == 500_000
    assert left(3200 * 7 + 10, 3200 * 7 + 310) == 125_000
    assert left(0, 100 * 64) == 0


def test_a_tenants_history_is_its_records_decayed_whatever_the_order_of_adding_and_removing():
    rng = random.Random(5)
    records = [UsageRecord(rng.randrange(0, 10_000), rng.randrange(0, 10**12)) for _ in range(200)]
    expected = history_of(records, 300)
    for _ in range(20):
        ledger = UsageLedger(300, {})
        extra = [UsageRecord(rng.randrange(0, 10_000), rng.randrange(1, 10**12)) for _ in range(50)]
        steps = [(r, 1) for r in records + extra] + [(r, -1) for r in extra]
        rng.shuffle(steps)
        for record, sign in sorted(steps, key=lambda s: s[1] < 0):  # every removal after its addition
            ledger.add(record, sign)
        assert ledger.history() == expected
    # Decayed all at once, the sum of the records each decayed (to within the table's rounding).
    now = 12_000
    exact = sum(r.gpu_milli_ms * 2 ** (-(now - r.at_ms) / 300) for r in records)
    assert abs(decayed(expected, now) - exact) <= exact * 0.011


def test_a_history_grown_with_another_half_life_is_refused():
    node = a_node("n1").gpus(4).build()
    odd = tenant("odd")
    odd = type(odd)(odd.tenant_id, usage=history_of([UsageRecord(at_ms=1, gpu_milli_ms=5)], 1234))
    with pytest.raises(ValueError, match="half-life of 1234 ms"):
        schedule(snapshot([node], [a_job("o").tenant("odd").gpus(1).build()], tenants=[odd]))


def test_aging_lets_an_old_job_of_a_busy_tenant_overtake():
    node = one_node_with(4).build()
    held = running(a_job("old").tenant("busy").gpus(4).build(), "cluster-a", ("n1", (4, 5, 6, 7), 1000))
    waited = a_job("w").tenant("busy").gpus(4).submitted(0).build()
    fresh = a_job("f").tenant("idle").gpus(4).submitted(10 * 3600_000).build()
    r = schedule(snapshot([node], [waited, fresh], [held], now_ms=10 * 3600_000))
    assert [d.job_id for d in r.decisions if isinstance(d, Place)] == ["w"]


def test_a_tenant_at_its_limit_waits_with_the_numbers():
    node = one_node_with(4).build()
    held = running(a_job("x").tenant("team-x").gpus(4).build(), "cluster-a", ("n1", (4, 5, 6, 7), 1000))
    t = tenant("team-x", Quota("gpu", 4000, 4000))
    r = schedule(snapshot([node], [a_job("j").tenant("team-x").gpus(2).build()], [held], [t]))
    q = next(d for d in r.decisions if isinstance(d, Queue))
    assert q.binding is ReasonCode.QUOTA_EXCEEDED
    assert "4/4" in q.message and "asks 2" in q.message
    # Its quota holds it, not the fleet: no start estimated from running jobs, no other shape suggested.
    assert q.estimated_start_ms is None and "estimated start" not in q.message and q.change is None
    # The same in numbers: the job's GPUs against what its quota has left, federation-wide.
    c = q.constraint
    assert (c.reason, c.resource, c.cluster, c.requested, c.available) == (
        ReasonCode.QUOTA_EXCEEDED, "gpu", None, 2000, 0,
    )  # fmt: skip


def test_borrowing_from_an_idle_cohort_is_allowed_and_marked_reclaimable():
    node = a_node("n1").gpus(8).build()
    a = tenant("a", Quota("gpu", 2000, 8000), cohort="lab")
    b = tenant("b", Quota("gpu", 6000, 8000), cohort="lab")
    r = schedule(snapshot([node], [a_job("j").tenant("a").gpus(6).build()], tenants=[a, b]))
    p = next(d for d in r.decisions if isinstance(d, Place))
    assert p.borrowed


def test_a_job_held_by_its_quota_is_not_said_to_lack_room_and_is_told_the_size_that_fits_it():
    node = one_node_with(4).build()
    held = running(a_job("x").tenant("team-q").gpus(4).build(), "cluster-a", ("n1", (4, 5, 6, 7), 1000))
    t = tenant("team-q", Quota("gpu", 4000, 6000))
    r = schedule(snapshot([node], [a_job("j").tenant("team-q").gpus(3).build()], [held], [t]))
    q = next(d for d in r.decisions if isinstance(d, Queue))
    assert q.binding is ReasonCode.QUOTA_EXCEEDED and q.reasons == (ReasonCode.QUOTA_EXCEEDED,)
    [cluster] = q.per_cluster
    assert cluster.detail == "room for its 1 replica(s) now (1 would fit); it waits for its quota"
    assert q.change is not None
    assert (q.change.field, q.change.current, q.change.suggested) == ("resources.gpus", "3", "2")
    assert q.message.endswith("would fit its quota with 2 GPU(s) per replica")
    # With nothing left under the limit, no size fits: none is suggested.
    full = tenant("team-q", Quota("gpu", 4000, 4000))
    r = schedule(snapshot([node], [a_job("j").tenant("team-q").gpus(3).build()], [held], [full]))
    assert next(d for d in r.decisions if isinstance(d, Queue)).change is None


def test_borrowing_stops_when_the_cohort_has_nothing_idle():
    node = one_node_with(2).build()
    held = running(a_job("bj").tenant("b").gpus(6).build(), "cluster-a", ("n1", (2, 3, 4, 5, 6, 7), 1000))
    a = tenant("a", Quota("gpu", 2000, 8000), cohort="lab")
    b = tenant("b", Quota("gpu", 6000, 8000), cohort="lab")
    ok = schedule(snapshot([node], [a_job("j").tenant("a").gpus(2).build()], [held], [a, b]))
    assert [d.kind for d in ok.decisions] == ["place"]
    r = schedule(snapshot([a_node("n1").gpus(8).build()], [a_job("k").tenant("a").gpus(3).build()], [held], [a, b]))
    assert next(d for d in r.decisions if isinstance(d, Queue)).binding is ReasonCode.QUOTA_EXCEEDED


def test_a_job_that_accepts_several_models_is_steered_off_a_hot_model():
    hot = a_node("hot1").model("A100").gpus(8, (0, 0, 0, 0, 0, 0, 1000, 1000)).build()
    cool = a_node("cool1").model("T4").gpus(8).build()
    r = schedule(snapshot([hot, cool], [a_job("j").gpus(1).build()]), config(hot_pressure_milli=700))
    assert next(d for d in r.decisions if isinstance(d, Place)).replicas[0].node_id == "cool1"


def test_a_tenant_over_its_hot_model_cap_is_kept_off_hot_models():
    hot = a_node("hot1").model("A100").gpus(8, (0, 0, 0, 0, 0, 0, 1000, 1000)).build()
    t = tenant("team-a", hot_cap=0)
    r = schedule(
        snapshot([hot], [a_job("j").gpus(1).models("A100").build()], tenants=[t]), config(hot_pressure_milli=700)
    )
    q = next(d for d in r.decisions if isinstance(d, Queue))
    assert ReasonCode.HOT_MODEL_CAP in q.reasons


def full_node_with(*jobs_gpus: tuple[str, int, PriorityClass, JobKind]):
    node = a_node("n1").gpus(8, (0,) * 8).cpu(64000, 64000 - len(jobs_gpus) * 1000).build()
    runs, start = [], 0
    for job_id, n, prio, kind in jobs_gpus:
        j = a_job(job_id).gpus(n).priority(prio).kind(kind).build()
        runs.append(running(j, "cluster-a", ("n1", tuple(range(start, start + n)), 1000), started_ms=start))
        start += n
    return node, runs


def test_preemption_takes_the_smallest_set_of_lower_priority_jobs():
    node, runs = full_node_with(
        ("be-big", 4, PriorityClass.BEST_EFFORT, JobKind.BATCH),
        ("be-small", 2, PriorityClass.BEST_EFFORT, JobKind.BATCH),
        ("std", 2, PriorityClass.STANDARD, JobKind.BATCH),
    )
    job = a_job("crit").gpus(2).priority(PriorityClass.CRITICAL_TRAINING).kind(JobKind.TRAINING).build()
    r = schedule(snapshot([node], [job], runs))
    pre = [d for d in r.decisions if isinstance(d, Preempt)]
    assert [p.victim for p in pre] == ["be-small"]
    assert pre[0].rule is ReasonCode.PRIORITY_PREEMPTION and pre[0].preemptor == "crit"
    waits = next(d for d in r.decisions if isinstance(d, Queue))
    assert waits.binding is ReasonCode.WAITING_FOR_PREEMPTION
    assert "1 job(s) in cluster-a are asked to stop: be-small" in waits.message  # which, by name
    # It starts once they have stopped: not when the fleet's running jobs end, nor by asking for less.
    assert waits.estimated_start_ms is None and "estimated start" not in waits.message
    assert waits.change is None and not waits.smallest_change


def test_between_clusters_the_least_important_victims_go_even_where_a_cluster_name_comes_later():
    """As costly in GPUs in either cluster: the standard job in cluster-a stays, the best-effort one in
    cluster-b stops (the cluster names alone used to decide)."""
    nodes, runs = [], []
    for cluster, job_id, prio in (
        ("cluster-a", "std", PriorityClass.STANDARD),
        ("cluster-b", "be", PriorityClass.BEST_EFFORT),
    ):
        nodes.append(a_node(f"{cluster}-n1").cluster(cluster).gpus(8, (0,) * 8).cpu(64000, 63000).build())
        held = a_job(job_id).gpus(8).priority(prio).kind(JobKind.BATCH).build()
        runs.append(running(held, cluster, (f"{cluster}-n1", tuple(range(8)), 1000)))
    job = a_job("crit").gpus(8).priority(PriorityClass.CRITICAL_TRAINING).kind(JobKind.TRAINING).build()
    r = schedule(snapshot(nodes, [job], runs))
    assert [(p.victim, p.cluster) for p in r.decisions if isinstance(p, Preempt)] == [("be", "cluster-b")]


def test_inference_is_never_preempted_for_training():
    node, runs = full_node_with(("infer", 8, PriorityClass.BEST_EFFORT, JobKind.INFERENCE))
    job = a_job("train").gpus(2).priority(PriorityClass.CRITICAL_TRAINING).kind(JobKind.TRAINING).build()
    r = schedule(snapshot([node], [job], runs))
    assert not [d for d in r.decisions if isinstance(d, Preempt)]


def test_a_job_out_of_interruption_budget_is_not_preempted_again():
    node = a_node("n1").gpus(8, (0,) * 8).build()
    victim = a_job("v").gpus(8).priority(PriorityClass.BEST_EFFORT).preempted(3).build()
    runs = [running(victim, "cluster-a", ("n1", tuple(range(8)), 1000))]
    job = a_job("j").gpus(8).priority(PriorityClass.PRODUCTION_INFERENCE).kind(JobKind.INFERENCE).build()
    r = schedule(snapshot([node], [job], runs))
    assert not [d for d in r.decisions if isinstance(d, Preempt)]


def test_borrowed_capacity_is_reclaimed_for_a_tenant_within_its_guarantee():
    node = a_node("n1").gpus(8, (0,) * 8).build()
    borrower = a_job("b1").tenant("b").gpus(8).build()
    runs = [running(borrower, "cluster-a", ("n1", tuple(range(8)), 1000))]
    ta = tenant("a", Quota("gpu", 4000, 8000), cohort="lab")
    tb = tenant("b", Quota("gpu", 4000, 8000), cohort="lab")
    r = schedule(snapshot([node], [a_job("a1").tenant("a").gpus(4).build()], runs, [ta, tb]))
    pre = [d for d in r.decisions if isinstance(d, Preempt)]
    assert [p.victim for p in pre] == ["b1"] and pre[0].rule is ReasonCode.RECLAIM_BORROWED


def test_the_head_of_line_gang_gets_a_reservation_and_only_short_jobs_backfill():
    nodes = [a_node("n1").gpus(8, (0,) * 8).build(), a_node("n2").gpus(8).build()]
    long_run = a_job("r").gpus(8).runtime(expected_s=3600).build()
    runs = [running(long_run, "cluster-a", ("n1", tuple(range(8)), 1000), started_ms=0)]
    gang = a_job("gang").gpus(8).replicas(2).submitted(0).build()
    short = a_job("short").gpus(4).runtime(max_s=600).submitted(1).build()
    longer = a_job("long").gpus(4).runtime(max_s=10 * 3600).submitted(2).build()
    r = schedule(snapshot(nodes, [gang, short, longer], runs, now_ms=0))
    res = [d for d in r.decisions if isinstance(d, Reserve)]
    assert res and res[0].job_id == "gang" and res[0].expected_start_ms == 3600_000
    placed = [d for d in r.decisions if isinstance(d, Place)]
    assert [p.job_id for p in placed] == ["short"] and ReasonCode.BACKFILLED in placed[0].reasons
    q = {d.job_id: d for d in r.decisions if isinstance(d, Queue)}
    assert q["long"].binding is ReasonCode.RESERVED_FOR_GANG


def test_a_job_kept_only_off_a_gangs_reservation_waits_and_stops_nobody():
    """It would fit on the reserved node with no victim at all: preemption has nothing to offer it (the
    cycle once ended with ``min() arg is an empty sequence`` here, and the scheduler with it)."""
    free = a_node("n1").gpus(8).build()
    half = a_node("n2").gpus(8, (0, 0, 0, 0, 1000, 1000, 1000, 1000)).build()
    small = a_node("n3").gpus(2, (0, 1000)).build()
    important = a_job("r").gpus(4).priority(PriorityClass.CRITICAL_TRAINING).runtime(600).build()
    cheap = a_job("r2").gpus(1).priority(PriorityClass.BEST_EFFORT).build()
    runs = [
        running(important, "cluster-a", ("n2", (0, 1, 2, 3), 1000)),
        running(cheap, "cluster-a", ("n3", (0,), 1000)),
    ]
    gang = a_job("gang").gpus(8).replicas(2).submitted(1).build()
    job = a_job("b").gpus(8).submitted(2).build()
    r = schedule(snapshot([free, half, small], [gang, job], runs))
    assert not [d for d in r.decisions if isinstance(d, Preempt)]
    assert [d.job_id for d in r.decisions if isinstance(d, Reserve)] == ["gang"]
    q = {d.job_id: d for d in r.decisions if isinstance(d, Queue)}
    assert q["b"].binding is ReasonCode.RESERVED_FOR_GANG


def test_a_queued_job_hears_why_per_cluster_what_would_fit_and_when():
    nodes = [
        a_node("a1").cluster("cluster-a").gpus(8, (1000,) * 6 + (0, 0)).build(),
        a_node("b1").cluster("cluster-b").model("T4").build(),
    ]
    runs = [
        running(a_job("r").gpus(2).runtime(expected_s=2400).build(), "cluster-a", ("a1", (6, 7), 1000), started_ms=0)
    ]
    r = schedule(snapshot(nodes, [a_job("j").gpus(8).models("A100").build()], runs, now_ms=0))
    q = next(d for d in r.decisions if isinstance(d, Queue))
    why = {w.cluster: w.reason for w in q.per_cluster}
    assert why == {"cluster-a": ReasonCode.INSUFFICIENT_GPU, "cluster-b": ReasonCode.GPU_MODEL_UNAVAILABLE}
    assert "largest free block is 6 GPUs" in q.message
    assert "would fit now with 6 GPUs" in q.smallest_change
    assert "in about 40 min" in q.smallest_change and q.estimated_start_ms == 2400_000
    assert q.federation_position == 1


def test_any_clock_gives_a_bounded_history_quickly():
    # Years of half-lives ago: exactly nothing left, found without building 2^(age / half-life).
    ancient = history_of([UsageRecord(at_ms=0, gpu_milli_ms=10**15)], 1000)
    assert decayed(ancient, 1_800_000_000_000) == 0
    # From a clock far ahead (an epoch after now): its amount, undecayed, not 2^(centuries / half-life).
    hour = 3_600_000
    ahead = history_of(
        [UsageRecord(at_ms=10**15, gpu_milli_ms=1000), UsageRecord(at_ms=10**15 + 7, gpu_milli_ms=5)], hour
    )
    assert decayed(ahead, 0) == 1005


def test_a_policy_with_a_half_life_of_milliseconds_is_refused():
    from services.scheduler.core.state import policy_from_document

    with pytest.raises(ValueError, match="usage_half_life_ms"):
        policy_from_document("v1", {"usage_half_life_ms": 5})
    with pytest.raises(ValueError, match="usage_half_life_ms"):
        policy_from_document("v1", {"usage_half_life_ms": -1})
    assert policy_from_document("v1", {"usage_half_life_ms": 0}).usage_half_life_ms == 0


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ({"preemption": "false"}, "setting preemption: must be true or false"),
        ({"backfill": 0}, "setting backfill: must be true or false"),
        ({"max_victims": -3}, "setting max_victims: must be from 0 up"),
        ({"max_victims": 2.5}, "setting max_victims: must be a whole number"),
        ({"max_victims": True}, "setting max_victims: must be a whole number"),
        ({"typical_coverage_pct": 120}, "setting typical_coverage_pct: must be from 0 to 100"),
        ({"hot_pressure_milli": 1001}, "setting hot_pressure_milli: must be from 0 to 1000"),
        ({"max_decisions": 0}, "setting max_decisions: must be from 1 up"),
        ({"hot_model_cap_milli": "8000"}, "setting hot_model_cap_milli: must be a whole number or null"),
        ({"cluster_weights": {"fit": -1}}, "weight fit must be a whole number from 0 up"),
        ({"cluster_weights": {"speed": 1}}, "unknown term 'speed'"),
        ({"cluster_weights": [1, 2]}, "must be a mapping of weights"),
        ({"typical_shapes": {"gpus": 1}}, "must be a list of shapes"),
    ],
)
def test_a_policy_setting_of_the_wrong_type_or_out_of_range_is_refused_naming_it(
    document: dict[str, object], reason: str
) -> None:
    from services.scheduler.core.state import policy_from_document

    with pytest.raises(ValueError, match=re.escape(reason)):
        policy_from_document("v1", document)


def test_a_policy_of_valid_settings_is_read_as_given() -> None:
    from services.scheduler.core.state import policy_from_document

    config = policy_from_document(
        "v2",
        {
            "preemption": False,
            "max_victims": 0,
            "hot_model_cap_milli": None,
            "cluster_weights": {"fit": 0, "cost": 5},
            "typical_coverage_pct": 100,
        },
    )
    assert (config.preemption, config.max_victims, config.hot_model_cap_milli) == (False, 0, None)
    assert (config.cluster_weights.fit, config.cluster_weights.cost, config.cluster_weights.locality) == (0, 5, 3)
