"""Capped exponential backoff with jitter, reset after a success.

Called by every loop that retries: the Kubernetes connector's reflector and executor, and the loops
that ride out an outage of the log or the database (``events.plumbing.outage``).
"""

from __future__ import annotations

import asyncio
import random


class Backoff:
    def __init__(
        self,
        initial_s: float = 0.2,
        maximum_s: float = 30.0,
        *,
        factor: float = 2.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        self.initial_s = initial_s
        self.maximum_s = maximum_s
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._attempt = 0

    def next_delay(self) -> float:
        base = min(self.maximum_s, self.initial_s * self.factor**self._attempt)
        self._attempt = min(self._attempt + 1, 64)
        return base * (1 + self.jitter * (2 * self._rng.random() - 1))

    def reset(self) -> None:
        self._attempt = 0

    async def sleep(self) -> float:
        delay = self.next_delay()
        await asyncio.sleep(delay)
        return delay
