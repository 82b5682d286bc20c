"""The soak's figures, as the issue's closing note gives them: submissions, kills by component, outages,
lost, doubled, verify %, duration; and what else was seen on the way.

Called by the soak's run, which fills them in, and by the test, which prints them. Pure.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Figures:
    size: int = 0
    seed: int = 0
    grpc_submissions: int = 0
    intake_submissions: int = 0
    answered: int = 0
    retried_calls: Counter[str] = field(default_factory=Counter)
    kills: Counter[str] = field(default_factory=Counter)
    unplanned_exits: Counter[str] = field(default_factory=Counter)
    outages: list[str] = field(default_factory=list)
    leader_stops: list[str] = field(default_factory=list)
    lost: int = 0
    doubled: int = 0
    redelivered: int = 0
    placements: int = 0
    runs_ended: int = 0
    jobs_ended: int = 0
    cycles: int = 0
    log_records: int = 0
    verify_pct: float | None = None
    read_models_equal: bool | None = None
    archive_equal: bool | None = None
    chain_holds: bool | None = None
    """``audit chain --verify`` against the signed checkpoints."""
    cost_micro: tuple[int, int] = (0, 0)
    """(recomputed from the events, read model)."""
    load_s: float = 0.0
    settle_s: float = 0.0
    duration_s: float = 0.0

    def lines(self) -> list[str]:
        kills = ", ".join(f"{name} {n}" for name, n in sorted(self.kills.items())) or "none"
        exits = ", ".join(f"{name} {n}" for name, n in sorted(self.unplanned_exits.items())) or "none"
        retried = ", ".join(f"{code} {n}" for code, n in sorted(self.retried_calls.items())) or "none"
        verify = "-" if self.verify_pct is None else f"{self.verify_pct:g}%"
        return [
            f"soak size {self.size}, seed {self.seed}",
            f"submissions: {self.grpc_submissions} gRPC + {self.intake_submissions} intake,"
            f" {self.answered} answered; retried calls: {retried}",
            f"kills ({sum(self.kills.values())}): {kills}",
            f"exits nobody asked for ({sum(self.unplanned_exits.values())}): {exits}",
            f"outages: {'; '.join(self.outages) or 'none'}",
            *(f"leader stopped: {line}" for line in self.leader_stops),
            f"lost: {self.lost}, doubled: {self.doubled} (same event delivered again: {self.redelivered})",
            f"placements: {self.placements}, runs ended: {self.runs_ended}, jobs ended: {self.jobs_ended},"
            f" cycles: {self.cycles}, log records: {self.log_records}",
            f"verify: {verify} identical; read models = rebuild: {_yes(self.read_models_equal)};"
            f" archive = log: {_yes(self.archive_equal)}; chain and checkpoints hold: {_yes(self.chain_holds)};"
            f" cost recomputed {self.cost_micro[0]}"
            f" vs read model {self.cost_micro[1]} micro-units",
            f"duration: {self.duration_s:.0f} s (load {self.load_s:.0f} s, settling {self.settle_s:.0f} s)",
        ]


def _yes(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")
