"""Riding out an outage of the event log or the database, and saying so on ``/healthz``.

Called by the loops that must outlive one (the governance host, the audit archiver, the projections
worker's read-model sink) and by the API's dependency probe; read by every process's health check
(``events.plumbing.metrics``), which fails naming what this process cannot reach now.

A loop that meets a *transient* error (the dependency refused, dropped or did not answer a
connection) does not end: ``Outage.wait`` sleeps a capped exponential backoff, then the loop tries its
step again from the positions it keeps. That is safe because every step is a transaction that carries
its own position (the archive's chain head, a governance output's derived id, a read model's rows
replaced whole): a step that failed left nothing, or left what the retry skips. One warning is logged
when a failure streak starts and one line when it ends, whatever the attempts in between. Any other
error (a bug, ``ProducerFenced``) still ends the loop.

This lives with the events layer, not ``services.runtime``, because the archiver does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

import asyncpg
from aiokafka.errors import KafkaError

from events.plumbing.backoff import Backoff

log = logging.getLogger("fedsched.outage")

# The server went away or is refusing connections for now (shutdown, restart, too many clients).
# InternalClientError ("cannot switch to state 12; another operation (2) is in progress") is what
# asyncpg raises for a query on a pooled connection whose session the server is terminating (a
# restart's "terminating connection due to administrator command") before the close is seen: the
# archiver met it on every restart of the embedded PostgreSQL (asyncpg#1069, sqlalchemy#13241).
_DATABASE_AWAY = (
    asyncpg.PostgresConnectionError
    | asyncpg.InterfaceError
    | asyncpg.InternalClientError
    | asyncpg.exceptions.OperatorInterventionError
    | asyncpg.exceptions.InsufficientResourcesError
)


def transient(error: BaseException) -> bool:
    """Whether ``error`` says a dependency is away for now, rather than that something is wrong."""
    # KafkaError covers its timeouts and lost connections; ProducerFenced is ours, not a KafkaError.
    return isinstance(error, OSError | TimeoutError | KafkaError | _DATABASE_AWAY)


class Unreachable(Exception):
    """A transient error, with the dependency it came from (``log``, ``postgres``)."""

    def __init__(self, dependency: str, error: BaseException) -> None:
        super().__init__(f"{dependency}: {error!r}")
        self.dependency = dependency
        self.error = error


@contextlib.contextmanager
def reaching(dependency: str) -> Iterator[None]:
    """Blame a transient error raised in the block on ``dependency`` (raised as ``Unreachable``)."""
    try:
        yield
    except Exception as error:
        if not transient(error):
            raise
        raise Unreachable(dependency, error) from error


class Watched(Protocol):
    def unreachable(self) -> Iterable[str]: ...


_WATCHED: weakref.WeakSet[Watched] = weakref.WeakSet()


def watch(source: Watched) -> None:
    """Count ``source``'s unreachable dependencies in this process's health (for as long as it lives)."""
    _WATCHED.add(source)


def unreachable_now() -> list[str]:
    """Every dependency some part of this process cannot reach now: the health check reads it."""
    return sorted({name for source in list(_WATCHED) for name in source.unreachable()})


class Outage:
    """One loop's failure streak: how long to wait before the next attempt, and what it cannot reach."""

    def __init__(
        self,
        component: str,
        *,
        initial_s: float = 0.5,
        maximum_s: float = 10.0,
        jitter: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.component = component
        self._backoff = Backoff(initial_s, maximum_s, jitter=jitter, rng=rng)
        self._clock = clock
        self.failing: str | None = None
        """The dependency the current streak is about; None: the last attempt got through."""
        self.attempts = 0
        self.streaks = 0
        self._since = 0.0
        watch(self)

    def unreachable(self) -> list[str]:
        return [] if self.failing is None else [self.failing]

    def failed(self, dependency: str, error: BaseException) -> float:
        """Note a failed attempt; returns how long to wait before the next (capped, jittered)."""
        if self.failing is None:
            self.streaks += 1
            self._since = self._clock()
            log.warning(
                "event=dependency_unreachable component=%s dependency=%s error=%r retrying=true",
                self.component, dependency, str(error) or type(error).__name__,
            )  # fmt: skip
        self.failing = dependency
        self.attempts += 1
        return self._backoff.next_delay()

    def recovered(self) -> None:
        """An attempt got through: the streak, if any, is over."""
        if self.failing is None:
            return
        log.info(
            "event=dependency_recovered component=%s dependency=%s attempts=%d down_s=%.1f",
            self.component, self.failing, self.attempts, self._clock() - self._since,
        )  # fmt: skip
        self.failing, self.attempts = None, 0
        self._backoff.reset()

    def forget(self) -> None:
        """The loop has stopped: nothing is being retried, so nothing to report (no recovery either)."""
        self.failing, self.attempts = None, 0
        self._backoff.reset()

    async def wait(self, dependency: str, error: BaseException, stop: asyncio.Event | None = None) -> None:
        """``failed``, then sleep its delay (less if ``stop`` is set meanwhile)."""
        delay = self.failed(dependency, error)
        if stop is None:
            await asyncio.sleep(delay)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
