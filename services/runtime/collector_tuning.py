"""The cyclic garbage collector's settings for fedsched processes.

Called once by the ``fedsched`` entry point, before a command runs. Every fedsched process holds a
large, long-lived, mostly acyclic heap (the scheduler's state, projection entities, decoded events)
and allocates many short-lived containers per event. With CPython's default thresholds (700, 10, 10)
the collector runs a young collection every 700 net allocations and a full one, scanning the whole
heap, whenever it has grown by a quarter: measured on a projection fold of 20,000 events, a third of
the time went to the collector, and more as the heap grew. Larger thresholds keep the same
guarantees (cycles are still collected) at a fraction of the cost; freezing what start-up made (the
modules, classes and validators imported) keeps it out of every full collection, and out of the
pages a forked ``audit verify`` worker would otherwise copy when the collector touches them.
"""

from __future__ import annotations

import gc

YOUNG = 50_000
"""Net container allocations between two young collections (default 700)."""
MIDDLE = 20
"""Young collections between two collections of the middle generation (default 10)."""
OLD = 10
"""Middle collections before a full collection is considered (default 10; CPython then also waits
until the objects promoted since the last one make a quarter of the old generation)."""


def tune_collector() -> None:
    """Set the thresholds above and freeze everything allocated so far (call after start-up imports)."""
    gc.set_threshold(YOUNG, MIDDLE, OLD)
    gc.freeze()
