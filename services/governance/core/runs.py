"""How a job's run events change what governance knows of its runs, and the parts of a run that spreads
over clusters.

Called by ``services.governance.core.state`` (its fold hands each placement, addition, start, run end,
close and reclaim request of a job here, with the job's facts and the budgets' ledger); the facts are
``services.governance.core.facts``. Pure: no I/O, no clock.

A step of a run's lifecycle is taken once (a run's first placement, start and end, and the job's final
status with it, as the scheduler takes them); a fact about a run not placed yet, or about a spread run's
part not opened yet, is held once for it (``JobFacts.early``) and folded when it comes.

A run in one cluster is one ``RunFacts``: what it holds (nodes, GPUs, NPUs, replicas and those added
later), when it was placed, started and ended, its recent usage samples. A run of a job that spreads
(``events.catalog.lifecycle.spreads``: an inference service with ``spread_clusters`` above 1) has a part
per cluster, each a ``RunFacts`` of that cluster's replicas alone (``RunFacts.parts``: the ``JobPlaced``'s
cluster first, then each cluster a ``JobReplicasAdded`` opened). A part's end (its cluster's run-end event)
ends that part's time and nothing else; the run ends with the scheduler's ``JobRunClosed``. What a spread
run holds is in its parts (``holdings``), never in the run's own counts, which stay empty; its
``replicas`` is the next replica number of the run (numbers run on across its parts), so that a repeated
addition is known.

A spread run's times are its events' own times, where the rest of governance reads the log's clock: its
parts are opened by the scheduler and ended by several connectors, on two topics a reader meets in any
interleaving, and what each part held must not depend on which was read first (the scheduler counts a
budget from the events' own times too). The one-cluster run keeps the log's clock, as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from events.catalog.base import Event
from events.catalog.budget_windows import HeldLedger
from events.catalog.decisions import JobPlaced, JobReclaimRequested, JobReplicasAdded, JobRunClosed, ReplicaPlacement
from events.catalog.jobs import JobFailed, JobStarted
from events.catalog.lifecycle import (
    RUN_END_EVENTS,
    RUN_END_OF,
    RunEndEvent,
    awaits_verdict,
    ends_job,
    ends_part,
    ends_run,
    final_status,
)
from services.governance.core.facts import JobFacts, RunFacts, Stamp


def opened(run: int, cluster: str, replicas: Sequence[ReplicaPlacement], at_ms: int) -> RunFacts:
    """A run (or a part) that holds ``replicas`` in ``cluster`` from ``at_ms``."""
    nodes = tuple(dict.fromkeys(r.node for r in replicas))
    return RunFacts(run, cluster, nodes, _milli(replicas), at_ms, replicas=len(replicas), npus=_npus(replicas))


def grow(holding: RunFacts, replicas: Sequence[ReplicaPlacement], at_ms: int) -> None:
    """``holding`` holds ``replicas`` more from ``at_ms``."""
    milli = _milli(replicas)
    holding.replicas += len(replicas)
    holding.nodes = tuple(dict.fromkeys((*holding.nodes, *(r.node for r in replicas))))
    holding.gpu_milli += milli
    holding.npus += _npus(replicas)
    holding.grown = (*holding.grown, (at_ms, milli))


def split(run: RunFacts) -> None:
    """Make ``run`` a spread run (once): what it holds becomes its first part's, in the cluster it was
    placed in. A run placed (and grown) before its job's submission was read is rebuilt from those
    events' own times (``undecided``); one placed after it is split as it is placed."""
    if run.parts:
        return
    if run.undecided:
        (placed_ms, replicas), *added = run.undecided
        first = opened(run.run, run.cluster, replicas, placed_ms)
        for at_ms, more in added:
            grow(first, more, max(at_ms, placed_ms))
        run.placed_ms = placed_ms
    else:
        first = RunFacts(run.run, run.cluster, run.nodes, run.gpu_milli, run.placed_ms, replicas=run.replicas)
        first.grown, first.npus = run.grown, run.npus
    first.started_ms, first.samples, first.reclaim_rule = run.started_ms, run.samples, run.reclaim_rule
    run.parts = {run.cluster: first}
    run.nodes, run.gpu_milli, run.npus, run.grown, run.samples, run.reclaim_rule = (), 0, 0, (), [], None
    run.undecided = ()


def _milli(replicas: Sequence[ReplicaPlacement]) -> int:
    return sum(len(r.gpu_indices) * r.gpu_milli_each for r in replicas)


def _npus(replicas: Sequence[ReplicaPlacement]) -> int:
    return sum(len(r.npu_indices) for r in replicas)


def submitted(facts: JobFacts) -> None:
    """The job's submission is read (``facts.spec`` set): runs placed before it are split if it spreads."""
    assert facts.spec is not None
    for run in facts.runs.values():
        if facts.spec.spread:
            split(run)
        run.undecided = ()


def placed(facts: JobFacts, held: HeldLedger, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, JobPlaced)
    if e.run in facts.runs:
        return
    spread = facts.spec is not None and facts.spec.spread
    run = facts.runs[e.run] = opened(e.run, e.cluster, e.replicas, at[0] if spread else t)
    if spread:
        split(run)
    elif facts.spec is None:
        run.undecided = ((at[0], e.replicas),)
    _replay(facts, held, e.run)


def _replay(facts: JobFacts, held: HeldLedger, run: int) -> None:
    """Fold again the facts held for ``run`` (its placement, or a part's opening, came): those that still
    wait (for another part's opening) are held again."""
    for early, t, at in facts.early.pop(run, []):
        if isinstance(early, JobStarted):
            started(facts, held, early, t, at)
        elif isinstance(early, RUN_END_EVENTS):
            ended(facts, held, early, t, at)
        elif isinstance(early, JobReclaimRequested):
            reclaim_requested(facts, held, early, t, at)
        elif isinstance(early, JobRunClosed):
            closed(facts, held, early, t, at)


def replicas_added(facts: JobFacts, held: HeldLedger, e: Event, t: int, at: Stamp) -> None:
    """The run holds more: once per addition (a repeat names replica numbers it holds), while it lives. In a
    cluster other than the run's placement (a spread run), the addition opens the run's part there, or
    grows it."""
    assert isinstance(e, JobReplicasAdded)
    run = facts.runs.get(e.run)
    if run is None or run.ended_ms is not None:
        return
    # Only a spread run is added to elsewhere: before the submission is read, that says it spreads.
    elsewhere = e.cluster != run.cluster and (facts.spec is None or facts.spec.spread)
    if not (run.parts or elsewhere or (facts.spec is not None and facts.spec.spread)):
        if e.cluster == run.cluster and e.replicas[0].replica == run.replicas:
            grow(run, e.replicas, t)
            if facts.spec is None:
                run.undecided = (*run.undecided, (at[0], e.replicas))
        return
    # A spread run's replica numbers run on across its parts (those of an ended part are not reused): a
    # repeat names numbers below the next one.
    if e.replicas[0].replica < run.replicas:
        return
    split(run)
    part = run.parts.get(e.cluster)
    if part is not None and part.ended_ms is not None:
        return  # the scheduler never opens a part again where the run's part ended
    run.replicas = 1 + max(r.replica for r in e.replicas)
    if part is None:
        run.parts[e.cluster] = opened(e.run, e.cluster, e.replicas, at[0])
        _replay(facts, held, e.run)
    else:
        grow(part, e.replicas, max(at[0], part.placed_ms))


def _spread(facts: JobFacts, run: RunFacts) -> bool:
    """Whether ``run`` lives in parts (split, if its job's submission says so and it is not yet)."""
    if not run.parts and facts.spec is not None and facts.spec.spread:
        split(run)
    return bool(run.parts)


def started(facts: JobFacts, held: HeldLedger, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, JobStarted)
    run = facts.runs.get(e.run)
    if run is None:
        _hold(facts, e, t, at)
    elif _spread(facts, run):
        part = run.parts.get(e.cluster)
        if part is None:
            if run.live:
                _hold(facts, e, t, at)  # read before the addition that opened its part
            return
        if part.started_ms is None:
            part.started_ms = max(at[0], part.placed_ms)
        # The run started with its first part, whichever part's start is read first.
        run.started_ms = part.started_ms if run.started_ms is None else min(run.started_ms, part.started_ms)
    elif run.started_ms is None:
        run.started_ms = t


def ended(facts: JobFacts, held: HeldLedger, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, RUN_END_EVENTS)
    run = facts.runs.get(e.run)
    spread = (facts.spec is not None and facts.spec.spread) or (run is not None and bool(run.parts))
    if ends_part(e, spread):
        if run is None:
            _hold(facts, e, t, at)  # a part's end ends no job: kept for the run's placement
        else:
            _spread(facts, run)
            _part_ended(facts, held, run, e, t, at)
        return
    how = RUN_END_OF[type(e)]
    final = final_status(how)
    if awaits_verdict(e, facts.spec.application_retries if facts.spec is not None else 0):
        final = None  # the scheduler's verdict ends the job, or queues it again (``JobRetriesExhausted``)
    if not ends_run(e):  # a job cancelled before it ever ran: it ends, and no run does
        facts.terminal = facts.terminal or final
        return
    if run is None:
        if _hold(facts, e, t, at) and final is not None:
            facts.terminal = final
        return
    if run.ended_ms is not None:
        return  # a run's first end is final, as the scheduler takes it
    if final is not None:
        facts.terminal = final
    _end(facts, held, run, e, t)


def _end(facts: JobFacts, held: HeldLedger, holding: RunFacts, e: RunEndEvent, t: int) -> None:
    """``holding`` (a run, or a spread run's part) ends at ``t``: the GPU time it held goes to the ledger."""
    holding.ended_ms, holding.ended_how = t, RUN_END_OF[type(e)]
    if facts.spec is not None:
        for milli, since in holding.held_pieces():
            if milli and since < t:
                held.add(facts.spec.tenant, milli, since, t)
    # The usage samples serve the rules on live runs only (idle, straggling gang); kept for every run
    # ever ended, up to MAX_SAMPLES each, they were most of what the state's history cost in memory.
    holding.samples = []
    if isinstance(e, JobFailed):
        holding.fail_reason = e.reason.value
        holding.fail_node = e.node or (holding.nodes[0] if holding.nodes else None)


def _part_ended(facts: JobFacts, held: HeldLedger, run: RunFacts, e: RunEndEvent, t: int, at: Stamp) -> None:
    """A spread run's part in ``e.cluster`` ended (at the event's own time): its time and nothing else."""
    part = run.parts.get(e.cluster or "")  # (a cancellation names its part's cluster)
    if part is None:
        if run.live:
            _hold(facts, e, t, at)  # read before the addition that opened the part
        return
    if part.ended_ms is None:  # a part's first end is final
        _end(facts, held, part, e, max(at[0], part.placed_ms))


def closed(facts: JobFacts, held: HeldLedger, e: Event, t: int, at: Stamp) -> None:
    """The scheduler closed a spread run: the run ends (as its last part did), and the job with it when
    that is final. A part whose end is not read yet holds on until it is (it ends at its own time)."""
    assert isinstance(e, JobRunClosed)
    run = facts.runs.get(e.run)
    if run is None:
        _hold(facts, e, t, at)
        return
    split(run)
    if run.ended_ms is not None:
        return
    run.ended_ms, run.ended_how, run.closed_in = max(at[0], run.placed_ms), e.outcome, e.cluster
    if e.reason is not None:
        run.fail_reason, run.fail_node = e.reason.value, e.node
    if ends_job(e, facts.spec.application_retries if facts.spec is not None else 0, spread=True):
        facts.terminal = final_status(e.outcome)
    facts.early.pop(e.run, None)  # no part opens in a closed run: what waited for one is about nothing


def _hold(facts: JobFacts, e: JobStarted | RunEndEvent | JobReclaimRequested | JobRunClosed, t: int, at: Stamp) -> bool:
    """Keep a fact about a run not placed yet (or a part not opened yet) for it, once; whether it was not
    held already."""
    kept = facts.early.setdefault(e.run, [])
    if any(prior == e for prior, _, _ in kept):
        return False
    kept.append((e, t, at))
    return True


def reclaim_requested(facts: JobFacts, held: HeldLedger, e: Event, t: int, at: Stamp) -> None:
    assert isinstance(e, JobReclaimRequested)
    run = facts.runs.get(e.run)
    if run is None:
        _hold(facts, e, t, at)  # read before its run's placement: for the placement, as a start or end is
        return
    holding = run.parts.get(e.cluster) if _spread(facts, run) else run
    if holding is None:
        if run.live:
            _hold(facts, e, t, at)  # a part's reclaim read before the addition that opened it
    elif holding.reclaim_rule is None:
        holding.reclaim_rule = e.rule


__all__ = [
    "closed",
    "ended",
    "grow",
    "opened",
    "placed",
    "reclaim_requested",
    "replicas_added",
    "split",
    "started",
    "submitted",
]
