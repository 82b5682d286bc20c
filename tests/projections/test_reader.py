"""The typed reader on real PostgreSQL, over rows the writer wrote from folded entities: each question
the API, the report and the demo ask, with tenant scoping and keyset pages."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio

from events.catalog.governance import QuotaLine, QuotaSet
from events.catalog.jobs import JobStarted, JobSucceeded
from events.catalog.types import ResourceKind
from projections.readmodel import writer
from projections.readmodel.reader import ReadModels
from projections.readmodel.rows.entities import TABLES
from projections.readmodel.rows.typed import JobFilter, Slot
from tests.unit.projections.builders import Fold, a_gpu_and_npu_run, a_job, a_node, placed

pytestmark = [pytest.mark.postgres, pytest.mark.asyncio(loop_scope="session")]

POSITIONS = {("fedsched.jobs", 0): 7, ("fedsched.decisions", 0): 3}


def a_small_federation() -> Fold:
    """Team a: j1 running on c1/n1 (2 GPUs), j3 succeeded; team b: j2 waiting, with a quota of 4 GPUs. Two
    A100 nodes, one H100."""
    fold = Fold()
    fold.feed(
        QuotaSet(
            tenant="team-b",
            queue="default",
            lines=(QuotaLine(resource=ResourceKind.GPU, guaranteed=4),),
            set_by="admin",
        )
    )
    fold.feed(a_node("c1", "n1"))
    fold.feed(a_node("c1", "n2"))
    fold.feed(a_node("c2", "m1", gpus=4, model="H100"))
    fold.feed(a_job("j1", gpus=2), at_s=10)
    fold.feed(a_job("j2", tenant="team-b", gpus=8), at_s=20)
    fold.feed(a_job("j3"), at_s=30)
    fold.feed(placed("j1", gpus=(0, 1)), at_s=40)
    fold.feed(JobStarted(job_id="j1", cluster="c1"), at_s=45)
    fold.feed(placed("j3", node="n2"), at_s=50)
    fold.feed(JobStarted(job_id="j3", cluster="c1"), at_s=55)
    fold.feed(JobSucceeded(job_id="j3", cluster="c1"), at_s=90)
    return fold


@pytest_asyncio.fixture(loop_scope="session")
async def written(fresh_database: str) -> AsyncIterator[tuple[asyncpg.Pool, str]]:
    """A pool and a schema holding the small federation's rows and positions."""
    pool = await asyncpg.create_pool(fresh_database, min_size=1, max_size=2)
    schema = f"rm_{uuid.uuid4().hex[:8]}"
    try:
        await writer.ensure_schema(pool, schema)
        tables = a_small_federation().store.tables
        changed = [(stage, key) for stage, entities in tables.items() if stage in TABLES for key in entities]
        await writer.flush(pool, schema, changed, tables, POSITIONS)
        yield pool, schema
    finally:
        await pool.close()


@pytest.fixture
def reads(written: tuple[asyncpg.Pool, str]) -> ReadModels:
    return ReadModels(*written)


async def test_a_job_reads_with_the_positions_its_row_reflects(reads: ReadModels) -> None:
    row, positions = await reads.job_and_positions("j1")
    assert row is not None and (row.status, row.cluster, row.placement) == (
        "running",
        "c1",
        (Slot("n1", (0, 1), 1000, (), "c1", 0),),
    )
    assert positions == POSITIONS
    assert await reads.job("j1") == row
    assert await reads.job("nobody") is None


async def test_a_tenants_jobs_page_newest_first_and_never_show_another_tenants(reads: ReadModels) -> None:
    everyone = await reads.jobs(JobFilter(), None, 10, None)
    assert [j.job_id for j in everyone] == ["j3", "j2", "j1"]
    first = await reads.jobs(JobFilter(), ["team-a"], 1, None)
    assert [j.job_id for j in first] == ["j3"]
    rest = await reads.jobs(JobFilter(), ["team-a"], 10, (first[0].submitted_ms or 0, first[0].job_id))
    assert [j.job_id for j in rest] == ["j1"]
    assert await reads.jobs(JobFilter(tenant="team-b"), ["team-a"], 10, None) == []
    assert [j.job_id for j in await reads.jobs(JobFilter(statuses=("queued", "submitted")), None, 10, None)] == ["j2"]


async def test_the_reports_and_the_demos_questions(reads: ReadModels) -> None:
    assert await reads.status_counts() == {"running": 1, "submitted": 1, "succeeded": 1}
    assert sorted((o.status, o.runs) for o in await reads.job_outcomes()) == [
        ("running", 1),
        ("submitted", 0),
        ("succeeded", 1),
    ]
    (held,) = await reads.held_runs()
    assert (held.tenant, held.cluster, held.gpu_model, held.placement) == (
        "team-a",
        "c1",
        "A100",
        (Slot("n1", (0, 1), 1000, (), "c1", 0),),
    )
    histories = {h.job_id: h for h in await reads.job_histories()}
    assert sorted(histories) == ["j1", "j2", "j3"] and [e.status for e in histories["j3"].timeline][-1] == "succeeded"
    assert await reads.latest_time_ms() == 1_090_000
    allocation = {a.cluster: (a.capacity_milli, a.allocated_milli) for a in await reads.allocation()}
    assert allocation == {"c1": (16_000, 2000), "c2": (4000, 0)}


async def test_the_fleet_as_clusters_nodes_and_capacity(reads: ReadModels) -> None:
    assert [(c.cluster, c.nodes, c.gpus, c.status) for c in await reads.clusters()] == [
        ("c1", 2, 16, "unknown"),
        ("c2", 1, 4, "unknown"),
    ]
    page = await reads.nodes(None, None, 2, None)
    assert [(n.cluster, n.node) for n in page] == [("c1", "n1"), ("c1", "n2")]
    assert [(n.cluster, n.node) for n in await reads.nodes(None, None, 2, ("c1", "n2"))] == [("c2", "m1")]
    assert [n.node for n in await reads.nodes(None, "H100", 10, None)] == ["m1"]
    assert [(m.cluster, m.gpu_model, m.allocated_milli) for m in await reads.capacity("c1")] == [("c1", "A100", 2000)]
    assert await reads.largest_nodes() == {"A100": 8, "H100": 4}
    assert {m.gpu_model for m in await reads.fleet_models()} == {"A100", "H100"}


async def test_quota_is_scoped_to_the_callers_tenants(reads: ReadModels) -> None:
    assert [(q.tenant, q.queue) for q in await reads.quota(None)] == [("team-a", "default"), ("team-b", "default")]
    (mine,) = await reads.quota(["team-a"])
    assert mine.tenant == "team-a" and mine.running_jobs == 1
    assert await reads.quota(["team-a"], tenant="team-b") == []
    (theirs,) = await reads.quota(None, tenant="team-b", queue="default")
    assert [(line.resource, line.guaranteed, line.used) for line in theirs.usage] == [("gpu", 4, 0)]


async def test_checksums_see_a_change_in_any_row(written: tuple[asyncpg.Pool, str], reads: ReadModels) -> None:
    before = await reads.checksums()
    assert set(before) == {table.name for table in TABLES.values()} and before["read_jobs"].startswith("3:")
    assert await writer.checksums(*written) == before
    fold = a_small_federation()
    fold.feed(JobSucceeded(job_id="j1", cluster="c1"), at_s=100)
    await writer.flush(*written, [("jobs", "j1")], fold.store.tables, {})
    after = await reads.checksums()
    assert after["read_jobs"] != before["read_jobs"] and after["read_nodes"] == before["read_nodes"]


async def test_npu_hours_are_read_with_their_kind_and_never_count_in_gpu_hour_budgets(
    written: tuple[asyncpg.Pool, str],
) -> None:
    pool, _ = written
    schema = f"rm_{uuid.uuid4().hex[:8]}"
    await writer.ensure_schema(pool, schema)
    tables = a_gpu_and_npu_run().store.tables
    changed = [(stage, key) for stage, entities in tables.items() if stage in TABLES for key in entities]
    await writer.flush(pool, schema, changed, tables, POSITIONS)
    reads = ReadModels(pool, schema)
    hours = {(u.kind, u.gpu_model): (u.allocated_milli_ms, u.cost_micro) for u in await reads.usage_hours()}
    assert hours == {
        ("gpu", "A100"): (1000 * 1_800_000, 1_000_000),
        ("npu", "Ascend910B"): (4000 * 1_800_000, 3_000_000),
    }
    # Half a GPU-hour: the run's 2 NPU-hours are not GPU time.
    assert await reads.allocated_within(["team-a"], 0, 3_600_000) == 1000 * 1_800_000
    # The job's row says what each replica asks, NPUs included (the API's Job.npus, the CLI's NPUS).
    job, _ = await reads.job_and_positions("j1")
    assert job is not None and (job.gpu_milli, job.npus, job.replicas) == (1000, 4, 1)
    (listed,) = await reads.jobs(JobFilter(), None, 10, None)
    assert listed.npus == 4


async def test_a_running_run_over_nodes_of_two_models_is_held_under_each_model(
    written: tuple[asyncpg.Pool, str],
) -> None:
    from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
    from services.governance.report import held_rows

    pool, _ = written
    fold = Fold()
    fold.feed(a_node("c1", "n1"))
    fold.feed(a_node("c1", "t1", gpus=4, model="T4"))
    fold.feed(a_job("j9", gpus=1).model_copy(update={"replicas": 3}), at_s=10)
    replicas = tuple(
        ReplicaPlacement(replica=i, node=node, gpu_indices=(g,), gpu_milli_each=1000)
        for i, (node, g) in enumerate([("n1", 0), ("t1", 0), ("t1", 1)])
    )
    placed_on_two = JobPlaced(
        job_id="j9",
        cycle_id="cycle-9",
        cluster="c1",
        run=1,
        replicas=replicas,
        chosen=CandidateScore(cluster="c1", node="n1", total=0),
        explanation="test",
    )
    fold.feed(placed_on_two, at_s=20)
    fold.feed(JobStarted(job_id="j9", cluster="c1"), at_s=25)
    schema = f"rm_{uuid.uuid4().hex[:8]}"
    await writer.ensure_schema(pool, schema)
    tables = fold.store.tables
    changed = [(stage, key) for stage, entities in tables.items() if stage in TABLES for key in entities]
    await writer.flush(pool, schema, changed, tables, POSITIONS)
    reads = ReadModels(pool, schema)
    (run,) = await reads.held_runs()
    assert run.slot_models == (("A100", None), ("T4", None), ("T4", None))
    held = sorted((row.gpu_model, row.gpu_milli) for row in await held_rows(reads))
    assert held == [("A100", 1000), ("T4", 2000)]  # was [("A100", 3000)]: the first replica's node's model


async def test_a_spread_service_is_listed_under_each_cluster_its_run_holds_replicas_in(
    written: tuple[asyncpg.Pool, str],
) -> None:
    """Its run opened in c1 and grew into c2 (on nodes of other models): listed under either cluster,
    each replica read back with its cluster and held under its own node's model; once c1's part ended, the
    run still lists under c1 (its first cluster) and holds only c2's replicas."""
    from events.catalog.jobs import JobFailed
    from events.catalog.reasons import ReasonCode
    from tests.unit.projections.test_spread_runs import a_service, added_in, placed_in

    pool, _ = written
    fold = Fold()
    fold.feed(a_node("c1", "n1"))
    fold.feed(a_node("c2", "n1", gpus=4, model="H100"))
    fold.feed(a_service())
    fold.feed(placed_in("c1"), at_s=1)
    fold.feed(added_in("c2"), at_s=10)

    async def reads_of(fold: Fold) -> ReadModels:
        schema = f"rm_{uuid.uuid4().hex[:8]}"
        await writer.ensure_schema(pool, schema)
        tables = fold.store.tables
        changed = [(stage, key) for stage, entities in tables.items() if stage in TABLES for key in entities]
        await writer.flush(pool, schema, changed, tables, POSITIONS)
        return ReadModels(pool, schema)

    reads = await reads_of(fold)
    for cluster in ("c1", "c2"):
        (listed,) = await reads.jobs(JobFilter(cluster=cluster), None, 10, None)
        assert (listed.job_id, listed.cluster, listed.clusters) == ("j1", "c1", ("c1", "c2"))
    assert await reads.jobs(JobFilter(cluster="c3"), None, 10, None) == []
    row = await reads.job("j1")
    assert row is not None and [(s.cluster, s.replica) for s in row.placement] == [
        ("c1", 0),
        ("c1", 1),
        ("c2", 2),
        ("c2", 3),
    ]
    assert [(p.cluster, p.replicas, p.ended) for p in row.parts] == [("c1", 2, ""), ("c2", 2, "")]
    assert row.spread_clusters == 2
    (run,) = await reads.held_runs()
    assert run.slot_models == (("A100", None), ("A100", None), ("H100", None), ("H100", None))
    from services.governance.report import held_rows

    held = sorted(
        (row.cluster, row.gpu_model, row.gpu_milli, row.placed_ms - run.placed_ms) for row in await held_rows(reads)
    )
    assert held == [("c1", "A100", 2000, 0), ("c2", "H100", 2000, 9000)]  # each part where it is, from its opening

    fold.feed(JobFailed(job_id="j1", cluster="c1", reason=ReasonCode.NODE_FAILURE, node="n1"), at_s=100)
    reads = await reads_of(fold)
    (listed,) = await reads.jobs(JobFilter(cluster="c2"), None, 10, None)
    assert (listed.status, listed.cluster, listed.clusters) == ("placed", "c1", ("c2",))
    assert [j.job_id for j in await reads.jobs(JobFilter(cluster="c1"), None, 10, None)] == ["j1"]
    (run,) = await reads.held_runs()
    assert (run.gpu_model, run.slot_models) == ("H100", (("H100", None), ("H100", None)))
    assert [(p.cluster, p.ended, p.reason) for p in listed.parts] == [("c1", "failed", "NodeFailure"), ("c2", "", "")]
