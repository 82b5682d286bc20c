"""``fedsched audit verify``: re-execute every recorded scheduling cycle from the log and compare.

Called by the audit CLI and the demo. Calls the log ports; the work is pure (``SchedulerState`` and the
policy core).

For each ``SchedulingCycleCompleted``, in sequence order: fold every input record below the cycle's
recorded offsets (the fold does not depend on how partitions interleave), rebuild the snapshot at the
cycle's logical time, run the policy then in force, derive the decision events exactly as the
scheduler does, and compare them with the decision events the log holds under that cycle, byte for
byte, and with the digest and count the cycle record stores: all three must agree
(``services.audit.record_checks`` says why, and what else it checks in the record itself: contiguous
cycle numbers, decisions that belong to exactly one cycle). A difference is reported with the decision
id, where it is in the log, what was recorded and what the replay gives.

Speed: a replay costs mostly the policy core itself, so on a machine with several cores the cycles are
cut into contiguous chunks that worker processes (forked once the log is read and decoded) take from
one queue, in order. A worker whose next chunk starts at cycle k first folds the records below the
offsets of the cycles it skipped exactly as a single pass would, without deciding, so it decides
cycle k on the same state; the chunks' results are joined in cycle order, which gives the same report
as one pass.
"""

from __future__ import annotations

import gc
import itertools
import os
import pickle
import signal
import struct
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from events.catalog.decisions import SchedulingCycleCompleted
from events.catalog.errors import EventError
from events.log.contract import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode, encode
from events.wire.envelope import Envelope
from services.audit.record_checks import (
    At,
    Problem,
    RecordedCycle,
    RecordedDecision,
    compare,
    cycle_of,
    cycles_in_order,
    decision_problems,
    is_decision,
)
from services.scheduler.core.decide import INPUT_TOPICS, decide
from services.scheduler.core.outputs import DECISION_ENGINE, SOURCE, digest_of_bodies
from services.scheduler.core.policy import CycleMemo
from services.scheduler.core.state import SchedulerState

#: Below this many cycles per worker, a fork and the catch-up fold cost more than they save.
MIN_CYCLES_PER_WORKER = 100

Records = dict[TopicPartition, list[tuple[int, Envelope]]]
Recorded = dict[str, dict[str, list[RecordedDecision]]]
"""Decision events by cycle id, then decision id (a list: the log may hold one twice)."""


UNNAMED = "unnamed"
"""How the report names the engine of cycles recorded before engines were named (v1 cycle records)."""


@dataclass
class Difference:
    cycle_id: str
    decision_id: str
    recorded: str | None
    replayed: str | None
    engine: str = UNNAMED
    """The decision engine that recorded the cycle (``DECISION_ENGINE`` when it is this code's)."""
    at: str | None = None
    """Where the recorded event is in the log (``topic[partition]@offset``; the cycle record's for a
    difference of the cycle itself); None for a decision the replay gives and the log lacks."""
    detail: str = ""


@dataclass
class VerifyReport:
    cycles: int = 0
    decisions: int = 0
    identical_cycles: int = 0
    events_read: int = 0
    seconds: float = 0.0
    workers: int = 1  # processes that shared the cycles
    differences: list[Difference] = field(default_factory=list)
    cycles_by_engine: dict[str, int] = field(default_factory=dict)
    """Cycles re-executed, by the engine that recorded them."""
    differing_by_engine: dict[str, int] = field(default_factory=dict)
    """Cycles that differ, by the engine that recorded them: a cycle recorded by other decision code may
    differ for that reason alone (an upgrade changed a choice, a word or a figure)."""
    problems: list[Problem] = field(default_factory=list)
    """What is wrong with the record itself, replay or not: cycle numbers, decisions no cycle owns."""

    @property
    def ok(self) -> bool:
        """Every cycle re-executed identically and the record itself holds together."""
        return self.cycles > 0 and not self.differences and not self.problems

    def add(self, part: VerifyReport) -> None:
        self.cycles += part.cycles
        self.decisions += part.decisions
        self.identical_cycles += part.identical_cycles
        self.differences.extend(part.differences)
        for mine, theirs in (
            (self.cycles_by_engine, part.cycles_by_engine),
            (self.differing_by_engine, part.differing_by_engine),
        ):
            for engine, count in theirs.items():
                mine[engine] = mine.get(engine, 0) + count

    def lines(self, differences: int = 20) -> list[str]:
        """The report for a person: the figures, the cycles other decision code recorded, and the first
        ``differences`` differences."""
        rate = f", {self.events_read / self.seconds:,.0f} events/s" if self.seconds else ""
        read = (
            f"{self.events_read} events read in {self.seconds:.2f} s{rate}, "
            f"{self.workers} process{'es' if self.workers > 1 else ''}"
        )
        if self.identical_pct is None:
            return [f"nothing verified: no scheduling cycle recorded ({read})", *self._problem_lines(differences)]
        out = [
            f"{self.cycles} cycles, {self.decisions} decisions re-executed: {self.identical_pct:.2f}% identical "
            f"({read})"
        ]
        other = self.other_engines
        if other:
            differing = sum(n for e, n in self.differing_by_engine.items() if e in other)
            engines = ", ".join(f"{engine} {count}" for engine, count in other.items())
            out.append(
                f"{sum(other.values())} cycles were recorded by other decision code ({engines}; this is "
                f"{DECISION_ENGINE}): {differing} of them differ, which an upgrade alone can cause"
            )
        out += [
            f"  {d.cycle_id} {d.decision_id} at {d.at or '(not in the log)'} (recorded by {d.engine}): "
            f"{d.detail + ': ' if d.detail else ''}recorded {d.recorded!r} replayed {d.replayed!r}"
            for d in self.differences[:differences]
        ]
        return out + self._problem_lines(differences)

    def _problem_lines(self, count: int) -> list[str]:
        if not self.problems:
            return []
        return [f"the record itself has {len(self.problems)} problem(s):", *(f"  {p}" for p in self.problems[:count])]

    @property
    def other_engines(self) -> dict[str, int]:
        """Cycles recorded by decision code other than this one's, by engine."""
        return {e: n for e, n in sorted(self.cycles_by_engine.items()) if e != DECISION_ENGINE}

    @property
    def identical_pct(self) -> float | None:
        """None when no cycle was re-executed: nothing verified is no evidence either way."""
        return None if self.cycles == 0 else 100.0 * self.identical_cycles / self.cycles

    def to_json(self) -> dict[str, object]:
        return {
            "cycles": self.cycles,
            "decisions": self.decisions,
            "identical_pct": None if self.identical_pct is None else round(self.identical_pct, 4),
            "events_read": self.events_read,
            "events_per_s": round(self.events_read / self.seconds) if self.seconds else None,
            "workers": self.workers,
            "engine": DECISION_ENGINE,
            "cycles_by_engine": dict(sorted(self.cycles_by_engine.items())),
            "differing_cycles_by_engine": dict(sorted(self.differing_by_engine.items())),
            "differences": [d.__dict__ for d in self.differences[:1000]],
            "problems": [p.to_json() for p in self.problems[:1000]],
            "problem_count": len(self.problems),
        }


async def load(
    event_log: EventLog, topics: tuple[str, ...], decisions: list[RecordedDecision] | None = None
) -> Records:
    """Every decodable record of ``topics``, by partition in offset order; with ``decisions``, the decision
    events are also collected there with the bytes of their bodies as the log holds them."""
    reader = await event_log.reader()
    out: Records = {}
    try:
        for topic in topics:
            for partition in range(await event_log.partitions(topic)):
                tp = TopicPartition(topic, partition)
                items: list[tuple[int, Envelope]] = []
                async for batch in read_to_end(reader, tp, max_records=5000):
                    for record in batch:
                        try:
                            envelope = decode(record.headers, record.value)
                        except EventError:
                            continue  # unreadable records were unreadable for the scheduler too
                        items.append((record.offset, envelope))
                        if decisions is not None and is_decision(envelope, SOURCE):
                            decisions.append(RecordedDecision(At(tp, record.offset), envelope, record.value))
                out[tp] = items
    finally:
        await reader.close()
    return out


async def verify(
    event_log: EventLog,
    *,
    topics: tuple[str, ...] = INPUT_TOPICS,
    since_ms: int | None = None,
    until_ms: int | None = None,
    workers: int | None = None,
) -> VerifyReport:
    """Re-execute the recorded cycles. ``workers``: processes to share the cycles; None picks the usable
    CPUs that other processes leave idle (by the load average) when the log is long enough and this
    process runs no other Python thread (a fork copies only the calling thread); 1 replays in this
    process. The report is the same whatever the count."""
    started = time.perf_counter()
    clock = _cpu_clock()
    decisions: list[RecordedDecision] = []
    records = await load(event_log, topics, decisions)
    others = _others_busy(clock, _cpu_clock())
    report = VerifyReport(events_read=sum(len(v) for v in records.values()))
    kept, report.problems = cycles_in_order(
        RecordedCycle(envelope.data, At(tp, offset))
        for tp, items in records.items()
        for offset, envelope in items
        if isinstance(envelope.data, SchedulingCycleCompleted)
    )
    cycles = [c.record for c in kept]
    cycle_at = [str(c.at) for c in kept]
    report.problems += decision_problems(decisions, {c.cycle_id for c in cycles}, SOURCE)
    recorded: Recorded = defaultdict(dict)
    for decision in decisions:
        envelope = decision.envelope
        if envelope.source == SOURCE and ":" in envelope.id:
            recorded[cycle_of(envelope.id)].setdefault(envelope.id, []).append(decision)
    count = _workers(workers, sum(1 for c in cycles if _in_window(c, since_ms, until_ms)), others)
    if count > 1:
        parts = _replay_forked(records, cycles, cycle_at, recorded, since_ms, until_ms, count)
    else:
        parts = [_Replayer(records, cycles, cycle_at, recorded, since_ms, until_ms).replay(0, len(cycles))]
    report.workers = count
    for part in parts:
        report.add(part)
    report.seconds = time.perf_counter() - started
    return report


def fold_inputs(
    state: SchedulerState, records: Records, cursors: dict[TopicPartition, int], cycle: SchedulingCycleCompleted
) -> None:
    """Fold every record below the cycle's recorded offsets that ``cursors`` (where each partition's fold
    stands) has not folded yet: the state the cycle decided on, whatever order partitions come in."""
    for point in cycle.input_offsets:
        tp = TopicPartition(point.topic, point.partition)
        items = records.get(tp, [])
        index = cursors[tp]
        end = len(items)
        while index < end and items[index][0] < point.offset:
            state.fold(items[index][1])
            index += 1
        cursors[tp] = index


def _in_window(cycle: SchedulingCycleCompleted, since_ms: int | None, until_ms: int | None) -> bool:
    return not (
        (since_ms is not None and cycle.logical_time_ms < since_ms)
        or (until_ms is not None and cycle.logical_time_ms > until_ms)
    )


class _Replayer:
    """Walks the cycles forward: ``replay(first, stop)`` re-executes cycles ``first`` .. ``stop - 1`` (those
    in the window) on the state every cycle before them leaves, folding what it skips over with the
    same fold, in the same order, as one pass over all of them. Ranges must come in increasing order.
    The cycle memo stays across a jump: ``schedule`` decides the same with or without one, whatever
    changed since the cycle it saw last (the live scheduler's own memo has seen cycles that recorded
    nothing, so a replay never had the very same memo anyway)."""

    def __init__(
        self,
        records: Records,
        cycles: Sequence[SchedulingCycleCompleted],
        cycle_at: Sequence[str],
        recorded: Recorded,
        since_ms: int | None,
        until_ms: int | None,
    ) -> None:
        self.records, self.cycles, self.cycle_at, self.recorded = records, cycles, cycle_at, recorded
        self.since_ms, self.until_ms = since_ms, until_ms
        self.state = SchedulerState()
        self.memo = CycleMemo()
        self.cursors: dict[TopicPartition, int] = defaultdict(int)
        self.position = 0  # the next cycle whose inputs are not folded yet

    def replay(self, first: int, stop: int) -> VerifyReport:
        part = VerifyReport()
        records, cursors, state = self.records, self.cursors, self.state
        for position in range(self.position, stop):
            cycle = self.cycles[position]
            fold_inputs(state, records, cursors, cycle)
            self.position = position + 1
            if position >= first and _in_window(cycle, self.since_ms, self.until_ms):
                self._cycle(cycle, self.cycle_at[position], part)
        return part

    def _cycle(self, cycle: SchedulingCycleCompleted, at: str, part: VerifyReport) -> None:
        decided = decide(self.state, cycle.logical_time_ms, self.memo, sequence=cycle.sequence)
        config = decided.config
        replayed = [(e, encode(e).value) for e in decided.events]
        engine = cycle.engine or UNNAMED
        part.cycles += 1
        part.decisions += cycle.decision_count
        part.cycles_by_engine[engine] = part.cycles_by_engine.get(engine, 0) + 1
        differences = [
            Difference(cycle.cycle_id, m.decision_id, m.recorded, m.replayed, engine, m.at, m.detail)
            for m in compare(replayed, self.recorded.get(cycle.cycle_id, {}))
        ]
        if config.version != cycle.policy_version:
            differences.append(
                Difference(cycle.cycle_id, "policy_version", cycle.policy_version, config.version, engine, at)
            )
        if cycle.decision_count != len(replayed):
            differences.append(
                Difference(cycle.cycle_id, "decision_count", str(cycle.decision_count), str(len(replayed)), engine, at)
            )
        replayed_digest = digest_of_bodies(body for _, body in replayed)
        if cycle.decisions_digest != replayed_digest:
            # Named even when the decisions differ too: the record's digest must be its decisions'.
            differences.append(
                Difference(
                    cycle.cycle_id,
                    "decisions_digest",
                    cycle.decisions_digest,
                    replayed_digest,
                    engine,
                    at,
                    "the cycle record's digest is not the digest of the replayed decisions",
                )
            )
        if not differences:
            part.identical_cycles += 1
            return
        part.differing_by_engine[engine] = part.differing_by_engine.get(engine, 0) + 1
        part.differences.extend(differences)


def _workers(asked: int | None, cycles: int, others_busy: float | None = None) -> int:
    """``others_busy``: the cores other processes kept busy while the log was read, when measured."""
    if not hasattr(os, "fork"):
        return 1
    if asked is not None:
        return max(1, min(asked, cycles))
    if _threads() > 1:
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    # Cores other processes keep busy: a worker there would only take turns with them. The results do
    # not depend on the count.
    busy = others_busy
    if busy is None:
        try:
            # This process counts one in the load average. A one-minute average still counts a load
            # that just ended: it is the fallback where nothing was measured.
            busy = max(0.0, os.getloadavg()[0] - 1.0)
        except OSError:
            busy = 0.0
    return max(1, min(round(cpus - busy), cycles // MIN_CYCLES_PER_WORKER))


_CpuClock = tuple[float, float, float]  # seconds every CPU was busy, seconds this process ran, monotonic


def _cpu_clock() -> _CpuClock | None:
    """Where the kernel tells (Linux's /proc/stat), how much CPU the whole machine and this process used."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != b"cpu":
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    hz = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return (sum(ticks) - ticks[3] - ticks[4]) / hz, own.user + own.system, time.monotonic()


def _others_busy(before: _CpuClock | None, after: _CpuClock | None) -> float | None:
    """The cores other processes kept busy between two clocks (None when too short to tell)."""
    if before is None or after is None or after[2] - before[2] < 0.2:
        return None
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / (after[2] - before[2]))


def _threads() -> int:
    """Python threads of this process. A child forked while another one runs could find a lock that
    thread held (logging, an executor's queue) and wait forever. Native pools are left out: numpy's
    OpenBLAS starts one on import and handles forks itself, and the children call nothing else native
    that a thread of the parent may hold."""
    return threading.active_count()


def _chunks(
    cycles: Sequence[SchedulingCycleCompleted], since_ms: int | None, until_ms: int | None, workers: int
) -> list[tuple[int, int]]:
    """Contiguous ranges of the cycles, about 8 per worker, of about equal work: the cycles in the
    window weighted by their decisions (a cycle's cost grows with what it decides)."""
    weights = [(1 + c.decision_count) if _in_window(c, since_ms, until_ms) else 0 for c in cycles]
    total = sum(weights)
    count = max(1, min(8 * workers, _MAX_CHUNKS, sum(1 for w in weights if w)))
    bounds = [0]
    acc = 0
    for position, weight in enumerate(weights):
        acc += weight
        if len(bounds) < count and acc * count >= total * len(bounds):
            bounds.append(position + 1)
    bounds.append(len(cycles))
    return [(a, b) for a, b in itertools.pairwise(bounds) if a < b] or [(0, len(cycles))]


_MAX_CHUNKS = 1024  # their numbers (4 bytes each) are queued before any reader: one page of pipe buffer
_NUMBER = struct.Struct("<I")


def _replay_forked(
    records: Records,
    cycles: Sequence[SchedulingCycleCompleted],
    cycle_at: Sequence[str],
    recorded: Recorded,
    since_ms: int | None,
    until_ms: int | None,
    count: int,
) -> list[VerifyReport]:
    """This process and ``count - 1`` forked children take chunks of cycles, in order, from one queue
    (a pipe holding the chunk numbers: a read of 4 bytes takes one), so a worker slowed by a busy core
    simply takes fewer. Each child sends back its chunks' reports (pickled, through its own pipe); they
    are joined in chunk order. Chunks a failed child took are re-executed here."""
    chunks = _chunks(cycles, since_ms, until_ms, count)
    queue_out, queue_in = os.pipe()
    with os.fdopen(queue_in, "wb") as queue:
        queue.write(b"".join(_NUMBER.pack(i) for i in range(len(chunks))))
    children: list[tuple[int, BinaryIO]] = []  # pid, read end of its result pipe
    frozen_before = gc.get_freeze_count()
    gc.freeze()  # keep what is loaded out of the children's collections (no copy-on-write of it)
    try:
        for _ in range(count - 1):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: replay, send, exit without running any of the parent's clean-up
                code = 0
                try:
                    os.close(read_end)
                    done = _take_chunks(
                        queue_out, chunks, _Replayer(records, cycles, cycle_at, recorded, since_ms, until_ms)
                    )
                    with os.fdopen(write_end, "wb") as out:
                        out.write(pickle.dumps(done))
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            os.close(write_end)
            children.append((pid, os.fdopen(read_end, "rb")))
    finally:
        if not frozen_before:  # else the caller froze its heap on purpose: unfreezing would undo that
            gc.unfreeze()
    waiting = list(children)
    try:
        done = _take_chunks(queue_out, chunks, _Replayer(records, cycles, cycle_at, recorded, since_ms, until_ms))
        while waiting:
            pid, pipe = waiting[0]
            with pipe:
                payload = pipe.read()
            _, status = os.waitpid(pid, 0)
            waiting.pop(0)
            if os.waitstatus_to_exitcode(status) == 0 and payload:
                try:
                    theirs = pickle.loads(payload)
                except Exception:
                    theirs = {}
                if isinstance(theirs, dict):
                    done.update(theirs)
    finally:
        os.close(queue_out)
        for pid, pipe in waiting:  # interrupted: stop the children still running, by their id
            pipe.close()
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    replayer = None
    for number, (first, stop) in enumerate(chunks):
        if not isinstance(done.get(number), VerifyReport):  # taken by a child that failed
            if replayer is None or replayer.position > first:
                replayer = _Replayer(records, cycles, cycle_at, recorded, since_ms, until_ms)
            done[number] = replayer.replay(first, stop)
    return [done[number] for number in range(len(chunks))]


def _take_chunks(queue: int, chunks: list[tuple[int, int]], replayer: _Replayer) -> dict[int, VerifyReport]:
    done: dict[int, VerifyReport] = {}
    while True:
        taken = os.read(queue, _NUMBER.size)  # whole numbers only: the pipe holds nothing else
        if len(taken) < _NUMBER.size:
            return done
        (number,) = _NUMBER.unpack(taken)
        done[number] = replayer.replay(*chunks[number])
