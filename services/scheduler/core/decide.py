"""One scheduling cycle's decision, made the same way everywhere it is made.

Called by the scheduler host (live), ``fedsched audit verify`` (replay of every recorded cycle) and the
benchmarks (``fedsched bench verify`` writes its log with it). Pure: the state is folded by the caller
(``SchedulerState.fold``, record by record as the log gives them), and time comes in as ``now_ms``.

The recipe, after the caller folded every input record below the cycle's offsets:
 1. snapshot the state at ``now_ms`` (the cycle's logical time);
 2. ``schedule`` it under the policy in force (the last valid ``PolicyConfigured`` folded);
 3. turn the core's decisions into events, with ids derived from the cycle's sequence number;
 4. ``Decided.record(offsets)``: the ``SchedulingCycleCompleted`` that names the inputs, the time, the
    policy version, the engine and the digest of those events (the host appends it with them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from events.catalog.topics import DECISIONS, GOVERNANCE, INVENTORY, JOBS, PROFILES
from events.wire.envelope import Envelope
from services.scheduler.core.outputs import cycle_record, decision_events
from services.scheduler.core.policy import CycleMemo, CycleResult, FleetSnapshot, PolicyConfig, schedule
from services.scheduler.core.state import SchedulerState

INPUT_TOPICS = (INVENTORY.name, JOBS.name, DECISIONS.name, GOVERNANCE.name, PROFILES.name)
"""Every topic whose records the scheduler folds, in the order a follower reads them."""

SAME_INSTANT_LIMIT = 64
"""For a replay in simulated time (the timed simulator, ``audit whatif``): cycles one moment may run in a
row, each after a preemption freed room (a bound, not a tuning). A preempted job stops at once there, so
the job that asked for the room is placed at that moment."""


@dataclass(frozen=True, slots=True)
class Decided:
    """What one cycle decided: the core's result and its events, in the order they are published."""

    sequence: int
    config: PolicyConfig
    result: CycleResult
    events: list[Envelope]

    def record(self, offsets: Sequence[tuple[str, int, int]]) -> Envelope:
        """The cycle record for inputs folded up to ``offsets`` (topic, partition, next offset)."""
        return cycle_record(self.sequence, offsets, self.result, self.events)


@dataclass(slots=True)
class _Cycle:
    """One cycle's work in progress, filled in by the steps of ``RECIPE`` in turn."""

    state: SchedulerState
    now_ms: int
    memo: CycleMemo | None
    sequence: int
    config: PolicyConfig | None = None
    snapshot: FleetSnapshot | None = None
    result: CycleResult | None = None
    events: list[Envelope] | None = None


def _snapshot(cycle: _Cycle) -> None:
    cycle.config = cycle.state.policy_config()
    cycle.snapshot = cycle.state.snapshot(cycle.now_ms)


def _schedule(cycle: _Cycle) -> None:
    assert cycle.snapshot is not None
    cycle.result = schedule(cycle.snapshot, cycle.config, cycle.memo)


def _decision_events(cycle: _Cycle) -> None:
    assert cycle.result is not None
    cycle.events = decision_events(cycle.state, cycle.result, cycle.sequence)


RECIPE: tuple[tuple[str, Callable[[_Cycle], None]], ...] = (
    ("snapshot", _snapshot),
    ("schedule", _schedule),
    ("decision events", _decision_events),
)
"""Steps 1 to 3, by name (``fedsched bench verify`` times each one)."""


def decide(
    state: SchedulerState,
    now_ms: int,
    memo: CycleMemo | None = None,
    *,
    sequence: int | None = None,
    step_done: Callable[[str], None] | None = None,
) -> Decided:
    """Steps 1 to 3 of the recipe. ``sequence``: the cycle's number (the state's next one unless a
    replay names the recorded one); ``memo``: the caller's, kept from cycle to cycle (the decisions are
    the same without it); ``step_done``: told each step's name as it ends (a benchmark's clock)."""
    cycle = _Cycle(state, now_ms, memo, state.cycles if sequence is None else sequence)
    for name, step in RECIPE:
        step(cycle)
        if step_done is not None:
            step_done(name)
    assert cycle.config is not None and cycle.result is not None and cycle.events is not None
    return Decided(cycle.sequence, cycle.config, cycle.result, cycle.events)


__all__ = ["INPUT_TOPICS", "RECIPE", "SAME_INSTANT_LIMIT", "Decided", "decide"]
