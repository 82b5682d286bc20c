"""Stopping asyncio tasks for certain.

Python 3.11's ``asyncio.wait_for`` can lose a cancellation that arrives just as its inner wait
finishes (the inner result wins and the ``CancelledError`` is never raised); a loop around such a wait
then runs on, and whoever awaits the cancelled task waits forever. Hosts stop their tasks through
``cancel_and_wait``, which cancels again whatever is still running after a short while.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any


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
