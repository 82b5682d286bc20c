"""The cluster's roster of nodes in the log (``ClusterNodesListed``): written after lists, read back at start.

Called by ``node_watcher`` (``roster_events`` after a list or a change of the node set) and by the
connector when it starts (``last_roster``, before its first list of nodes). A connector that was away
knows from the log alone which nodes it had reported: those of its latest complete roster. Its first list
then reports removed every one of them the API server no longer has (``NodeWatcher.remember``), so a
node deleted while no connector ran does not stay as capacity.

``last_roster`` reads the cluster's partition of the inventory topic backwards from its end, a chunk at a
time, decoding only records keyed by the cluster whose type is ``ClusterNodesListed``: the roster is
restated every ``RESTATE_S`` by a running connector, so the read covers about that much of the
partition's traffic plus the time the connector was away. It gives up after ``MAX_RECORDS`` records
(the cluster's nodes are then not reconciled on this start; the log says so).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from events.catalog.errors import EventError
from events.catalog.inventory import ROSTER_PART_NODES, ClusterNodesListed
from events.catalog.topics import INVENTORY, partition_for
from events.catalog.types import ClusterId, NodeId
from events.log import EventLog, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode

log = logging.getLogger("fedsched.connector.kubernetes")

RESTATE_S = 3600.0
"""A running connector states its roster again at least this often, even when no node came or went."""
CHUNK = 5000
"""Records read at a time, going backwards."""
MAX_RECORDS = 5_000_000
"""Records read back at most before giving up on finding a roster."""
_TYPE = ClusterNodesListed.event_type.encode()


def roster_events(cluster: ClusterId, as_of: int, taken_ms: int, nodes: Iterable[NodeId]) -> list[ClusterNodesListed]:
    """The roster as events, ``ROSTER_PART_NODES`` nodes a part (one part, naming none, for no node)."""
    ordered = sorted(set(nodes))
    chunks = [ordered[i : i + ROSTER_PART_NODES] for i in range(0, len(ordered), ROSTER_PART_NODES)] or [[]]
    return [
        ClusterNodesListed(
            cluster=cluster, as_of=as_of, taken_ms=taken_ms, part=i, parts=len(chunks), nodes=tuple(chunk)
        )
        for i, chunk in enumerate(chunks, start=1)
    ]


async def last_roster(event_log: EventLog, cluster: ClusterId) -> tuple[ClusterNodesListed, ...] | None:
    """The parts of the cluster's latest complete roster in the log, or None when none is found."""
    key = cluster.encode()
    tp = TopicPartition(INVENTORY.name, partition_for(key, await event_log.partitions(INVENTORY.name)))
    reader = await event_log.reader()
    try:
        end = await reader.end_offset(tp)
        read = 0
        later: list[ClusterNodesListed] = []  # rosters of the chunks read so far (a roster may span two)
        while end > 0 and read < MAX_RECORDS:
            start = max(0, end - CHUNK)
            found: list[ClusterNodesListed] = []
            async for batch in read_to_end(reader, tp, start, end=end):
                for record in batch:
                    if record.key != key or record.header("ce_type") != _TYPE:
                        continue
                    try:
                        event = decode(record.headers, record.value).data
                    except EventError as error:
                        log.warning("event=roster_unreadable offset=%d error=%r", record.offset, str(error))
                        continue
                    if isinstance(event, ClusterNodesListed) and event.cluster == cluster:
                        found.append(event)
            later = found + later
            complete = _latest_complete(later)
            if complete is not None:
                return complete
            read += end - start
            end = start
    finally:
        await reader.close()
    if read >= MAX_RECORDS:
        log.warning("event=roster_not_found cluster=%s records_read=%d reason=gave_up", cluster, read)
    return None


def _latest_complete(found: list[ClusterNodesListed]) -> tuple[ClusterNodesListed, ...] | None:
    """The latest roster whose every part is in ``found`` (log order); parts are published together, so
    one cut by a chunk's start is completed by the next chunk back."""
    rosters: dict[tuple[int, int], dict[int, ClusterNodesListed]] = {}
    for event in found:
        rosters.setdefault((event.as_of, event.taken_ms), {})[event.part] = event
    for parts in reversed(list(rosters.values())):
        first = next(iter(parts.values()))
        if len(parts) == first.parts:
            return tuple(parts[i] for i in range(1, first.parts + 1))
    return None


def roster_nodes(parts: Iterable[ClusterNodesListed]) -> list[NodeId]:
    return sorted(node for part in parts for node in part.nodes)
