"""What the projections read, and in what order what happened at one moment is folded. Pure.

Called by both projection hosts: the in-process runner merges its partitions by event time, then by
``source_rank``; the faust router's aligner releases records in that same order. One definition, so both
hosts fold causes before effects alike.
"""

from __future__ import annotations

from events.catalog.topics import DECISIONS, GOVERNANCE, INVENTORY, JOBS

SOURCE_TOPICS = (INVENTORY.name, JOBS.name, DECISIONS.name, GOVERNANCE.name)
"""The topics every projection stage folds (the profiles topic is theirs to write, not to read)."""

# Within one moment, what enables comes before what it enables: policy and quota, then inventory,
# then requests and reports, then the decisions taken on them.
_RANK = {GOVERNANCE.name: 0, INVENTORY.name: 1, JOBS.name: 2, DECISIONS.name: 3}


def source_rank(topic: str) -> int:
    """Where records of ``topic`` (a catalogue name) go among records of the same moment; other topics last."""
    return _RANK.get(topic, 9)


__all__ = ["SOURCE_TOPICS", "source_rank"]
