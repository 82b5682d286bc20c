"""What one soak does, drawn from its size and seed: the submissions, the fleet and the pace of faults.

Called by the soak's run (``tests.soak.run``), its load and its chaos schedule. Pure: every draw comes
from a ``random.Random`` seeded by the plan, so a failing seed replays the same submissions and the same
faults in the same order (the moments differ with the machine's speed, not the choices).

``FEDSCHED_SOAK_SIZE`` sets the number of gRPC submissions (``make soak``: 10,000; ``make test``: the CI
size below), ``FEDSCHED_SOAK_SEED`` the seed.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

FULL_SIZE = 10_000
CI_SIZE = 400
DEFAULT_SEED = 19  # the number: any fixed seed does

SESSION_TIMEOUT_S = 10.0
"""The scheduler's leadership group session (``events.log.kafka``): a leader stopped longer is deposed."""

TENANTS = ("team-a", "team-b", "team-c", "team-d")
PRIORITIES = ("standard", "best_effort", "critical_training")
PRIORITY_WEIGHTS = (70, 20, 10)


@dataclass(frozen=True, slots=True)
class JobDraw:
    """One submission: what it asks for, and by which path it is sent."""

    index: int
    request_id: str
    path: str  # "grpc" or "intake"
    tenant: str
    gpus: int
    gpu_milli: int
    runtime_s: int
    priority_class: str

    @property
    def name(self) -> str:
        return f"soak-{self.index:05d}"


@dataclass(frozen=True, slots=True)
class SoakPlan:
    size: int
    """Submissions through gRPC; the intake gets one more for every twenty of them."""
    seed: int
    rate_per_s: float
    kill_every_s: tuple[float, float]
    leader_stop_s: float
    """How long the leader stays stopped: past its session timeout."""
    outage_s: float
    """How long Kafka and PostgreSQL each stay down."""
    runtime_s: tuple[int, int]
    nodes_per_cluster: int
    settle_s: float
    """How long every job may take to end once the last submission is answered."""

    @classmethod
    def for_size(cls, size: int, seed: int = DEFAULT_SEED) -> SoakPlan:
        if size < 20:
            raise ValueError(f"FEDSCHED_SOAK_SIZE: at least 20 submissions, got {size}")
        full = size >= 2000
        return cls(
            size=size,
            seed=seed,
            rate_per_s=10.0 if full else 6.0,
            kill_every_s=(5.0, 20.0) if full else (2.5, 6.0),
            leader_stop_s=SESSION_TIMEOUT_S + 5.0,
            outage_s=10.0 if full else 4.0,
            runtime_s=(2, 12),
            nodes_per_cluster=12 if full else 8,
            settle_s=900.0 if full else 180.0,
        )

    @classmethod
    def from_env(cls) -> SoakPlan:
        return cls.for_size(_env_int("FEDSCHED_SOAK_SIZE", CI_SIZE), _env_int("FEDSCHED_SOAK_SEED", DEFAULT_SEED))

    @property
    def intake_size(self) -> int:
        return self.size // 20

    @property
    def load_s(self) -> float:
        """How long the submissions take at the plan's pace: the window the faults are spread over."""
        return (self.size + self.intake_size) / self.rate_per_s

    def draws(self) -> list[JobDraw]:
        """Every submission in the order it is sent; the intake's are spread evenly among the rest."""
        rng = random.Random(f"jobs-{self.seed}")
        total, spread = self.size + self.intake_size, self.intake_size
        intake = {k * total // spread + total // (2 * spread) for k in range(spread)}
        out: list[JobDraw] = []
        for index in range(total):
            shape = rng.random()
            out.append(
                JobDraw(
                    index=index,
                    request_id=f"soak-{self.seed}-{index:05d}",
                    path="intake" if index in intake else "grpc",
                    tenant=rng.choice(TENANTS),
                    gpus=0 if shape < 0.2 else (2 if shape < 0.4 else 1),
                    gpu_milli=500 if shape < 0.2 else 0,
                    runtime_s=rng.randint(*self.runtime_s),
                    priority_class=rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0],
                )
            )
        return out


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: must be a whole number, got {text!r}") from None
