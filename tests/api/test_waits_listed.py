"""Waiting jobs listed by where they stand (issue 20, item 5): ``ListJobs`` filtered by the category of
their wait, scoped to the caller's tenants as every listing is, each job with its places in its own queue
and in the federation's order and its estimated start; a job placed since is in no category."""

from __future__ import annotations

import uuid

import pytest

from events.catalog.decisions import JobQueued
from events.catalog.pending_reasons import PendingReason
from events.catalog.reasons import ReasonCode
from services.api.client import CallError, Client
from services.api.pb import jobs_pb2
from tests.api.conftest import Stack
from tests.api.support import append
from tests.api.test_jobs import submit
from tests.unit.projections.builders import placed

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]

ETA = 1_900_000_000_000


def waits(job_id: str, reason: ReasonCode, category: PendingReason, own: int, federation: int) -> JobQueued:
    return JobQueued(
        job_id=job_id,
        cycle_id="cycle-000000001",
        reasons=(reason,),
        message=f"{job_id} waits",
        federation_position=federation,
        tenant_queue_position=own,
        estimated_start_ms=ETA + federation,
        pending_reason=category,
    )


async def listed(client: Client, queue: str, *categories: str, page_size: int = 100) -> list[jobs_pb2.Job]:
    found: list[jobs_pb2.Job] = []
    token = ""
    while True:
        request = jobs_pb2.ListJobsRequest(
            queue=queue, pending_reasons=list(categories), page_size=page_size, page_token=token
        )
        page = await client.call(client.jobs.ListJobs, request)
        found += page.jobs
        token = page.next_page_token
        if not token:
            return found


async def test_waiting_jobs_are_listed_by_the_category_of_their_wait_within_the_callers_tenants(stack: Stack) -> None:
    keys = stack.keys
    queue = f"w{uuid.uuid4().hex[:10]}"
    over_quota, no_room, placed_since = [await submit(stack, keys.hs(), name=n, queue=queue) for n in ("q", "c", "p")]
    told_nothing = await submit(stack, keys.hs(), name="n", queue=queue)
    theirs = await submit(stack, keys.hs(tenants=["team-b"]), tenant="team-b", name="b", queue=queue)
    quota = (ReasonCode.QUOTA_EXCEEDED, PendingReason.QUOTA)
    capacity = (ReasonCode.INSUFFICIENT_GPU, PendingReason.CAPACITY)
    await append(
        stack.log,
        [
            waits(over_quota, *quota, own=1, federation=4),
            waits(no_room, *capacity, own=2, federation=7),
            waits(placed_since, *quota, own=3, federation=9),
            waits(theirs, *quota, own=1, federation=5),
        ],
    )
    await append(stack.log, [placed(placed_since, node="n1", gpus=(0, 1), cluster="east")])
    await stack.fold()

    mine = stack.client(keys.hs(roles=["viewer"]))  # team-a's
    [job] = await listed(mine, queue, "quota")
    assert job.job_id == over_quota and (job.status, job.pending_reason) == ("queued", "quota")
    assert (job.tenant_queue_position, job.federation_position, job.estimated_start_ms) == (1, 4, ETA + 4)
    both = await listed(mine, queue, "quota", "capacity", page_size=1)  # pages keep the filter
    assert sorted(j.job_id for j in both) == sorted([over_quota, no_room])
    everything = {j.job_id: j for j in await listed(mine, queue)}
    assert set(everything) == {over_quota, no_room, placed_since, told_nothing}
    for job_id in (placed_since, told_nothing):  # placed since it waited; not told yet: in no category
        job = everything[job_id]
        assert job.pending_reason == "" and not job.HasField("federation_position"), job_id
        assert not job.HasField("tenant_queue_position") and not job.HasField("estimated_start_ms"), job_id
    assert await listed(mine, queue, "budget") == []

    auditor = stack.client(keys.hs(tenants=["*"], roles=["auditor"]))
    assert sorted(j.job_id for j in await listed(auditor, queue, "quota")) == sorted([over_quota, theirs])
    with pytest.raises(CallError) as caught:
        await listed(mine, queue, "stuck")
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", "pending_reasons")
    assert "quota, budget, capacity" in caught.value.message
