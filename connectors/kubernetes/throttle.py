"""Rate limiting and backoff against the API server.

Called by ``kubeapi`` (every request takes a token) and by the loops that retry (the reflector, the
executor). ``RateLimiter`` is a token bucket like client-go's (``qps`` steady, ``burst`` at once);
``Backoff`` (``events.plumbing.backoff``, re-exported here) is capped exponential backoff with jitter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from events.plumbing.backoff import Backoff


class RateLimiter:
    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._stamp = clock()
        self._lock = asyncio.Lock()
        self.waited_s = 0.0
        """Total time callers spent waiting for a token (a sign the limit binds)."""

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.qps)
        self._stamp = now

    async def acquire(self) -> None:
        async with self._lock:
            self._refill()
            if self._tokens < 1:
                wait = (1 - self._tokens) / self.qps
                self.waited_s += wait
                await asyncio.sleep(wait)
                self._refill()
            self._tokens -= 1


__all__ = ["Backoff", "RateLimiter"]
