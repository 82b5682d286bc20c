"""The soak's invariants over what the load asked and what the log holds. Pure: facts in, violations out.

Called by the soak's run with the load's outcomes (``tests.soak.load``) and the log's history
(``tests.soak.history``). Each check returns ``Violation`` s that name the invariant, how many broke
it, and evidence: request ids, jobs and runs, and the positions of the records in the log.

- each request id gives exactly one job (none: lost; more: doubled), the one the API answered;
- each run is placed once, runs are placed in turn (a new run only after the previous one was stopped
  by the scheduler), and ends at most once (two different events ending one run: doubled; the same
  event delivered again is counted, not failed: delivery is at least once);
- every job submitted has ended by the time the system quiesced;
- scheduling cycle numbers are contiguous from 0 in log order, and every decision belongs to the cycle
  whose record follows it, which counts it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from events.catalog.lifecycle import REQUEUED, RUN_END_OF
from tests.soak.history import History
from tests.soak.load import Outcome

EXAMPLES = 8
_REQUEUE_EVENTS = {cls.__name__ for cls, end in RUN_END_OF.items() if end in REQUEUED}  # JobPreempted, JobReclaimed


@dataclass
class Violation:
    invariant: str
    count: int
    evidence: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        more = f" (first {EXAMPLES} of {self.count})" if self.count > EXAMPLES else ""
        return [f"{self.invariant}: {self.count}{more}", *(f"    {e}" for e in self.evidence[:EXAMPLES])]


def violation(invariant: str, evidence: list[str]) -> list[Violation]:
    return [Violation(invariant, len(evidence), evidence)] if evidence else []


@dataclass(frozen=True, slots=True)
class Tally:
    """Figures the checks find on the way: for the report, not judged."""

    lost: int
    doubled: int
    redelivered: int


def one_job_per_request(outcomes: Mapping[str, Outcome], history: History) -> list[Violation]:
    lost, doubled, wrong = [], [], []
    for request_id, outcome in sorted(outcomes.items()):
        jobs = sorted({job for job, _ in history.submitted.get(request_id, [])})
        rejected = history.rejected.get(request_id, [])
        if not jobs:
            why = f"; rejected at {rejected[0].at}" if rejected else ""
            lost.append(f"{outcome.describe()}; no JobSubmitted in the log{why}")
        elif len(jobs) > 1:
            places = [seen.at for _, seen in history.submitted[request_id]]
            doubled.append(f"{request_id}: jobs {jobs} at {places}")
        elif outcome.job_id is not None and jobs[0] != outcome.job_id:
            wrong.append(f"{outcome.describe()}; the log's job is {jobs[0]}")
        elif outcome.job_id is None:
            wrong.append(f"{outcome.describe()}; yet the log has job {jobs[0]}")
    return [
        *violation("request id gave no job (lost)", lost),
        *violation("request id gave more than one job (doubled)", doubled),
        *violation("the job answered is not the job in the log", wrong),
    ]


def runs_placed_once(history: History) -> list[Violation]:
    twice, skipped, unstopped = [], [], []
    runs_of: dict[str, list[int]] = {}
    for (job, run), placed in sorted(history.placements.items()):
        runs_of.setdefault(job, []).append(run)
        if len(placed) > 1:
            twice.append(f"{job} run {run}: " + ", ".join(f"{p.seen.at} ({p.cycle_id}, {p.cluster})" for p in placed))
    for job, runs in sorted(runs_of.items()):
        if runs != list(range(1, len(runs) + 1)):
            skipped.append(f"{job}: runs placed {runs}")
        for run in runs[1:]:
            ends = {seen.type for seen in history.run_ends.get((job, run - 1), [])}
            if not ends & _REQUEUE_EVENTS:
                later = history.placements[(job, run)][0].seen.at
                unstopped.append(
                    f"{job} run {run} placed at {later} though run {run - 1} ended by {sorted(ends) or 'nothing'}"
                )
    return [
        *violation("run placed more than once (doubled)", twice),
        *violation("runs not placed in turn from 1", skipped),
        *violation("new run placed while the previous one was not stopped by the scheduler", unstopped),
    ]


def runs_end_at_most_once(history: History) -> tuple[list[Violation], int]:
    """The violations, and how many end records were the same event delivered again."""
    twice, unplaced = [], []
    redelivered = 0
    for (job, run), ends in sorted(history.run_ends.items()):
        distinct = {seen.id: seen for seen in ends}
        redelivered += len(ends) - len(distinct)
        if len(distinct) > 1:
            twice.append(f"{job} run {run}: " + ", ".join(f"{s.type} {s.id} at {s.at}" for s in distinct.values()))
        if (job, run) not in history.placements:
            unplaced.append(f"{job} run {run}: ended at {ends[0].at} but never placed")
    return [
        *violation("run ended more than once (doubled)", twice),
        *violation("run ended that was never placed", unplaced),
    ], redelivered


def jobs_ended(outcomes: Mapping[str, Outcome], history: History) -> list[Violation]:
    unfinished = []
    for outcome in outcomes.values():
        job = outcome.job_id
        if job is None or history.job_ends.get(job):
            continue
        runs = sorted(run for (j, run) in history.placements if j == job)
        ends = sorted(run for (j, run) in history.run_ends if j == job)
        where = f" (last on {history.placements[(job, runs[-1])][0].cluster})" if runs else ""
        unfinished.append(
            f"{outcome.draw.request_id} -> {job}: runs placed {runs}{where}, runs ended {ends}, no end of the job"
        )
    return violation("job submitted but not ended when the system quiesced", unfinished)


def cycles_contiguous(history: History) -> list[Violation]:
    broken, orphans, miscounted = [], [], []
    expected = 0
    pending: list[str] = []  # decisions since the last cycle record: "cycle id|offset"
    for record in history.decisions:
        if record.sequence is None:
            pending.append(f"{record.cycle_id}|{record.offset}|{record.type}")
            continue
        if record.sequence != expected:
            broken.append(f"{record.id} at offset {record.offset}: sequence {record.sequence}, expected {expected}")
        expected = record.sequence + 1
        strangers = [p for p in pending if p.split("|")[0] != record.cycle_id]
        orphans += [f"{p} precedes the record of {record.cycle_id} at offset {record.offset}" for p in strangers]
        published = len(pending) + history.cycle_cancels[record.cycle_id]
        if record.decision_count != published:
            miscounted.append(
                f"{record.id} at {record.offset} counts {record.decision_count}, {published} were published"
            )
        pending = []
    orphans += [f"{p}: no cycle record follows it" for p in pending]
    return [
        *violation("cycle sequence numbers not contiguous from 0", broken),
        *violation("decision outside the cycle whose record follows it", orphans),
        *violation("cycle record's decision count differs from its decisions", miscounted),
    ]


def tally(outcomes: Mapping[str, Outcome], history: History, redelivered_ends: int) -> Tally:
    jobs_per_request = Counter(len({job for job, _ in history.submitted.get(r, [])}) for r in outcomes)
    doubled_runs = sum(1 for placed in history.placements.values() if len(placed) > 1)
    doubled_ends = sum(1 for ends in history.run_ends.values() if len({s.id for s in ends}) > 1)
    submissions = sum(len(s) - len({seen.id for _, seen in s}) for s in history.submitted.values())
    return Tally(
        lost=jobs_per_request[0],
        doubled=sum(n for k, n in jobs_per_request.items() if k > 1) + doubled_runs + doubled_ends,
        redelivered=redelivered_ends + submissions,
    )


def every(checks: Iterable[list[Violation]]) -> list[Violation]:
    return [v for found in checks for v in found]
