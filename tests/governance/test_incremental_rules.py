"""Governance steps cost what changed, not the history: the job rules read only the jobs still open, the
failure rules only the groups with a new failure. Same outputs as a state folded at once."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.jobs import JobCancelled, JobCancelRequested, JobSucceeded
from events.catalog.types import JobId
from services.governance.core.abnormal import _streaks
from services.governance.core.config import GovConfig
from services.governance.core.failures import FailureIndex
from services.governance.core.rules import evaluate
from services.governance.core.state import GovState
from tests.governance.builders import History, a_history

pytestmark = pytest.mark.timeout(120)


def naive_streaks(failures, threshold, window_ms, *, distinct=False):
    """The rule as first written (every window rebuilt from the start): the oracle."""
    triggers = []
    quiet_until = -1
    for i, failure in enumerate(failures):
        window = [f for f in failures[: i + 1] if f[0] > failure[0] - window_ms]
        count = len({f[1] for f in window}) if distinct else len(window)
        if count >= threshold and failure[0] > quiet_until:
            triggers.append((failure, count))
            quiet_until = failure[0] + window_ms
    return triggers


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 200), st.sampled_from("abcd"), st.integers(1, 3)), max_size=40),
    st.integers(1, 5),
    st.integers(-5, 80),
    st.booleans(),
)
def test_the_sliding_window_finds_the_triggers_the_full_rescan_found(raw, threshold, window, distinct):
    failures = sorted((t, who, run, "c", "n") for t, who, run in raw)
    assert _streaks(failures, threshold, window, distinct=distinct) == naive_streaks(
        failures, threshold, window, distinct=distinct
    )


def test_a_failure_index_recomputes_only_the_groups_that_changed():
    index = FailureIndex()
    index.set_job("j1", [("g1", (1, "j1")), ("g2", (2, "j1"))])
    index.set_job("j2", [("g1", (3, "j2"))])
    seen: list[list[tuple[int, str]]] = []

    def compute(entries):
        seen.append(entries)
        return [len(entries)]

    assert index.triggers_by_group("s", compute) == [("g1", [2]), ("g2", [1])]
    assert seen == [[(1, "j1"), (3, "j2")], [(2, "j1")]] or seen == [[(2, "j1")], [(1, "j1"), (3, "j2")]]
    seen.clear()
    assert index.triggers_by_group("s", compute) == [("g1", [2]), ("g2", [1])]
    assert seen == []  # nothing changed, nothing computed
    index.set_job("j1", [("g2", (2, "j1"))])  # j1's failure in g1 is gone
    assert index.triggers_by_group("s", compute) == [("g1", [1]), ("g2", [1])]
    assert seen == [[(3, "j2")]]
    seen.clear()
    index.set_job("j2", [])
    assert index.triggers_by_group("s", compute) == [("g2", [1])]
    assert "g1" not in index.groups and "j2" not in index.of_job
    assert index.triggers_by_group("other settings", compute) == [("g2", [1])]
    assert seen == [[(2, "j1")]]  # new settings: every group again


def random_history(seed: int) -> History:
    """Jobs of a few workloads placed on a few nodes, failing, succeeding, reclaimed or cancelled, their
    facts arriving in any order (placements after their ends, reports before their placements)."""
    r = random.Random(seed)
    steps = []
    for i in range(r.randint(1, 30)):
        job, at, name = f"j{i:03d}", r.uniform(0, 600), f"w{r.randint(0, 2)}"
        steps.append(lambda h, job=job, at=at, name=name: h.submit(job, at=at, name=name))
        for run in range(1, r.randint(1, 3) + 1):
            t = at + run * r.uniform(0.1, 100)
            nodes = tuple(f"n{r.randint(0, 4)}" for _ in range(r.randint(1, 2)))
            steps.append(lambda h, job=job, t=t, run=run, nodes=nodes: h.place(job, at=t, run=run, nodes=nodes))
            if r.random() < 0.8:
                began = t + r.uniform(0, 30)
                steps.append(lambda h, job=job, began=began, run=run: h.start(job, at=began, run=run))
            x, end = r.random(), t + r.uniform(0, 40)
            if x < 0.4:
                node = r.choice(nodes)
                steps.append(lambda h, job=job, end=end, run=run, node=node: h.fail(job, at=end, run=run, node=node))
            elif x < 0.6:
                event = JobSucceeded(job_id=JobId(job), cluster="sim-1", run=run)
                steps.append(lambda h, event=event, end=end: h.add(event, end))
            elif x < 0.7:
                steps.append(lambda h, job=job, end=end, run=run: h.reclaimed(job, at=end, run=run))
        if r.random() < 0.1:
            steps.append(lambda h, job=job, at=at: h.add(JobCancelled(job_id=JobId(job), cluster="sim-1", run=0), at))
        if r.random() < 0.1:
            steps.append(lambda h, job=job, at=at: h.add(JobCancelRequested(job_id=JobId(job), requester="x"), at))
    r.shuffle(steps)
    history = a_history()
    for step in steps:
        step(history)
    return history.tick(r.uniform(600, 2000))


@pytest.mark.parametrize("seed", range(40))
def test_a_state_evaluated_step_by_step_says_what_a_state_folded_at_once_says(seed):
    history = random_history(seed)
    config = GovConfig()
    stepwise = GovState()
    rng = random.Random(seed)
    published: set[str] = set()
    for envelope in history.envelopes:
        stepwise.fold(envelope)
        if rng.random() < 0.3:  # a step: its outputs are published (governance reads them back)
            published.update(output.id for output in evaluate(stepwise, config))
            stepwise.emitted.update(published)
    at_once = GovState()
    for envelope in history.envelopes:
        at_once.fold(envelope)
    at_once.emitted.update(published)
    assert [o.id for o in evaluate(stepwise, config)] == [o.id for o in evaluate(at_once, config)]
    assert stepwise.active == {
        job_id for job_id, facts in at_once.jobs.items() if facts.terminal is None or facts.live_run() is not None
    }


def lifelike_history(seed: int) -> History:
    """Jobs as the services make them: a run is placed only after the one before ended without ending the
    job (preempted, reclaimed); the last one succeeds, fails, is reclaimed or still runs; a job cancelled
    while it waits is never placed again. Each job's records on the jobs topic keep their order, and so
    do the decisions, but the two topics interleave at random (a live host, or one re-reading the log)."""
    r = random.Random(seed)
    streams: list[list[tuple[str, tuple]]] = []  # type: ignore[type-arg]
    for i in range(r.randint(5, 30)):
        job, name = f"j{i:03d}", f"w{r.randint(0, 2)}"
        at = r.uniform(0, 600)
        jobs: list[tuple[str, tuple]] = [("submit", (job, at, name))]  # type: ignore[type-arg]
        decisions: list[tuple[str, tuple]] = []  # type: ignore[type-arg]
        runs = r.randint(0, 3)
        for run in range(1, runs + 1):
            at += r.uniform(0.1, 60)
            node = f"n{r.randint(0, 4)}"
            decisions.append(("place", (job, at, run, node)))
            at += r.uniform(0, 20)
            jobs.append(("start", (job, at, run)))
            for _ in range(r.randint(0, 3)):
                at += r.uniform(1, 10)
                jobs.append(("usage", (job, at, node, r.randint(0, 100))))
            at += r.uniform(0, 60)
            last = run == runs
            how = r.choice(("succeeded", "failed", "reclaimed", "running")) if last else r.choice(("reclaimed",))
            if how != "running":
                jobs.append((how, (job, at, run, node)))
        if (runs == 0 or how == "reclaimed") and r.random() < 0.5:
            at += r.uniform(0, 60)
            jobs.append(("cancel", (job, at)))
        streams += [jobs, decisions]
    history = a_history()
    while any(streams):
        stream = r.choice([s for s in streams if s])
        what, args = stream.pop(0)
        if what == "submit":
            history.submit(args[0], at=args[1], name=args[2])
        elif what == "place":
            history.place(args[0], at=args[1], run=args[2], nodes=(args[3],))
        elif what == "start":
            history.start(args[0], at=args[1], run=args[2])
        elif what == "usage":
            history.usage(args[0], args[3], at=args[1], node=args[2])
        elif what == "succeeded":
            history.add(JobSucceeded(job_id=JobId(args[0]), cluster="sim-1", run=args[2]), args[1])
        elif what == "failed":
            history.fail(args[0], at=args[1], run=args[2], node=args[3])
        elif what == "reclaimed":
            history.reclaimed(args[0], at=args[1], run=args[2])
        else:
            history.add(JobCancelled(job_id=JobId(args[0]), cluster="sim-1", run=0), args[1])
    return history.tick(r.uniform(600, 2000))


@pytest.mark.parametrize("seed", range(40))
def test_a_state_that_drops_settled_jobs_says_what_one_keeping_every_job_says(seed):
    history = lifelike_history(seed)
    config = GovConfig()
    dropping, keeping = GovState(), GovState(keep_settled=True)
    rng = random.Random(seed)
    envelopes = list(history.envelopes)
    for _ in range(len(envelopes) // 10):  # delivered again later (at least once): nothing may come back
        at = rng.randrange(len(envelopes))
        envelopes.insert(rng.randrange(at, len(envelopes)) + 1, envelopes[at])
    for envelope in envelopes:
        dropping.fold(envelope)
        keeping.fold(envelope)
        if rng.random() < 0.3:
            published = [o.id for o in evaluate(dropping, config)]
            assert published == [o.id for o in evaluate(keeping, config)]
            dropping.emitted.update(published)
            keeping.emitted.update(published)
    assert [o.id for o in evaluate(dropping, config)] == [o.id for o in evaluate(keeping, config)]
    assert dropping.settled and set(dropping.jobs) | dropping.settled == set(keeping.jobs)
    assert all(keeping.jobs[job].settled() for job in dropping.settled)
