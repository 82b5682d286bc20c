"""Simulated time: wall-clock time run ``speed`` times faster from an anchor.

Called by the host (``SimCluster``, ``SimFleet``) and by whoever wants other components on the same
time (``fedsched up`` may hand the scheduler the fleet's clock). The model never reads it: the host
passes ``now`` in.

Where simulated time starts: ``start(at_least_ms)`` anchors it at the later of the wall clock and
``at_least_ms`` (the last event a restarted cluster had published), so it never runs backwards across a
restart. At ``speed`` 1 the time a connector was down passes as it would for a real cluster; at higher
speeds the simulation resumes where it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class SimClock:
    def __init__(
        self,
        speed: float = 1.0,
        *,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed}")
        self.speed = speed
        self._wall_ms = wall_ms
        self._monotonic = monotonic
        self._anchor_ms: int | None = None
        self._anchor_mono = 0.0

    @property
    def started(self) -> bool:
        return self._anchor_ms is not None

    def start(self, at_least_ms: int | None = None) -> None:
        """Anchor simulated time now (idempotent: a started clock keeps its anchor unless it is behind
        ``at_least_ms``, in which case it jumps forward to it)."""
        floor = max(self._wall_ms(), at_least_ms or 0)
        if self._anchor_ms is None or self.now_ms() < floor:
            self._anchor_ms, self._anchor_mono = floor, self._monotonic()

    def now_ms(self) -> int:
        if self._anchor_ms is None:
            return self._wall_ms()
        return self._anchor_ms + int((self._monotonic() - self._anchor_mono) * 1000 * self.speed)

    def wall_seconds_until(self, sim_ms: int) -> float:
        """How long to wait on the wall clock until simulated time reaches ``sim_ms`` (0 if past)."""
        return max(0.0, (sim_ms - self.now_ms()) / 1000 / self.speed)


__all__ = ["SimClock"]
