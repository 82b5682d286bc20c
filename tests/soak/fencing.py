"""Who wrote each decision: the producer id and epoch of every committed batch of ``fedsched.decisions``.

Called by the soak's run after the broker has stopped writing. Reads the broker's own segment files
with Kafka's ``kafka.tools.DumpLogSegments`` (the jars ``deploy/local/kafka.sh`` fetched), since no
client shows a record's producer: every scheduler instance opens its transactional producer when it
is elected, which gives it a new epoch (or a new producer id), so a (producer id, epoch) pair is one
leader's tenure. A batch counts once its transaction's COMMIT marker follows it; aborted ones were
never visible.

``returning_writers``: once a later writer's first committed record is in the log, a record of an
earlier writer after it is a write by a deposed leader. ``leader_stop`` ties that to a SIGSTOP: the
stopped leader's writer is the one of the last committed batch before the stop.
"""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tests.soak.chaos import LeaderStop

_BATCH = re.compile(
    r"baseOffset: (\d+) lastOffset: (\d+) .*?producerId: (-?\d+) producerEpoch: (-?\d+) .*?"
    r"isTransactional: (\w+) isControl: (\w+) .*?CreateTime: (\d+)"
)
_MARKER = re.compile(r"endTxnMarker: (\w+)")


@dataclass(frozen=True, slots=True)
class Batch:
    first: int
    last: int
    producer: int
    epoch: int
    create_ms: int

    @property
    def writer(self) -> tuple[int, int]:
        return (self.producer, self.epoch)

    def __str__(self) -> str:
        span = f"@{self.first}" if self.first == self.last else f"@{self.first}-{self.last}"
        return f"{span} by producer {self.producer} epoch {self.epoch}"


def kafka_libs() -> Path:
    cache = Path(os.environ.get("FEDSCHED_CACHE") or Path.home() / ".cache" / "fedsched")
    return cache / "kafka" / os.environ.get("KAFKA_VERSION", "3.9.2") / "libs"


async def committed_batches(kafka_dir: Path, topic: str, partition: int) -> list[Batch]:
    """The partition's committed data batches, in offset order."""
    segments = sorted((kafka_dir / "data" / f"{topic}-{partition}").glob("*.log"))
    if not segments:
        raise FileNotFoundError(f"no segment of {topic}-{partition} under {kafka_dir / 'data'}")
    process = await asyncio.create_subprocess_exec(
        "java",
        "-XX:TieredStopAtLevel=1",
        "-Xmx256m",
        "-cp",
        f"{kafka_libs()}/*",
        "kafka.tools.DumpLogSegments",
        "--deep-iteration",
        "--files",
        ",".join(str(s) for s in segments),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 300)
    if process.returncode != 0:
        raise RuntimeError(f"DumpLogSegments exited {process.returncode} on {topic}-{partition}")
    return parse(out.decode(errors="replace"))


def parse(text: str) -> list[Batch]:
    """Committed data batches from DumpLogSegments' deep iteration: the batches of an open transaction
    are held per producer until its marker says COMMIT (kept) or ABORT (dropped)."""
    committed: list[Batch] = []
    open_batches: dict[int, list[Batch]] = {}
    control: int | None = None  # producer of the control batch whose record line comes next
    for line in text.splitlines():
        match = _BATCH.search(line)
        if match:
            first, last, producer, epoch, transactional, is_control, created = match.groups()
            batch = Batch(int(first), int(last), int(producer), int(epoch), int(created))
            if is_control == "true":
                control = batch.producer
            elif transactional == "true":
                open_batches.setdefault(batch.producer, []).append(batch)
            else:
                committed.append(batch)
            continue
        marker = _MARKER.search(line)
        if marker and control is not None:
            held = open_batches.pop(control, [])
            if marker.group(1) == "COMMIT":
                committed += held
            control = None
    return sorted(committed, key=lambda b: b.first)


def returning_writers(batches: list[Batch]) -> list[str]:
    """Each committed batch whose writer had been succeeded by another earlier in the log."""
    seen: list[tuple[int, int]] = []
    found: list[str] = []
    for batch in batches:
        if batch.writer not in seen:
            seen.append(batch.writer)
        elif seen[-1] != batch.writer:
            successor = seen[seen.index(batch.writer) + 1]
            found.append(
                f"decisions {batch}: its writer had been succeeded by producer {successor[0]} epoch {successor[1]}"
            )
    return found


def leader_stop(batches: list[Batch], stop: LeaderStop) -> tuple[str, list[str]]:
    """What the log says of one SIGSTOP of the leader: a line of evidence, and the stopped leader's
    writes after its successor's first (each a violation)."""
    before = [b for b in batches if b.create_ms < stop.stopped_ms]
    if not before:
        return (f"{stop.stopped} (pid {stop.pid}) had written nothing before it was stopped", [])
    old = before[-1].writer
    successor = next((b for b in batches if b.first > before[-1].last and b.writer != old), None)
    if successor is None:
        return (f"{stop.stopped} (pid {stop.pid}, producer {old[0]} epoch {old[1]}): no other writer came after it", [])
    late = [b for b in batches if b.first > successor.first and b.writer == old]
    evidence = (
        f"{stop.stopped} (pid {stop.pid}) stopped with producer {old[0]} epoch {old[1]} (last batch {before[-1]});"
        f" {stop.successor or 'no scheduler'} led after {_seconds(stop.takeover_ms, stop.stopped_ms)};"
        f" the successor's first batch {successor}; after SIGCONT, {stop.after}"
    )
    return evidence, [f"the stopped leader wrote decisions {b} after its successor's first {successor}" for b in late]


def _seconds(later: int | None, earlier: int) -> str:
    return "?" if later is None else f"{(later - earlier) / 1000:.1f} s"
