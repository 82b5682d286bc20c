"""What the writer writes, the reader reads back typed: the rows of folded entities, as PostgreSQL returns
them (JSON columns as text), parse into the reader's rows with the entity's own values."""

from __future__ import annotations

from typing import Any

from events.catalog.decisions import JobQueued
from events.catalog.jobs import JobPreempted, JobStarted
from events.catalog.pending_reasons import PendingReason
from events.catalog.reasons import ReasonCode
from projections.readmodel.rows import from_records
from projections.readmodel.rows.entities import TABLES
from projections.readmodel.rows.typed import QuotaUsage, Slot, TimelineEntry
from tests.unit.projections.builders import Fold, a_job, a_node, placed


def record(stage: str, key: str, entity: Any) -> dict[str, Any]:
    """The entity's first row as a record of its table's columns (asyncpg returns jsonb as text)."""
    table = TABLES[stage]
    return dict(zip((name for name, _ in table.columns), table.rows(key, entity)[0], strict=True))


def a_running_job() -> Fold:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(gpus=2), at_s=10)
    fold.feed(placed(gpus=(0, 1)), at_s=40)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=45)
    return fold


def test_a_running_jobs_row_reads_back_with_its_slots_timeline_and_decision() -> None:
    view = a_running_job().get("jobs", "j1")
    row = from_records.job_row(record("jobs", "j1", view))
    assert (row.job_id, row.tenant, row.status, row.cluster, row.orphan) == ("j1", "team-a", "running", "c1", False)
    assert (row.submitted_ms, row.placed_ms, row.started_ms, row.ended_ms) == (1_010_000, 1_040_000, 1_045_000, None)
    assert (row.waiting_ms, row.queued_since_ms, row.run, row.runs) == (30_000, None, 1, 1)
    assert row.placement == (Slot("n1", (0, 1), 1000, (), "c1", 0),)  # each replica names its cluster
    entries = tuple(TimelineEntry(e.time_ms, e.status, e.event, e.reason, e.message) for e in view.timeline)
    assert row.timeline == entries and [e.status for e in entries] == ["submitted", "placed", "running"]
    assert row.last_decision_type == "JobPlaced" and row.last_decision is not None
    assert row.last_decision["cluster"] == "c1"


def test_a_list_reads_the_same_job_without_its_timeline() -> None:
    view = a_running_job().get("jobs", "j1")
    whole = from_records.job_row(record("jobs", "j1", view))
    summary = from_records.job_summary(record("jobs", "j1", view))
    assert not hasattr(summary, "timeline")
    assert summary == type(summary)(**{name: getattr(whole, name) for name in type(summary).__dataclass_fields__})


def test_a_column_added_after_the_row_was_written_reads_as_the_views_default() -> None:
    older = {**record("jobs", "j1", a_running_job().get("jobs", "j1")), "queued_since_ms": None, "name": None}
    older.update(waiting_ms=None, last_decision_type=None, last_decision=None, placement=None)
    row = from_records.job_row(older)
    assert (row.queued_since_ms, row.name, row.waiting_ms, row.last_decision_type) == (None, "", 0, "")
    assert (row.last_decision, row.placement) == (None, ())


def a_wait(cycle: int, federation: int, own: int, eta_s: int) -> JobQueued:
    return JobQueued(
        job_id="j1",
        cycle_id=f"cycle-{cycle:09d}",
        reasons=(ReasonCode.QUOTA_EXCEEDED,),
        message="quota",
        federation_position=federation,
        tenant_queue_position=own,
        estimated_start_ms=eta_s * 1000,
        pending_reason=PendingReason.QUOTA,
    )


def where_it_stands(fold: Fold) -> tuple[str | None, int | None, int | None, int | None]:
    row = from_records.job_row(record("jobs", "j1", fold.get("jobs", "j1")))
    return row.pending_reason, row.federation_position, row.tenant_queue_position, row.estimated_start_ms


def test_a_waiting_jobs_row_says_where_it_stands_until_it_is_placed_and_again_once_told_after_a_preemption() -> None:
    fold = Fold()
    fold.feed(a_node())
    fold.feed(a_job(gpus=2), at_s=10)
    assert where_it_stands(fold) == (None, None, None, None)  # the scheduler has not said yet
    fold.feed(a_wait(1, 12, 3, 2000), at_s=20)
    assert where_it_stands(fold) == ("quota", 12, 3, 2_000_000)
    fold.feed(a_wait(2, 5, 1, 1500), at_s=30)  # the jobs ahead started: it moved up
    assert where_it_stands(fold) == ("quota", 5, 1, 1_500_000)
    fold.feed(placed(gpus=(0, 1)), at_s=40)
    assert where_it_stands(fold) == (None, None, None, None)
    fold.feed(JobPreempted(job_id="j1", cluster="c1"), at_s=50)
    row = from_records.job_row(record("jobs", "j1", fold.get("jobs", "j1")))
    assert row.status == "queued" and where_it_stands(fold) == (None, None, None, None)  # its old places are stale
    fold.feed(a_wait(3, 2, 2, 2100), at_s=60)
    assert where_it_stands(fold) == ("quota", 2, 2, 2_100_000)


def test_a_queues_quota_lines_read_back_typed() -> None:
    fold = a_running_job()
    quota = from_records.queue_quota(record("quota", "team-a/default", fold.get("quota", "team-a/default")))
    assert (quota.tenant, quota.queue, quota.running_jobs) == ("team-a", "default", 1)
    assert all(isinstance(line, QuotaUsage) for line in quota.usage)
    gpu = [line for line in quota.usage if line.resource == "gpu"]
    assert [(line.used, line.limit, line.gpu_model) for line in gpu] == [(2000, None, "A100")]


def test_a_nodes_row_reads_back_with_its_capacity_and_what_is_allocated() -> None:
    node = from_records.node_row(record("nodes", "c1/n1", a_running_job().get("nodes", "c1/n1")))
    assert (node.cluster, node.node, node.gpu_model, node.gpus, node.jobs) == ("c1", "n1", "A100", 8, 1)
    assert (node.gpu_capacity_milli, node.gpu_allocated_milli, node.gpu_free_milli) == (8000, 2000, 6000)
