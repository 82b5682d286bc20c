"""The cycle memo counts running jobs by a snapshot's ``RunningDelta`` when the delta fits what it counted.

The state's deltas are checked against fresh memos over random histories in
``tests/unit/scheduler_service/test_incremental_snapshot.py``; here, the memo's side: a fitting delta is
used (so the cost is per change), a delta that does not fit is ignored (so the result stays that of a
fresh count).
"""

from __future__ import annotations

from dataclasses import replace

from services.scheduler.core.policy import CycleMemo, schedule
from services.scheduler.core.policy.model import FleetSnapshot, RunningDelta, RunningJob
from tests.scheduler.builders import a_job, a_node, running, snapshot

NODES = [a_node("n1").model("A100").build(), a_node("n2").model("H100").build()]


def _run(job_id: str, tenant: str, node: str) -> RunningJob:
    return running(a_job(job_id).tenant(tenant).gpus(1).build(), "cluster-a", (node, (0,), 1000))


def _counts(snap: FleetSnapshot, memo: CycleMemo) -> dict[tuple[object, ...], int]:
    schedule(snap, None, memo)
    return {key: n for key, n in memo.group_counts().items() if n}


def _fresh(snap: FleetSnapshot) -> dict[tuple[object, ...], int]:
    return _counts(replace(snap, running_delta=None), CycleMemo())


def test_a_fitting_delta_is_used_instead_of_comparing_every_running_job() -> None:
    a, b, c = _run("a", "t1", "n1"), _run("b", "t2", "n2"), _run("c", "t1", "n2")
    memo = CycleMemo()
    first = snapshot(NODES, running_jobs=[a, b])
    _counts(first, memo)
    second = replace(
        snapshot(NODES, running_jobs=[a, c]), running_delta=RunningDelta(first.running, added=(c,), removed=(b,))
    )
    assert _counts(second, memo) == _fresh(second)
    assert memo.counted is second.running
    # The memo takes a fitting delta at its word (that is what makes it cheap): one that hides a change
    # it cannot see without comparing every job shows in the counts, which proves the delta was used.
    hidden = replace(snapshot(NODES, running_jobs=[a, b]), running_delta=RunningDelta(second.running))
    assert _counts(hidden, memo) == _fresh(second) != _fresh(hidden)


def test_a_delta_that_does_not_fit_what_was_counted_is_ignored() -> None:
    a, b, c = _run("a", "t1", "n1"), _run("b", "t2", "n2"), _run("c", "t1", "n2")
    first = snapshot(NODES, running_jobs=[a, b])
    target = snapshot(NODES, running_jobs=[a, c])
    stale_copy = tuple(list(first.running))  # equal, but not the tuple the memo counted
    assert stale_copy is not first.running
    unfit = [
        RunningDelta(stale_copy, added=(c,), removed=(b,)),
        RunningDelta(first.running, added=(c,), removed=(_run("b", "t2", "n2"),)),  # removes an object not held
        RunningDelta(first.running, added=(a, c), removed=(b,)),  # adds one already held
        RunningDelta(first.running, added=(c, c), removed=(b,)),  # adds one twice
        RunningDelta(first.running, added=(), removed=(b,)),  # the count does not come out right
    ]
    for delta in unfit:
        memo = CycleMemo()
        _counts(first, memo)
        given = replace(target, running_delta=delta)
        assert _counts(given, memo) == _fresh(target)
        assert memo.counted is given.running


def test_a_delta_without_a_memo_or_after_a_new_fleet_layout_changes_nothing() -> None:
    a, b = _run("a", "t1", "n1"), _run("b", "t2", "n2")
    first = snapshot(NODES, running_jobs=[a])
    second = replace(snapshot(NODES, running_jobs=[a, b]), running_delta=RunningDelta(first.running, added=(b,)))
    assert schedule(second) == schedule(replace(second, running_delta=None))
    memo = CycleMemo()
    _counts(first, memo)
    relaid = replace(second, nodes=(*NODES, a_node("n3").model("A100").build()))  # a rebuild of the fleet
    assert _counts(relaid, memo) == _fresh(relaid)
