"""The knobs of a simulated cluster: time, delays, faults and utilisation.

Called by the model (``connectors.sim.cluster``), the host and the CLI. Durations are given in
simulated seconds (floats, as people type them) and read back in integer milliseconds, the unit every
event carries.
"""

from __future__ import annotations

from dataclasses import dataclass

SECOND_MS = 1000
HOUR_MS = 3600 * SECOND_MS


@dataclass(frozen=True, slots=True)
class SimConfig:
    """How a simulated cluster behaves. Every draw is seeded by ``seed``: the same seed, node list and
    inputs give the same events."""

    speed: float = 1.0
    """Simulated seconds per wall-clock second."""
    seed: int = 0
    start_delay_s: float = 5.0
    """From accepting a placement to ``JobStarted`` (image pull, container start)."""
    stop_delay_s: float = 2.0
    """From a cancel, preemption or reclaim request to the workload stopped (capped by the grace period)."""
    fault_rate: float = 0.0
    """Expected faults (GPU or NPU failure, node cordoned, node lost) per node per simulated hour."""
    fault_min_s: float = 600.0
    fault_max_s: float = 7200.0
    """A fault lasts between these many simulated seconds, then the node, GPU or NPU recovers."""
    job_failure_rate: float = 0.0
    """Share of runs (0..1) that fail on their own part-way through (non-zero exit or out of memory)."""
    usage_interval_s: float = 300.0
    """Window of ``NodeUsageReported``: every node with work on it reports once per window."""
    default_runtime_s: int = 3600
    """Runtime of a training, fine-tune or batch job that gives none; notebooks and inference run until
    stopped."""
    notebook_active_s: int = 600
    """A notebook is busy this long after it starts, then sits idle (utilisation 0-3%)."""

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError(f"speed must be positive, got {self.speed}")
        for name in ("start_delay_s", "stop_delay_s", "fault_rate", "fault_min_s", "default_runtime_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.fault_max_s < self.fault_min_s:
            raise ValueError("fault_max_s must be at least fault_min_s")
        if not 0 <= self.job_failure_rate <= 1:
            raise ValueError(f"job_failure_rate must be within 0..1, got {self.job_failure_rate}")
        if not 1 <= self.usage_interval_s <= 24 * 3600:
            raise ValueError(f"usage_interval_s must be within 1..86400, got {self.usage_interval_s}")

    @property
    def start_delay_ms(self) -> int:
        return ms(self.start_delay_s)

    @property
    def stop_delay_ms(self) -> int:
        return ms(self.stop_delay_s)

    @property
    def usage_interval_ms(self) -> int:
        return ms(self.usage_interval_s)


def ms(seconds: float) -> int:
    """Simulated seconds to integer milliseconds."""
    return round(seconds * SECOND_MS)
