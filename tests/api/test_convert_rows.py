"""The servicers' messages from the reader's typed rows are the ones the column mappings gave: a job's
message, its watch history and its explanation (``watch`` and ``explain`` still read a mapping, which
``convert.as_mapping`` makes of a typed row)."""

from __future__ import annotations

import json
from typing import Any

from events.catalog.decisions import CandidateScore, JobQueued, JobReplicasAdded, ReplicaPlacement
from events.catalog.jobs import JobStarted
from events.catalog.reasons import ReasonCode
from projections.readmodel.rows import from_records
from projections.readmodel.rows.entities import TABLES
from services.api import convert, watch
from services.api.explain import explain
from tests.unit.projections.builders import Fold, a_job, a_node, placed

_JSON = ("timeline", "placement", "last_decision", "parts")


def job_record(fold: Fold) -> dict[str, Any]:
    table = TABLES["jobs"]
    return dict(zip((name for name, _ in table.columns), table.rows("j1", fold.get("jobs", "j1"))[0], strict=True))


def as_the_columns_read(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the API's reads gave it before the typed reader: the columns, JSON parsed."""
    return {k: json.loads(v) if k in _JSON and isinstance(v, str) else v for k, v in record.items()}


def a_job_at(stage: str) -> Fold:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(gpus=2), at_s=10)
    if stage == "waiting":
        fold.feed(
            JobQueued(job_id="j1", cycle_id="c-1", reasons=(ReasonCode.NO_FEASIBLE_NODE,), message="no node fits"),
            at_s=20,
        )
    else:
        fold.feed(placed(gpus=(0, 1)), at_s=40)
        fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=45)
    return fold


def test_a_running_jobs_message_history_and_explanation_are_the_columns_ones() -> None:
    record = job_record(a_job_at("running"))
    row, columns = from_records.job_row(record), as_the_columns_read(record)
    assert json.loads(json.dumps(convert.as_mapping(row))) == columns  # tuples where the JSON had lists
    message = convert.job(row, now_ms=2_000_000, with_timeline=True)
    assert (message.job_id, message.status, message.cluster, message.waiting_ms) == ("j1", "running", "c1", 30_000)
    assert [(s.node, list(s.gpu_indices)) for s in message.placement] == [("n1", [0, 1])]
    assert [e.status for e in message.timeline] == ["submitted", "placed", "running"]
    assert watch.history(convert.as_mapping(row)) == watch.history(columns)
    assert explain(convert.as_mapping(row), 2_000_000) == explain(columns, 2_000_000)


def test_a_waiting_jobs_wait_counts_to_now_from_the_typed_row_as_from_the_columns() -> None:
    record = job_record(a_job_at("waiting"))
    row = from_records.job_row(record)
    assert row.status == "queued" and row.queued_since_ms is not None
    waited = convert.job(row, now_ms=1_080_000).waiting_ms
    assert waited == convert.waited_ms(as_the_columns_read(record), 1_080_000) == 1_080_000 - row.queued_since_ms
    explained = explain(convert.as_mapping(row), 1_080_000)
    assert explained.question == "waiting" and explained == explain(as_the_columns_read(record), 1_080_000)


def test_a_run_that_grew_shows_every_replica_it_holds_beside_what_the_job_asks_and_explains_the_growth() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(gpus=1).model_copy(update={"replicas": 3}), at_s=10)
    fold.feed(placed(gpus=(0,)), at_s=40)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=45)
    grew = JobReplicasAdded(
        job_id="j1", cycle_id="c-2", cluster="c1", run=1, running_replicas=3,
        replicas=tuple(ReplicaPlacement(replica=r, node="n1", gpu_indices=(r,), gpu_milli_each=1000) for r in (1, 2)),
        chosen=CandidateScore(cluster="c1", total=0), explanation="j1 grows in c1: added 2 replica(s)",
    )  # fmt: skip
    fold.feed(grew, at_s=60)
    row = from_records.job_row(job_record(fold))
    message = convert.job(row, now_ms=2_000_000)
    assert (message.replicas, len(message.placement)) == (3, 3)  # asked, running
    explained = explain(convert.as_mapping(row), 2_000_000)
    assert explained.question == "placed" and explained.decision_type == "JobReplicasAdded"
    assert [s.replica for s in explained.placement.replicas] == [1, 2]
    assert explained.summary[0].startswith("Grew on cluster c1 (run 1, now 3 replicas)")
