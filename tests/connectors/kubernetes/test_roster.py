"""The cluster's roster of nodes: cut into parts, and read back from the log's end, a chunk at a time."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from connectors.kubernetes import roster
from events.catalog.base import Event
from events.catalog.inventory import ROSTER_PART_NODES, ClusterNodesListed, ClusterStatus, ClusterStatusChanged
from events.catalog.reasons import ReasonCode
from events.catalog.types import ClusterId, NodeId
from events.log.memory import MemoryLog
from events.log.publisher import Publisher

CLUSTER = ClusterId("c1")


def nodes(count: int, prefix: str = "n") -> list[NodeId]:
    return [NodeId(f"{prefix}-{i:05d}") for i in range(count)]


def test_a_large_roster_comes_in_parts_each_sorted_and_the_parts_name_every_node_once() -> None:
    names = nodes(2 * ROSTER_PART_NODES + 3)
    parts = roster.roster_events(CLUSTER, 7, 1000, reversed(names))
    assert [(p.part, p.parts) for p in parts] == [(1, 3), (2, 3), (3, 3)]
    assert roster.roster_nodes(parts) == names
    assert [len(p.nodes) for p in parts] == [ROSTER_PART_NODES, ROSTER_PART_NODES, 3]


def test_an_empty_cluster_has_a_roster_of_one_part_naming_none() -> None:
    (only,) = roster.roster_events(CLUSTER, 0, 1000, [])
    assert only.nodes == () and (only.part, only.parts) == (1, 1)


def test_a_roster_refuses_unsorted_nodes_and_parts_past_the_count() -> None:
    with pytest.raises(ValueError, match="sorted"):
        ClusterNodesListed(cluster=CLUSTER, as_of=1, taken_ms=1, part=1, parts=1, nodes=(NodeId("b"), NodeId("a")))
    with pytest.raises(ValueError, match="part 2 of 1"):
        ClusterNodesListed(cluster=CLUSTER, as_of=1, taken_ms=1, part=2, parts=1, nodes=())


class Log(MemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self._envelopes = Publisher(self, "urn:test")  # type: ignore[arg-type]  # only makes envelopes

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            self.append(self._envelopes.envelope(event))


def _traffic(count: int) -> list[Event]:
    """Events on the cluster's own partition (keyed by the cluster), which the read passes over."""
    status = ClusterStatusChanged(
        cluster=CLUSTER, status=ClusterStatus.REACHABLE, reason=ReasonCode.CONNECTOR_HEARTBEAT_LOST
    )
    return [status] * count


@pytest.mark.asyncio
async def test_the_latest_complete_roster_is_found_behind_other_traffic_even_across_chunks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(roster, "CHUNK", 7)
    log = Log()
    log.add(roster.roster_events(CLUSTER, 5, 100, nodes(3, "old")))
    log.add(_traffic(20))
    monkeypatch.setattr(roster, "ROSTER_PART_NODES", 2)
    log.add(roster.roster_events(CLUSTER, 9, 200, nodes(5, "new")))  # three parts, which a chunk cuts
    log.add(roster.roster_events(ClusterId("c2"), 11, 300, nodes(1, "x")))  # another cluster's: never taken
    log.add(_traffic(5))  # the chunk boundary falls between the newest roster's parts
    found = await roster.last_roster(log, CLUSTER)  # type: ignore[arg-type]
    assert found is not None and roster.roster_nodes(found) == nodes(5, "new") and found[0].as_of == 9


@pytest.mark.asyncio
async def test_no_roster_in_the_log_is_none() -> None:
    log = Log()
    log.add(_traffic(10))
    assert await roster.last_roster(log, CLUSTER) is None  # type: ignore[arg-type]
