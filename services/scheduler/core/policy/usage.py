"""A tenant's past GPU usage, decayed to any moment at a cost that does not grow with the history.

Called by the scheduler state, which adds and removes a job's usage records as its runs end, and by
fair share, which reads every tenant's decayed usage once a cycle. Fair share weighs past usage by
2^(-age / half-life) (Slurm-style). Summing every record on every cycle cost time in proportion to the
whole history: ``schedule()`` went from 4 to 24 ms a cycle over the first 20,000 finished jobs, and
would keep growing for as long as the service runs.

Instead the records are cut into epochs of ``EPOCH_HALF_LIVES`` half-lives on a fixed grid of time. A
record ending at ``at`` in the epoch starting at ``start`` adds ``amount * 2^((at - start) / H)`` to its
epoch's sum, and the usage decayed to ``now`` is the sum over epochs of ``sum / 2^((now - start) / H)``.
That is a function of the set of records alone (the fold that feeds it must not depend on the order
of its input), in integers, and costs one division per epoch. Ints stay small (2^32 at most from
the growth), and a tenant has a handful of epochs (one per 32 weeks at the default half-life). An
epoch also keeps the plain sum of its amounts: one that starts after ``now`` counts that, undecayed.

Powers of two with a fractional exponent use the fixed-point table of 2^(-i/64), as in
``fairshare``: the age is counted in 64ths of a half-life. A record from the future (a cluster's clock
ahead of the scheduler's) in the epoch of ``now`` weighs a little more than its amount (2^(how far
ahead / H)), rather than exactly its amount.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from services.scheduler.core.policy.model import UsageHistory, UsageRecord

EPOCH_HALF_LIVES = 32
ONE = 1_000_000_000  # the table's fixed-point scale
# round(2 ** (-i / 64) * 1e9) for i in 0..63.
POW2_FRAC = (
    1000000000, 989228013, 978572062, 968030897, 957603281, 947287991, 937083817, 926989563, 917004043,
    907126088, 897354538, 887688246, 878126080, 868666918, 859309649, 850053177, 840896415, 831838290,
    822877739, 814013711, 805245166, 796571076, 787990423, 779502200, 771105413, 762799075, 754582214,
    746453864, 738413073, 730458897, 722590403, 714806669, 707106781, 699489836, 691954941, 684501211,
    677127773, 669833762, 662618322, 655480606, 648419777, 641435008, 634525479, 627690379, 620928906,
    614240268, 607623680, 601078366, 594603558, 588198496, 581862429, 575594615, 569394317, 563260809,
    557193371, 551191292, 545253866, 539380399, 533570200, 527822589, 522136891, 516512440, 510948574,
    505444643,
)  # fmt: skip


def grow(age_ms: int, half_life_ms: int) -> int:
    """``2 ** (age / half_life) * ONE`` for ``age >= 0``, in integers (the age in 64ths of a half-life)."""
    whole, rest = divmod(age_ms, half_life_ms)
    k = rest * 64 // half_life_ms
    # 2^(k/64) = 2 * 2^(-(64 - k)/64): the table read backwards.
    return (ONE if k == 0 else 2 * POW2_FRAC[64 - k]) << whole


def contribution(record: UsageRecord, half_life_ms: int) -> tuple[int, int]:
    """(start of the record's epoch, what it adds to that epoch's grown sum)."""
    if half_life_ms <= 0:  # no decay: plain sums
        return 0, record.gpu_milli_ms
    width = EPOCH_HALF_LIVES * half_life_ms
    start = record.at_ms // width * width
    return start, record.gpu_milli_ms * grow(record.at_ms - start, half_life_ms)


Sums = dict[int, tuple[int, int]]
"""Epoch start -> (grown sum, plain sum of the amounts)."""


def decayed(history: UsageHistory, now_ms: int) -> int:
    """The usage of ``history`` decayed to ``now_ms`` (milli-GPU x ms)."""
    h = history.half_life_ms
    if h <= 0:
        return sum(plain for _, _, plain in history.epochs)
    total = 0
    for start, grown, plain in history.epochs:
        age = now_ms - start
        if age < 0:
            # All of it after now (a clock ahead of the scheduler's): each record counts its amount,
            # undecayed, as the per-record decay did.
            total += plain
        elif age // h <= grown.bit_length():  # else 2^(age/h) > grown: nothing is left (exactly 0)
            total += grown // grow(age, h)
    return total


def history_of(records: Iterable[UsageRecord], half_life_ms: int) -> UsageHistory:
    """The history of some records (what the state keeps up to date record by record)."""
    ledger = UsageLedger(half_life_ms, {})
    for record in records:
        ledger.add(record)
    return ledger.history()


def frozen(sums: Mapping[int, tuple[int, int]], half_life_ms: int) -> UsageHistory:
    """A history from per-epoch sums. Equal sets of records give equal histories, however they were
    added and removed: epochs whose sum is 0 are left out, and an empty history is ``UsageHistory()``
    whatever the half-life."""
    epochs = tuple(sorted((start, grown, plain) for start, (grown, plain) in sums.items() if plain))
    return UsageHistory(half_life_ms, epochs) if epochs else UsageHistory()


@dataclass(slots=True)
class UsageLedger:
    """Per-epoch sums of one tenant, changed record by record (the scheduler state's side)."""

    half_life_ms: int
    sums: Sums

    def add(self, record: UsageRecord, sign: int = 1) -> None:
        start, grown = contribution(record, self.half_life_ms)
        before_grown, before_plain = self.sums.get(start, (0, 0))
        after = (before_grown + sign * grown, before_plain + sign * record.gpu_milli_ms)
        if after[1]:
            self.sums[start] = after
        else:
            self.sums.pop(start, None)

    def history(self) -> UsageHistory:
        return frozen(self.sums, self.half_life_ms)


__all__ = ["EPOCH_HALF_LIVES", "UsageLedger", "contribution", "decayed", "grow", "history_of"]
