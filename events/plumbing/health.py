"""Whether a serving process can reach its dependencies, checked in the background.

Called by the API (``services.api.server``): its calls answer UNAVAILABLE while the event log or the
database is away, and ``/healthz`` must say so too. A probe per health request would put a query on
the database for every load balancer's poll, so the checks run here every ``every_s`` (one round trip
each, bounded by ``timeout_s``) and ``/healthz`` reads the last answer through ``events.plumbing.outage``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping

from events.plumbing.outage import watch
from events.plumbing.tasks import cancel_and_wait

log = logging.getLogger("fedsched.health")

Probe = Callable[[], Awaitable[object]]


class DependencyProbe:
    """Runs named probes (``log``, ``postgres``) every ``every_s``; ``unreachable`` names those that failed
    their latest run. A state change is logged once, and passed to ``on_change``."""

    def __init__(
        self,
        probes: Mapping[str, Probe],
        *,
        every_s: float = 1.5,
        timeout_s: float = 2.0,
        on_change: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        self._probes = dict(probes)
        self.every_s = every_s
        self.timeout_s = timeout_s
        self._on_change = on_change
        self._failing: list[str] = []
        self._announced: list[str] = []  # what on_change was last told (nothing failing, to start with)
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        watch(self)

    def unreachable(self) -> list[str]:
        return list(self._failing)

    async def check(self) -> list[str]:
        """Run every probe once, concurrently; returns (and keeps) the names of those that failed."""
        names = sorted(self._probes)
        results = await asyncio.gather(*(self._answers(name) for name in names))
        failing = [name for name, ok in zip(names, results, strict=True) if not ok]
        if failing != self._failing:
            log.log(
                logging.WARNING if failing else logging.INFO,
                "event=dependencies_checked unreachable=%s",
                ",".join(failing) or "none",
            )
            self._failing = failing
        if self._on_change is not None and failing != self._announced:
            await self._on_change(failing)
            self._announced = failing  # only once told: a failed call is made again next round
        return failing

    async def _answers(self, name: str) -> bool:
        try:
            await asyncio.wait_for(self._probes[name](), self.timeout_s)
        except Exception as error:  # whatever it is, the dependency did not answer the probe
            log.debug("event=probe_failed dependency=%s error=%r", name, error)
            return False
        return True

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="dependency-probe")

    async def _run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.check()
            except Exception:  # a failing on_change must not freeze what health says from then on
                log.exception("event=dependency_check_failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.every_s)

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            await cancel_and_wait([self._task], grace_s=self.timeout_s + 1)
            self._task = None
        self._failing = []
