"""Step 4 of the soak's recipe: everything checked once the system is quiet, and the figures filled in.

Called by ``tests.soak.run`` after every component has stopped (the broker and the database still up).
Calls the log and the database once to read them back (``history``, ``archive_check``, the read models'
usage rows), then the judgements: ``invariants`` and ``fencing`` on the log, ``replays`` (verify under a
PYTHONHASHSEED no component had, the rebuild of the read models, the archive's chain against its
signed checkpoints) and ``cost``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from events.log import open_log
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.typed import UsageHour
from tests.soak import archive_check, cost, fencing, invariants, replays
from tests.soak.archive_check import ArchiveComparison
from tests.soak.backing import Backing
from tests.soak.chaos import ChaosLog
from tests.soak.components import Fleet
from tests.soak.figures import Figures
from tests.soak.history import History
from tests.soak.invariants import Violation, violation
from tests.soak.load import Outcome


@dataclass(frozen=True, slots=True)
class Soaked:
    """What the soak did: its plan's seed, the fleet, the load's outcomes, the chaos's log."""

    seed: int
    fleet: Fleet
    outcomes: dict[str, Outcome]
    chaos: ChaosLog
    signing_key: Path | None
    checkpoints: Path


async def judge(soaked: Soaked, backing: Backing, figures: Figures) -> list[Violation]:
    history, archived, usage = await _read_back(backing)
    found, redelivered = _log_invariants(soaked.outcomes, history)
    found += await _fencing(backing, soaked.chaos, figures)
    found += await _replays(soaked, backing, history, figures)
    found += violation("audit archive differs from the log", archived.problems)
    if archived.count > len(archived.problems):
        found[-1].count = archived.count
    cost_problems, recomputed, live = cost.differences(history, usage)
    found += violation("cost differs from a recomputation from the events", cost_problems)
    _fill(figures, soaked, history, invariants.tally(soaked.outcomes, history, redelivered))
    figures.archive_equal = archived.count == 0
    figures.cost_micro = (recomputed, live)
    return found


async def _read_back(backing: Backing) -> tuple[History, ArchiveComparison, list[UsageHour]]:
    log = open_log(backing.log_url)
    await log.start()
    try:
        history = await History.read(log)
        pool = await asyncpg.create_pool(backing.dsn, min_size=1, max_size=2)
        try:
            return history, await archive_check.compare(log, pool), await ReadModels(pool).usage_hours()
        finally:
            await pool.close()
    finally:
        await log.close()


def _log_invariants(outcomes: dict[str, Outcome], history: History) -> tuple[list[Violation], int]:
    ends, redelivered = invariants.runs_end_at_most_once(history)
    found = invariants.every(
        [
            invariants.one_job_per_request(outcomes, history),
            invariants.runs_placed_once(history),
            ends,
            invariants.jobs_ended(outcomes, history),
            invariants.cycles_contiguous(history),
            violation("unreadable record in the log", history.unreadable),
        ]
    )
    return found, redelivered


async def _fencing(backing: Backing, chaos: ChaosLog, figures: Figures) -> list[Violation]:
    batches = await fencing.committed_batches(backing.kafka_dir, "fedsched.decisions", 0)
    zombie = fencing.returning_writers(batches)
    for stop in chaos.leader_stops:
        evidence, late = fencing.leader_stop(batches, stop)
        figures.leader_stops.append(evidence)
        zombie += late
    return violation("decision written by a deposed leader (fencing)", zombie)


async def _replays(soaked: Soaked, backing: Backing, history: History, figures: Figures) -> list[Violation]:
    cycles = sum(1 for d in history.decisions if d.sequence is not None)
    hash_seed = _unused_hash_seed(soaked.seed, soaked.fleet.hash_seeds_used())
    verified = await replays.verify(backing.log_url, hash_seed)
    found = violation(f"audit verify under PYTHONHASHSEED={hash_seed}", verified.problems(cycles))
    rebuilt = await replays.rebuild(backing.log_url, backing.dsn)
    if rebuilt.exit_code != 0:
        found += violation("read models differ from a rebuild from offset 0", rebuilt.differing + rebuilt.rows)
    chain = await replays.chain(backing.dsn, soaked.signing_key, soaked.checkpoints)
    found += violation("audit chain --verify against the signed checkpoints", chain)
    figures.cycles = cycles
    figures.verify_pct = verified.identical_pct
    figures.read_models_equal = rebuilt.exit_code == 0
    figures.chain_holds = not chain
    return found


def _fill(figures: Figures, soaked: Soaked, history: History, tally: invariants.Tally) -> None:
    figures.answered = sum(1 for o in soaked.outcomes.values() if o.job_id is not None)
    for outcome in soaked.outcomes.values():
        figures.retried_calls.update(outcome.retried)
    figures.kills = soaked.fleet.kills
    for exit_ in soaked.fleet.unplanned():
        figures.unplanned_exits[exit_.name] += 1
    figures.outages = [f"{o.what} down {o.seconds:.1f} s" for o in soaked.chaos.outages]
    figures.lost, figures.doubled, figures.redelivered = tally.lost, tally.doubled, tally.redelivered
    figures.placements = sum(len(p) for p in history.placements.values())
    figures.runs_ended = len(history.run_ends)
    figures.jobs_ended = len(history.job_ends)
    figures.log_records = sum(history.records.values())


def _unused_hash_seed(seed: int, used: set[int]) -> int:
    rng = random.Random(f"verify-{seed}")
    while True:
        candidate = rng.randrange(1, 2**32 - 1)
        if candidate not in used:
            return candidate
