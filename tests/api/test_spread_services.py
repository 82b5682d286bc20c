"""An inference service spread over clusters, as the API shows it: each replica names its cluster, the job
names the clusters its run holds replicas in and each part of its run, the explanation says where its
replicas are and how a closed run ended, and a watch shows a part's end without ending the job (the run
ends with the scheduler's ``JobRunClosed``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from events.catalog.jobs import JobCancelled, JobFailed, JobStarted, RunEnd
from events.catalog.lifecycle import FINAL_STATUSES
from events.catalog.reasons import ReasonCode
from projections.readmodel.rows import from_records
from projections.readmodel.rows.entities import TABLES
from services.api import convert, watch
from services.api.explain import explain
from services.api.pb import jobs_pb2
from services.api.watch_tails import WatchTails
from tests.api.test_watch_tails import DECISIONS_TP, GrowingLog, jobs_tp
from tests.unit.projections.builders import Fold
from tests.unit.projections.test_spread_runs import (
    a_service,
    added_in,
    c2_failed,
    closed,
    placed_in,
    running_in_two_clusters,
)

pytestmark = pytest.mark.timeout(60)

_JSON = ("timeline", "placement", "last_decision", "parts")


def job_record(fold: Fold) -> dict[str, Any]:
    table = TABLES["jobs"]
    return dict(zip((name for name, _ in table.columns), table.rows("j1", fold.get("jobs", "j1"))[0], strict=True))


def as_the_columns_read(record: dict[str, Any]) -> dict[str, Any]:
    return {k: json.loads(v) if k in _JSON and isinstance(v, str) else v for k, v in record.items()}


def test_a_spread_runs_job_names_each_replicas_cluster_its_clusters_and_its_parts() -> None:
    fold = running_in_two_clusters()
    row = from_records.job_row(job_record(fold))
    message = convert.job(row, now_ms=2_000_000, with_timeline=True)
    assert (message.cluster, list(message.clusters)) == ("c1", ["c1", "c2"])
    assert [(s.replica, s.cluster, s.node) for s in message.placement] == [
        (0, "c1", "n1"),
        (1, "c1", "n1"),
        (2, "c2", "n1"),
        (3, "c2", "n1"),
    ]
    assert [(p.cluster, p.replicas, p.ended, p.HasField("ended_ms")) for p in message.parts] == [
        ("c1", 2, "", False),
        ("c2", 2, "", False),
    ]
    fold.feed(c2_failed(), at_s=100)
    message = convert.job(from_records.job_row(job_record(fold)), now_ms=2_000_000)
    assert (message.status, list(message.clusters)) == ("running", ["c1"])
    assert [s.cluster for s in message.placement] == ["c1", "c1"]
    ended = message.parts[1]
    assert (ended.cluster, ended.ended, ended.reason, ended.ended_ms) == ("c2", "failed", "NodeFailure", 1_100_000)


def test_a_job_that_does_not_spread_names_its_one_cluster_on_each_replica() -> None:
    fold = Fold()
    fold.feed(a_service(spread=1))
    fold.feed(placed_in("c1"), at_s=1)
    message = convert.job(from_records.job_row(job_record(fold)), now_ms=2_000_000)
    assert (message.cluster, list(message.clusters), list(message.parts)) == ("c1", ["c1"], [])
    assert [s.cluster for s in message.placement] == ["c1", "c1"]


def test_a_placement_row_written_before_replicas_said_their_cluster_reads_as_the_runs() -> None:
    assert [s.cluster for s in convert.slots([["n1", [0], 1000, []]], "c1")] == ["c1"]
    assert [s.cluster for s in convert.slots([["n1", [0], 1000]], "c1")] == ["c1"]


def test_the_typed_rows_explanation_says_where_the_replicas_are_and_matches_the_columns() -> None:
    fold = running_in_two_clusters()
    record = job_record(fold)
    row, columns = from_records.job_row(record), as_the_columns_read(record)
    assert json.loads(json.dumps(convert.as_mapping(row))) == columns
    answer = explain(convert.as_mapping(row), 2_000_000)
    assert answer == explain(columns, 2_000_000)
    assert answer.question == "placed" and answer.placement.cluster == "c2"
    assert "The service runs 4 replicas: 2 in c1, 2 in c2." in answer.summary
    assert [s.cluster for s in answer.placement.replicas] == ["c2", "c2"]


def test_a_closed_runs_explanation_tells_its_story() -> None:
    fold = running_in_two_clusters()
    fold.feed(c2_failed(), at_s=100)
    assert (
        "The service runs 2 replicas: 2 in c1 (c2's part failed: NodeFailure)."
        in explain(convert.as_mapping(from_records.job_row(job_record(fold))), 2_000_000).summary
    )
    fold.feed(JobCancelled(job_id="j1", cluster="c1", run=1), at_s=200)
    fold.feed(closed(RunEnd.CANCELLED), at_s=201)
    answer = explain(convert.as_mapping(from_records.job_row(job_record(fold))), 2_000_000)
    assert answer.status == "cancelled" and answer.question == "finished"
    assert answer.decision_type == "JobRunClosed"
    assert answer.summary[0] == "The job has ended: cancelled (Cancelled)."
    assert any(
        line.startswith("Run 1 closed (cancelled in c1): 2 replicas in c1 and 2 in c2") for line in answer.summary
    )
    assert "  c2: failed (NodeFailure); c1: cancelled" in answer.summary  # in the order the parts ended


@pytest.mark.asyncio
async def test_a_watch_shows_a_parts_end_without_ending_the_job_and_ends_with_the_close() -> None:
    log = GrowingLog()
    tails = WatchTails(log)  # type: ignore[arg-type]
    for event in (a_service(), placed_in("c1"), JobStarted(job_id="j1", cluster="c1"), added_in("c2")):
        log.append(event)
    reader = tails.reader()
    starts = [(jobs_tp("j1"), 0), (DECISIONS_TP, 0)]
    seen: list[jobs_pb2.JobEvent] = []
    stream = watch.live(reader, "j1", starts, "submitted", False)  # type: ignore[arg-type]

    async def until(event: str) -> None:
        async for item in stream:
            seen.append(item)
            if item.event == event:
                return

    try:
        await asyncio.wait_for(until("JobReplicasAdded"), 10)
        log.append(JobStarted(job_id="j1", cluster="c2"))
        log.append(JobFailed(job_id="j1", cluster="c2", reason=ReasonCode.NODE_FAILURE, node="n1"))
        await asyncio.wait_for(until("JobFailed"), 10)
        part_end = seen[-1]
        assert part_end.status == "running" and part_end.status not in FINAL_STATUSES
        log.append(JobCancelled(job_id="j1", cluster="c1", run=1))
        await asyncio.wait_for(until("JobCancelled"), 10)
        assert seen[-1].status not in FINAL_STATUSES  # the last part's end: the close ends the run
        log.append(closed(RunEnd.CANCELLED))
        await asyncio.wait_for(until("JobRunClosed"), 10)
        assert seen[-1].status == "cancelled"
        rest = [item async for item in stream]  # the stream ended on the close's final status
        assert rest == []
    finally:
        await reader.close()
        await tails.close()
