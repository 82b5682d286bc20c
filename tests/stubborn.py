"""A fake call that blocks until cancelled and loses the first cancellation, as Python 3.11's
``asyncio.wait_for`` can make a real one lose it: for tests of hosts that must still stop."""

from __future__ import annotations

import asyncio


class LosesFirstCancel:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.swallowed = 0

    async def block(self) -> None:
        """Wait forever; the first cancellation is swallowed (the call returns), later ones raise."""
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.swallowed:
                raise
            self.swallowed += 1
