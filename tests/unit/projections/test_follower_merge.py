"""The in-process follower merges what it read of each partition in event-time order, and stops at the
earliest last time of a partition it read short of its end: a partition whose read came back small (one
Kafka fetch) may hold earlier events than the others' later ones. Counting only partitions cut by the
batch size let inventory fall minutes behind the jobs and decisions topics in a rebuild (issue 19's soak:
usage reports folded after the release of the allocation they measured)."""

from __future__ import annotations

from typing import Any

import pytest

from events.log.contract import LogRecord
from projections.inprocess.follower import TimeOrderedFollower

pytestmark = pytest.mark.timeout(10)


def items(topic: str, times: list[int]) -> list[Any]:
    return [(t, 0, LogRecord(topic, 0, offset, None, b"", (), t), None) for offset, t in enumerate(times)]


def follower() -> TimeOrderedFollower:
    return TimeOrderedFollower(None, (), batch=100)  # type: ignore[arg-type]


def test_a_partition_read_short_of_its_end_stops_the_merge_at_its_last_time() -> None:
    inventory = items("inventory", [1, 2, 3])  # more of it, from time 3 on, is still to read
    decisions = items("decisions", [1, 5, 9])
    merged = follower()._merge([inventory, decisions], [True, False])
    assert [(i[2].topic, i[0]) for i in merged] == [
        ("inventory", 1),
        ("decisions", 1),
        ("inventory", 2),
        ("inventory", 3),
    ]


def test_partitions_read_to_their_end_are_merged_whole() -> None:
    merged = follower()._merge([items("inventory", [1, 2, 3]), items("decisions", [1, 5, 9])], [False, False])
    assert [i[0] for i in merged] == [1, 1, 2, 3, 5, 9]


def test_a_partition_whose_times_go_back_is_never_folded_past_a_record_it_leaves_out() -> None:
    jobs = items("jobs", [5, 2, 3])  # an API's submission, then a connector's reports on a slower clock
    decisions = items("decisions", [1, 4])
    merged = follower()._merge([jobs, decisions], [False, True])  # decisions has more from time 4 on
    folded = [(i[2].topic, i[2].offset) for i in merged]
    jobs_folded = [offset for topic, offset in folded if topic == "jobs"]
    assert jobs_folded == list(range(len(jobs_folded)))  # a prefix of the partition, whatever its times
    assert folded == [("decisions", 0), ("decisions", 1)]  # jobs starts at 5, past the cut (4): none of it
