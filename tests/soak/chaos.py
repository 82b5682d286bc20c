"""The soak's faults: a seeded schedule of SIGKILLs, one SIGSTOP of the scheduler leader past its session
timeout, and one stop and restart each of PostgreSQL and Kafka; and the executor that carries it out.

Called by the soak's run beside the load. ``schedule`` is pure (the plan's seed decides every choice);
``Chaos.run`` acts on the fleet (``tests.soak.components``) and the backing services
(``tests.soak.backing``) and records what it did, with wall-clock times to set against the log.

Faults run one after another, each not before its moment: a kill every ``kill_every_s`` (drawn between
its bounds) of a component drawn among the targets, and the three long faults at seeded points of the
load's window. A "scheduler-leader" or "scheduler-standby" target is resolved when it fires, from what
the schedulers say on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tests.soak.backing import Backing
from tests.soak.components import Fleet
from tests.soak.plan import SESSION_TIMEOUT_S, SoakPlan
from tests.soak.supervised import Component

TARGETS = (
    "scheduler-leader",
    "scheduler-standby",
    "api",
    "intake",
    "projections",
    "archiver",
    "governance",
    "sim",
)
LONG_FAULTS = ("stop-leader", "restart-kafka", "restart-postgres")
_TAKEOVER_TIMEOUT_S = 90.0


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    kind: str  # "kill" or one of LONG_FAULTS
    target: str = ""


def schedule(plan: SoakPlan) -> list[Fault]:
    rng = random.Random(f"chaos-{plan.seed}")
    window = plan.load_s
    faults: list[Fault] = []
    at = rng.uniform(*plan.kill_every_s)
    while at < window:
        faults.append(Fault(at, "kill", rng.choice(TARGETS)))
        at += rng.uniform(*plan.kill_every_s)
    kinds = list(LONG_FAULTS)
    rng.shuffle(kinds)
    for fraction, kind in zip((0.2, 0.45, 0.7), kinds, strict=True):
        faults.append(Fault(window * fraction, kind))
    return sorted(faults, key=lambda f: f.at_s)


@dataclass(frozen=True, slots=True)
class Outage:
    what: str
    down_ms: int
    up_ms: int

    @property
    def seconds(self) -> float:
        return (self.up_ms - self.down_ms) / 1000


@dataclass(frozen=True, slots=True)
class LeaderStop:
    """One SIGSTOP of the leader: who, when, who took over and when, and what it said once continued."""

    stopped: str
    pid: int
    stopped_ms: int
    continued_ms: int
    successor: str | None
    takeover_ms: int | None
    after: str
    """What the schedulers said once it was continued: how long both said they led, who led then."""


@dataclass
class ChaosLog:
    kills: list[tuple[int, str, str, int]] = field(default_factory=list)  # (ms, label, component, pid)
    outages: list[Outage] = field(default_factory=list)
    leader_stops: list[LeaderStop] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


class Chaos:
    def __init__(self, plan: SoakPlan, fleet: Fleet, backing: Backing) -> None:
        self.plan = plan
        self.fleet = fleet
        self.backing = backing
        self.log = ChaosLog()
        self._rng = random.Random(f"chaos-targets-{plan.seed}")

    async def run(self) -> ChaosLog:
        loop = asyncio.get_running_loop()
        started = loop.time()
        for fault in schedule(self.plan):
            await asyncio.sleep(max(0.0, started + fault.at_s - loop.time()))  # the schedule's pace
            if fault.kind == "kill":
                await self._kill(fault.target)
            elif fault.kind == "stop-leader":
                await self._stop_leader()
            elif fault.kind == "restart-kafka":
                await self._outage("kafka", self.backing.stop_kafka, self.backing.start_kafka)
            else:
                await self._outage("postgres", self.backing.stop_postgres, self.backing.start_postgres)
        return self.log

    async def _kill(self, target: str) -> None:
        component = await self._resolve(target)
        if component is None:
            self.log.skipped.append(f"kill {target}: none running")
            return
        pid = self.fleet.kill(component, target)
        if pid is not None:
            self.log.kills.append((_now_ms(), target, component.name, pid))

    async def _resolve(self, target: str) -> Component | None:
        if target in ("scheduler-leader", "scheduler-standby"):
            leaders = await self.fleet.leaders()
            schedulers = [s for s in self.fleet.role("scheduler") if s.pid is not None and not s.paused]
            wanted = leaders if target == "scheduler-leader" else [s for s in schedulers if s not in leaders]
            return wanted[0] if wanted else None
        if target == "sim":
            return self._rng.choice(self.fleet.role("sim"))
        return self.fleet.components[target]

    async def _stop_leader(self) -> None:
        leaders = await _wait_for(self.fleet.leaders, _TAKEOVER_TIMEOUT_S)
        if not leaders:
            self.log.skipped.append("stop-leader: no scheduler said it led")
            return
        leader = leaders[0]
        pid = leader.pause()
        if pid is None:
            self.log.skipped.append(f"stop-leader: {leader.name} was not running")
            return
        stopped_ms = _now_ms()
        loop = asyncio.get_running_loop()
        until = loop.time() + self.plan.leader_stop_s
        successor = await _wait_for(self.fleet.leaders, _TAKEOVER_TIMEOUT_S)  # the stopped one cannot answer
        takeover_ms = _now_ms() if successor else None
        await asyncio.sleep(max(0.0, until - loop.time()))  # stay stopped past the session timeout
        leader.resume()
        continued_ms = _now_ms()
        after = await self._leadership_after_continue()
        self.log.leader_stops.append(
            LeaderStop(
                leader.name,
                pid,
                stopped_ms,
                continued_ms,
                successor[0].name if successor else None,
                takeover_ms,
                after,
            )
        )

    async def _leadership_after_continue(self) -> str:
        """Watch who says it leads until exactly one does (at most three sessions' worth of time)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 3 * SESSION_TIMEOUT_S
        both_s = 0.0
        while True:
            looked = loop.time()
            leaders = [c.name for c in await self.fleet.leaders()]
            if len(leaders) == 1 or loop.time() > deadline:
                break
            await asyncio.sleep(0.5)  # the next look
            if len(leaders) > 1:
                both_s += loop.time() - looked
        return f"{both_s:.1f} s with two schedulers saying they led, then {leaders or 'none'} led"

    async def _outage(
        self, what: str, stop: Callable[[], Awaitable[object]], start: Callable[[], Awaitable[object]]
    ) -> None:
        down = _now_ms()
        await stop()
        await asyncio.sleep(self.plan.outage_s)  # the outage lasts this long on purpose
        await start()
        self.log.outages.append(Outage(what, down, _now_ms()))


async def _wait_for(probe: Callable[[], Awaitable[list[Component]]], timeout_s: float) -> list[Component]:
    """``probe()`` until it returns something, at most ``timeout_s``; [] if it never did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        found = await probe()
        if found or loop.time() > deadline:
            return found
        await asyncio.sleep(0.5)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
