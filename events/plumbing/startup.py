"""Starting a service's connections to what it depends on, riding out an outage as its loop rides one out
later: a service started while Kafka or PostgreSQL is away (a restart of the broker, the database coming up
after the services in a deployment) waits for it instead of exiting.

Called by the service commands (``fedsched scheduler``, ``api``, ``audit archive``, ``gov run``,
``projections run``, ``connector ...``) around each first connection. Calls ``events.plumbing.outage``:
an error that says a dependency is away for now is logged once (``dependency_unreachable``), named by
health while it lasts, and retried with backoff; any other error is a bug, raised at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from events.plumbing.outage import Outage, transient

T = TypeVar("T")


async def patiently(
    dependency: str,
    start: Callable[[], Awaitable[T]],
    *,
    component: str,
    undo: Callable[[], Awaitable[object]] | None = None,
    outage: Outage | None = None,
) -> T:
    """``start()``'s result once it gets through; between attempts that met an outage, ``undo()`` (what a
    failed attempt may have left open) and a backoff."""
    outage = outage if outage is not None else Outage(component)
    try:
        while True:
            try:
                value = await start()
            except Exception as error:
                if not transient(error):
                    raise
                if undo is not None:
                    with contextlib.suppress(Exception):
                        await undo()
                await outage.wait(dependency, error)
                continue
            outage.recovered()
            return value
    except BaseException:
        # Given up (a bug after an outage, or the service stopped while it waited): nothing is retried
        # any more, so health must not go on naming the dependency for as long as the object lives.
        outage.forget()
        raise


__all__ = ["patiently"]
