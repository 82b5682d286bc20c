"""No starvation (issue 21, item 6): bounded aging across priority classes. A best-effort job that has
waited the policy's ``class_aging_step_ms`` is ordered as a standard one (one class per step, up to the
policy's ``class_aging_ceiling``, never production inference), so a steady stream of standard jobs
cannot keep it waiting for ever; its placement or wait says it was promoted by aging, and it preempts
only what its own class may.

The property: in a fleet of 1-3 eight-GPU nodes, under any stream of standard jobs of one to three tenants
(sizes, runtimes and gaps drawn), a best-effort job that fits an empty node starts within the class-aging
step plus the longest standard runtime (plus a cycle). Without the aging the same stream starves it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.jobs import PriorityClass
from events.catalog.types import JobId, TenantId
from services.scheduler.core.policy import Place, Preempt, Queue, schedule
from services.scheduler.core.policy.model import Job, PolicyConfig, RunningJob, ordering_rank, priority_rank
from services.scheduler.core.state.policy_document import policy_from_document
from tests.scheduler.builders import a_job, a_node, running, snapshot

pytestmark = pytest.mark.timeout(120)

MIN = 60_000
STEP = 20 * MIN
CYCLE = MIN
"""The live scheduler runs an idle cycle every few seconds; here one a minute besides every arrival and end."""
AGING = PolicyConfig(
    class_aging_step_ms=STEP,
    aging_step_ms=MIN,  # inside a class, a minute more of waiting outweighs any fair-share difference
    aging_unit_milli=1000,
    reservation_min_gpus=1,  # the head of the queue holds the room it will start in, whatever its size
)


@dataclass
class Fleet:
    """Eight-GPU nodes and what runs on them, advanced from event to event by the scheduling core."""

    nodes: int
    free: dict[str, list[int]] = field(default_factory=dict)
    running: dict[str, tuple[RunningJob, int]] = field(default_factory=dict)  # job -> (run, its end)
    pending: dict[str, Job] = field(default_factory=dict)
    started: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.free = {f"n{i}": [1000] * 8 for i in range(self.nodes)}

    def cycle(self, now: int, config: PolicyConfig, runtime: dict[str, int]) -> None:
        for job_id, (run, end) in sorted(self.running.items()):
            if end <= now:
                self._release(job_id, run)
        nodes = [a_node(n).gpus(8, tuple(free)).cpu(64000, 64000).build() for n, free in sorted(self.free.items())]
        snap = snapshot(nodes, list(self.pending.values()), [r for r, _ in self.running.values()], now_ms=now)
        for d in schedule(snap, config).decisions:
            if isinstance(d, Place):
                job = self.pending.pop(d.job_id)
                for p in d.replicas:
                    for g in p.gpu_indices:
                        self.free[p.node_id][g] -= p.gpu_milli_each
                placed = [(p.node_id, p.gpu_indices, p.gpu_milli_each) for p in d.replicas]
                run = running(job, "cluster-a", *placed, started_ms=now)
                self.running[job.job_id] = (run, now + runtime[job.job_id])
                self.started.setdefault(job.job_id, now)
            elif isinstance(d, Preempt) and d.victim in self.running:
                victim = self._release(d.victim, self.running[d.victim][0])
                self.pending[victim.job_id] = replace(victim, times_preempted=victim.times_preempted + 1)

    def _release(self, job_id: str, run: RunningJob) -> Job:
        del self.running[job_id]
        for p in run.placements:
            for g in p.gpu_indices:
                self.free[p.node_id][g] += p.gpu_milli_each
        return run.job


standard_jobs = st.lists(
    st.tuples(
        st.integers(1, 8),  # GPUs
        st.integers(1, 20),  # runtime, minutes
        st.integers(1, 5),  # gap after the previous arrival, minutes
        st.sampled_from(["team-a", "team-b", "team-c"]),
    ),
    min_size=1,
    max_size=60,
)


def run_stream(
    nodes: int,
    stream: list[tuple[int, int, int, str]],
    best_effort_gpus: int,
    tenant: str,
    config: PolicyConfig,
    busy: int = 10,
) -> tuple[int | None, int]:
    """When the best-effort job started, and the bound it must meet. It is submitted at 0, when every node
    runs a standard job (for ``busy`` minutes more), and the stream arrives from a minute later on."""
    be = a_job("be").tenant(tenant).gpus(best_effort_gpus).priority(PriorityClass.BEST_EFFORT).build()
    runtime = {"be": 60 * MIN}
    fleet = Fleet(nodes)
    fleet.pending["be"] = be
    for n in sorted(fleet.free):
        first = a_job(f"first-{n}").tenant("team-c").gpus(8).runtime(expected_s=busy * 60).build()
        fleet.running[str(first.job_id)] = (running(first, "cluster-a", (n, tuple(range(8)), 1000)), busy * MIN)
        fleet.free[n] = [0] * 8
    arrivals: list[tuple[int, Job]] = []
    at = 0
    for i, (gpus, minutes, gap, owner) in enumerate(stream):
        at += gap * MIN  # the first a minute or more after the best-effort job
        job_id = f"s{i:03d}"
        job = a_job(job_id).tenant(owner).gpus(gpus).runtime(expected_s=minutes * 60).submitted(at).build()
        arrivals.append((at, job))
        runtime[job_id] = minutes * MIN
    bound = STEP + CYCLE + max(busy, *(minutes for _, minutes, _, _ in stream)) * MIN
    moments = sorted({*range(0, bound + CYCLE, CYCLE), *(t for t, _ in arrivals)})
    k = 0
    for now in moments:
        while k < len(arrivals) and arrivals[k][0] <= now:
            fleet.pending[str(arrivals[k][1].job_id)] = arrivals[k][1]
            k += 1
        ends = sorted(end for _, end in fleet.running.values() if end < now)
        for end in ends:  # every end is a moment too: the room it frees is taken then
            fleet.cycle(end, config, runtime)
        fleet.cycle(now, config, runtime)
        if "be" in fleet.started:
            break
    return fleet.started.get("be"), bound


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.integers(1, 3),
    stream=standard_jobs,
    best_effort_gpus=st.integers(1, 8),
    tenant=st.sampled_from(["team-a", "team-b", "team-c"]),
    busy=st.integers(1, 20),
)
def test_a_best_effort_job_that_fits_starts_within_a_bound_under_any_stream_of_standard_jobs(
    nodes: int, stream: list[tuple[int, int, int, str]], best_effort_gpus: int, tenant: str, busy: int
) -> None:
    started, bound = run_stream(nodes, stream, best_effort_gpus, tenant, AGING, busy)
    assert started is not None and started <= bound, (started, bound)


def saturating() -> list[tuple[int, int, int, str]]:
    return [(8, 10, 1, "team-b")] * 60  # a whole node every minute, for ten minutes each


def test_without_aging_across_classes_the_same_stream_starves_it() -> None:
    starved, bound = run_stream(1, saturating(), 8, "team-a", replace(AGING, class_aging_step_ms=0))
    assert starved is None  # still waiting at the bound the aged job meets
    started, _ = run_stream(1, saturating(), 8, "team-a", AGING)
    assert started is not None and started <= bound


# -- the rule and its words ---------------------------------------------------------------------------


_P = PriorityClass


@pytest.mark.parametrize(
    ("priority", "waited_steps", "ceiling", "ordered_as"),
    [
        (_P.BEST_EFFORT, 0, _P.STANDARD, _P.BEST_EFFORT),
        (_P.BEST_EFFORT, 1, _P.STANDARD, _P.STANDARD),
        (_P.BEST_EFFORT, 5, _P.STANDARD, _P.STANDARD),  # bounded by the ceiling
        (_P.STANDARD, 5, _P.STANDARD, _P.STANDARD),  # so the stream it waits behind is not raised with it
        (_P.BEST_EFFORT, 1, _P.CRITICAL_TRAINING, _P.STANDARD),
        (_P.BEST_EFFORT, 2, _P.CRITICAL_TRAINING, _P.CRITICAL_TRAINING),
        (_P.STANDARD, 3, _P.CRITICAL_TRAINING, _P.CRITICAL_TRAINING),
        (_P.BEST_EFFORT, 3, _P.BEST_EFFORT, _P.BEST_EFFORT),  # a ceiling of its own class: no aging
        (_P.PRODUCTION_INFERENCE, 9, _P.CRITICAL_TRAINING, _P.PRODUCTION_INFERENCE),
    ],
)
def test_a_job_is_ordered_one_class_up_per_step_waited_up_to_the_ceiling(
    priority: PriorityClass, waited_steps: int, ceiling: PriorityClass, ordered_as: PriorityClass
) -> None:
    job = a_job("j").priority(priority).submitted(0).build()
    config = replace(AGING, class_aging_ceiling=ceiling)
    assert ordering_rank(job, waited_steps * STEP, config) == priority_rank(ordered_as)
    assert ordering_rank(job, waited_steps * STEP, replace(config, class_aging_step_ms=0)) == priority_rank(priority)


def test_an_aged_best_effort_job_goes_before_newer_standard_work_and_says_it_was_promoted_by_aging() -> None:
    node = a_node("n0").gpus(8).build()
    be = a_job("be").gpus(8).priority(PriorityClass.BEST_EFFORT).submitted(0).build()
    std = a_job("std").tenant("team-b").gpus(8).submitted(STEP).build()
    early = schedule(snapshot([node], [be, std], now_ms=STEP - MIN), AGING)
    assert [d.job_id for d in early.decisions if isinstance(d, Place)] == ["std"]
    late = schedule(snapshot([node], [be, std], now_ms=STEP + MIN), AGING)
    (placed,) = [d for d in late.decisions if isinstance(d, Place)]
    assert placed.job_id == "be"
    assert "ordered as standard: promoted by aging from best_effort after waiting 0 h 21 min" in placed.message
    (waits,) = [d for d in late.decisions if isinstance(d, Queue)]
    assert waits.job_id == "std" and "promoted by aging" not in waits.message


def test_an_aged_best_effort_job_does_not_preempt_standard_jobs_as_if_it_were_one() -> None:
    node = a_node("n0").gpus(8, (0,) * 8).build()
    busy = running(a_job("std-run").tenant("team-b").gpus(8).build(), "cluster-a", ("n0", tuple(range(8)), 1000))
    be = a_job("be").gpus(8).priority(PriorityClass.BEST_EFFORT).submitted(0).build()
    result = schedule(snapshot([node], [be], [busy], now_ms=3 * STEP), AGING)
    assert not [d for d in result.decisions if isinstance(d, Preempt)]
    (waits,) = [d for d in result.decisions if isinstance(d, Queue)]
    assert "promoted by aging" in waits.message and "its preemption rules stay best_effort" in waits.message
    # A standard job in its place would have preempted nothing either (same class), but a critical one does:
    crit = replace(be, priority_class=PriorityClass.CRITICAL_TRAINING, job_id=JobId("crit"), tenant=TenantId("c"))
    decided = schedule(snapshot([node], [crit], [busy], now_ms=3 * STEP), AGING).decisions
    assert [d.victim for d in decided if isinstance(d, Preempt)] == ["std-run"]


def test_the_policy_document_sets_the_aging_across_classes_and_never_raises_it_to_production_inference() -> None:
    config = policy_from_document("p1", {"class_aging_step_ms": 7_200_000, "class_aging_ceiling": "critical_training"})
    assert (config.class_aging_step_ms, config.class_aging_ceiling) == (7_200_000, PriorityClass.CRITICAL_TRAINING)
    with pytest.raises(ValueError, match="setting class_aging_ceiling: must be one of critical_training, standard"):
        policy_from_document("p1", {"class_aging_ceiling": "production_inference"})
