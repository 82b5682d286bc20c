"""Stopping asyncio tasks for certain, and keeping a process's components running.

Called by every host and composition root that runs tasks: ``cancel_and_wait`` by whoever stops one,
``Supervised`` by ``fedsched up`` (each component) and the event intake (its loop). ``/healthz``
(``events.plumbing.metrics``) reads ``components_down``.

Python 3.11's ``asyncio.wait_for`` can lose a cancellation that arrives just as its inner wait
finishes (the inner result wins and the ``CancelledError`` is never raised); a loop around such a wait
then runs on, and whoever awaits the cancelled task waits forever. Hosts stop their tasks through
``cancel_and_wait``, which cancels again whatever is still running after a short while.

A host's loop rides out outages itself (``events.hosting.loop``); what ends it is a bug, an outage met
outside the loop (its start), or another instance taking over. ``Supervised`` runs such a loop until the
process stops: when it ends early it is reported down, started again after a capped, jittered backoff
(its ``restart`` first: drop connections, reload state), and counted. Each restart is one log line,
``event=component_restarted name=... attempt=... reason=...``, whose reason is one of ``Ended``. A
component fenced by another instance is not restarted (it would fence that one in turn): it stays
down, and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum
from typing import Any

from events.plumbing.backoff import Backoff
from events.plumbing.outage import transient

log = logging.getLogger("fedsched.supervisor")


async def cancel_and_wait(
    tasks: Iterable[asyncio.Future[Any]], *, grace_s: float = 0.0, again_after_s: float = 1.0
) -> None:
    """Cancel ``tasks`` and return once every one has ended; their exceptions are taken (not raised).

    ``grace_s``: first give them this long to end on their own (told to stop some other way)."""
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    if pending and grace_s > 0:
        _, pending = await asyncio.wait(pending, timeout=grace_s)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=again_after_s)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # taken, so asyncio does not log it as never retrieved


class Ended(StrEnum):
    """Why a supervised component ended while its process ran on: the reason of every restart."""

    CRASHED = "crashed"
    """It raised an error that is not an outage: a bug, most likely (logged with its traceback)."""
    UNREACHABLE = "unreachable"
    """It raised an outage's error (a dependency refused or dropped a connection) outside its own loop."""
    RETURNED = "returned"
    """It returned on its own."""
    FENCED = "fenced"
    """Another instance took over: not restarted."""


_SUPERVISED: weakref.WeakSet[Supervised] = weakref.WeakSet()


def components_down() -> list[str]:
    """The supervised components of this process that are not running now (the health check reads it)."""
    return sorted({s.name for s in list(_SUPERVISED) if s.down})


class Supervised:
    """Runs ``run()`` until ``stop`` is set, again after each early end, with backoff in between.

    ``restart``: called before each new start (a failure there is one more failed attempt).
    ``fenced``: errors after which the component must not run again. ``restart_on_return``: a return
    while not stopping is an end like a crash (otherwise it is final, as a host returns only when
    fenced). The backoff starts over once a run has lasted ``settled_s``."""

    def __init__(
        self,
        name: str,
        run: Callable[[], Awaitable[object]],
        *,
        stop: asyncio.Event,
        restart: Callable[[], Awaitable[object]] | None = None,
        fenced: Callable[[BaseException], bool] = lambda _: False,
        restart_on_return: bool = False,
        initial_s: float = 0.5,
        maximum_s: float = 30.0,
        settled_s: float = 60.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._run = run
        self._stop = stop
        self._restart = restart
        self._fenced = fenced
        self._restart_on_return = restart_on_return
        self._backoff = Backoff(initial_s, maximum_s, rng=rng)
        self._settled_s = settled_s
        self._clock = clock
        self.restarts: Counter[Ended] = Counter()
        """Restarts so far, by the reason the previous run ended."""
        self.last_end: Ended | None = None
        self.running = False
        """Inside ``run()`` now (between a start that got through and its end)."""
        self._supervising = False
        self._gone = False
        _SUPERVISED.add(self)

    @property
    def down(self) -> bool:
        """Not running while it should: between an early end and the restart that got through, or for good."""
        if self._gone:
            return True
        return self._supervising and not self.running and not self._stop.is_set()

    @property
    def attempts(self) -> int:
        return sum(self.restarts.values())

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        """Its restarts by reason and whether it runs, for ``/metrics``."""
        out: list[tuple[str, dict[str, str], float]] = [
            ("fedsched_component_restarts_total", {"component": self.name, "reason": reason.value}, float(count))
            for reason, count in sorted(self.restarts.items())
        ]
        out.append(("fedsched_component_up", {"component": self.name}, 0.0 if self.down else 1.0))
        return out

    async def run(self) -> None:
        """Until ``stop`` is set, or the component ends for good (fenced: it returns, reported down)."""
        self._supervising = True
        attempt = 0
        try:
            while not self._stop.is_set():
                began = self._clock()
                ended = await self._once()
                if ended is None:
                    return
                if self._clock() - began >= self._settled_s:
                    self._backoff.reset()
                    attempt = 0
                while True:  # wait, restart; a failed restart is waited out the same way
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), self._backoff.next_delay())
                    if self._stop.is_set():
                        return
                    attempt += 1
                    self.restarts[ended] += 1
                    log.warning("event=component_restarted name=%s attempt=%d reason=%s", self.name, attempt, ended)
                    if self._restart is None:
                        break
                    try:
                        await self._restart()
                        break
                    except Exception as error:
                        failed = self._failed(error, "restart")
                        if failed is None:
                            return
                        ended = failed
        finally:
            self._supervising = False

    async def _once(self) -> Ended | None:
        """One run; how it ended, or None when it is not to run again (the process is stopping, or it
        ended for good)."""
        self.running = True
        try:
            await self._run()
        except Exception as error:
            if self._stop.is_set():
                log.warning("event=component_failed_while_stopping name=%s error=%r", self.name, error)
                return None
            return self._failed(error, "run")
        finally:
            self.running = False
        if self._stop.is_set():
            return None
        self.last_end = Ended.RETURNED
        if not self._restart_on_return:
            self._gone = True
            log.error("event=component_stopped name=%s reason=%s restarting=false", self.name, Ended.RETURNED)
            return None
        return Ended.RETURNED

    def _failed(self, error: Exception, during: str) -> Ended | None:
        """Log an early end; its reason, or None when the component is fenced (ended for good)."""
        if self._fenced(error):
            self.last_end, self._gone = Ended.FENCED, True
            log.error(
                "event=component_stopped name=%s reason=%s restarting=false error=%r", self.name, Ended.FENCED, error
            )
            return None
        if transient(error):
            self.last_end = Ended.UNREACHABLE
            log.warning(
                "event=component_failed name=%s during=%s reason=%s error=%r", self.name, during, self.last_end, error
            )
        else:
            self.last_end = Ended.CRASHED
            log.error(
                "event=component_failed name=%s during=%s reason=%s", self.name, during, self.last_end, exc_info=error
            )
        return self.last_end


__all__ = ["Ended", "Supervised", "cancel_and_wait", "components_down"]
