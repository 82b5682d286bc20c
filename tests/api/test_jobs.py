"""Jobs over gRPC on a real log and real PostgreSQL: submit lands on the log, the projections fold it,
get/list/explain/watch/timeline read it back; idempotency holds under concurrent retries on two API
replicas; tenants never see each other's jobs."""

from __future__ import annotations

import asyncio
import json

import pytest

from events.catalog.decisions import (
    BindingConstraint,
    CandidateScore,
    ClusterWhyNot,
    JobPlaced,
    JobPreemptionRequested,
    JobQueued,
    ReplicaPlacement,
    ScoreComponent,
    SuggestedChange,
)
from events.catalog.jobs import JobCancelled, JobStarted, JobSucceeded
from events.catalog.pending_reasons import PendingReason
from events.catalog.reasons import ReasonCode
from events.catalog.topics import JOBS, partition_for
from events.catalog.types import ResourceKind
from services.api.client import CallError, Client, ClientConfig
from services.api.commands import job_id_for
from services.api.config import ApiConfig
from services.api.pb import audit_pb2, jobs_pb2
from services.api.server import serve
from services.governance.api_reads import GovernanceReports
from services.governance.quota_rules import GovernanceQuotaRules
from tests.api.conftest import Stack
from tests.api.support import LogTail, append, envelope_of, header, new_request_id, spec

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres]


async def submit(stack: Stack, token: str, request_id: str | None = None, **overrides: object) -> str:
    client = stack.client(token)
    request = jobs_pb2.SubmitJobRequest(spec=spec(**overrides), client_request_id=request_id or new_request_id())
    response = await client.call(client.jobs.SubmitJob, request)
    return str(response.job_id)


async def test_a_submission_lands_on_the_log_and_the_job_view_shows_it(stack: Stack) -> None:
    tail = await LogTail.of(stack.log, JOBS.name)
    request_id = new_request_id()
    client = stack.client(stack.keys.hs())
    response = await client.call(
        client.jobs.SubmitJob,
        jobs_pb2.SubmitJobRequest(
            spec=spec(name="resnet-50", labels={"team": "vision"}, template_json='{"image": "r:1", "gpus": 2}'),
            client_request_id=request_id,
        ),
    )
    assert response.created and response.job_id == job_id_for("team-a", request_id)

    [record] = await tail.wait_for(lambda r: r.key == response.job_id.encode())
    envelope = envelope_of(record)
    assert envelope is not None and envelope.type == "io.fedsched.JobSubmitted"
    assert envelope.id == f"submit-{response.job_id}" and envelope.correlation_id == request_id
    assert header(record, "ce_tenant") == "team-a"
    event = envelope.data
    assert (event.name, event.tenant, event.resources.gpus, event.submitted_by) == (  # type: ignore[attr-defined]
        "resnet-50",
        "team-a",
        2,
        "alice@example.com",
    )
    assert event.template == {"gpus": 2, "image": "r:1"}  # type: ignore[attr-defined]

    await stack.fold()
    job = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=response.job_id))
    assert (job.status, job.name, job.tenant, job.gpu_milli) == ("submitted", "resnet-50", "team-a", 2000)
    assert [e.event for e in job.timeline] == ["JobSubmitted"]
    samples = {(name, tuple(sorted(labels.items()))): value for name, labels, value in stack.api.samples()}
    ok = ("fedsched_api_requests_total", (("code", "OK"), ("method", "/fedsched.v1.JobService/SubmitJob")))
    assert samples[ok] >= 1 and ("fedsched_intake_requests_total", (("outcome", "accepted"),)) in samples


async def test_a_job_not_yet_folded_is_already_visible_as_submitted(stack: Stack) -> None:
    job_id = await submit(stack, stack.keys.hs(), name="fresh")
    client = stack.client(stack.keys.hs())
    job = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
    assert (job.status, job.name) == ("submitted", "fresh")
    await stack.fold()


async def test_sixteen_concurrent_retries_on_two_replicas_make_one_job(stack: Stack) -> None:
    second = await serve(
        ApiConfig(
            log_url=stack.config.log_url,
            dsn=stack.config.dsn,
            auth=stack.config.auth,
            listen="127.0.0.1:0",
            read_schema=stack.config.read_schema,
            api_schema=stack.config.api_schema,
            intake=False,
            create_topics=False,
        ),
        quota_rules=GovernanceQuotaRules(),
        governance=GovernanceReports(),
        log=stack.log,  # type: ignore[arg-type]
        pool=stack.pool,
    )
    tail = await LogTail.of(stack.log, JOBS.name)
    request_id = new_request_id()
    token = stack.keys.hs()
    first = stack.client(token)
    other = Client(ClientConfig(server=second.address, token=token))
    request = jobs_pb2.SubmitJobRequest(spec=spec(name="retried"), client_request_id=request_id)
    try:
        answers = await asyncio.gather(*[c.call(c.jobs.SubmitJob, request) for c in [first, other] * 8])
    finally:
        await other.close()
        await second.stop()
    assert len({a.job_id for a in answers}) == 1
    assert sum(a.created for a in answers) == 1
    job_id = answers[0].job_id
    records = [r for r in await tail.read_all() if r.key == job_id.encode()]
    assert len(records) == 1

    await stack.fold()
    client = stack.client(token)
    listed = await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest(tenant="team-a", page_size=1000))
    assert [j.job_id for j in listed.jobs].count(job_id) == 1


async def test_the_same_request_id_with_another_spec_is_already_exists(stack: Stack) -> None:
    request_id = new_request_id()
    await submit(stack, stack.keys.hs(), request_id, name="first")
    with pytest.raises(CallError) as caught:
        await submit(stack, stack.keys.hs(), request_id, name="second")
    assert (caught.value.code, caught.value.field) == ("ALREADY_EXISTS", "client_request_id")
    assert caught.value.reason == "DuplicateRequest"


async def test_an_invalid_spec_is_invalid_argument_naming_the_field(stack: Stack) -> None:
    cases = {
        "resources.gpus": spec(resources=jobs_pb2.Resources(gpus=65)),
        "resources": spec(resources=jobs_pb2.Resources(gpus=1, gpu_milli=500)),
        "tenant": spec(tenant="Team A"),
        "replicas": spec(replicas=0),
        "template_json": spec(template_json="[1, 2]"),
        "kind": spec(kind="quantum"),
        "name": spec(name=""),
    }
    client = stack.client(stack.keys.admin())
    for field_name, bad in cases.items():
        with pytest.raises(CallError) as caught:
            await client.call(client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=bad))
        assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", field_name), caught.value.message


async def test_a_template_asking_gpus_beyond_the_jobs_request_is_refused_at_submission(stack: Stack) -> None:
    profiler = {"name": "profiler", "image": "prof:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    template = {"spec": {"containers": [{"name": "trainer", "image": "train:1"}, profiler]}}
    client = stack.client(stack.keys.admin())
    with pytest.raises(CallError) as caught:
        await client.call(
            client.jobs.SubmitJob, jobs_pb2.SubmitJobRequest(spec=spec(template_json=json.dumps(template)))
        )
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", "template_json")
    assert "containers[1] (profiler) limits nvidia.com/gpu: 1, beyond the job's request" in caught.value.message


async def test_list_filters_pages_and_never_shows_another_tenant(stack: Stack) -> None:
    keys = stack.keys
    mine = [await submit(stack, keys.hs(), name=f"page-{i}", queue="paging") for i in range(5)]
    theirs = await submit(stack, keys.hs(tenants=["team-b"]), tenant="team-b", name="secret", queue="paging")
    await stack.fold()

    client = stack.client(keys.hs(roles=["viewer"]))
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = await client.call(
            client.jobs.ListJobs, jobs_pb2.ListJobsRequest(queue="paging", page_size=2, page_token=token)
        )
        seen += [j.job_id for j in page.jobs]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == sorted(mine) and pages == 3
    assert theirs not in seen

    with pytest.raises(CallError) as caught:
        await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=theirs))
    assert caught.value.code == "NOT_FOUND"
    with pytest.raises(CallError) as caught:
        await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest(tenant="team-b"))
    assert caught.value.code == "PERMISSION_DENIED"
    with pytest.raises(CallError) as caught:
        await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest(queue="other", page_token=token or "x"))
    assert (caught.value.code, caught.value.field) == ("INVALID_ARGUMENT", "page_token")
    submitter = stack.client(keys.hs())
    with pytest.raises(CallError) as caught:
        await submitter.call(submitter.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=theirs))
    assert caught.value.code == "NOT_FOUND"

    auditor = stack.client(keys.hs(tenants=["*"], roles=["auditor"]))
    everyone = await auditor.call(auditor.jobs.ListJobs, jobs_pb2.ListJobsRequest(queue="paging", page_size=100))
    assert {theirs, *mine} <= {j.job_id for j in everyone.jobs}


def queued(job_id: str) -> JobQueued:
    return JobQueued(
        job_id=job_id,
        cycle_id="cycle-7",
        reasons=(ReasonCode.INSUFFICIENT_GPU, ReasonCode.QUOTA_EXCEEDED),
        message="needs 8 A100s; 2 are free",
        why_not=(
            ClusterWhyNot(cluster="east", reasons=(ReasonCode.INSUFFICIENT_GPU,), detail="2 of 8 free"),
            ClusterWhyNot(cluster="west", reasons=(ReasonCode.GPU_MODEL_UNAVAILABLE,)),
        ),
        binding=BindingConstraint(
            reason=ReasonCode.INSUFFICIENT_GPU,
            resource=ResourceKind.GPU,
            gpu_model="A100-80G",
            cluster="east",
            requested=8000,
            available=2000,
        ),
        smallest_change=SuggestedChange(field="resources.gpus", current="8", suggested="2", message="fits now"),
        federation_position=12,
        tenant_queue_position=3,
        estimated_start_ms=1_900_000_000_000,
        pending_reason=PendingReason.CAPACITY,
    )


async def test_explain_gives_why_it_waits_where_it_went_and_why_it_was_preempted(stack: Stack) -> None:
    job_id = await submit(stack, stack.keys.hs(), name="explained")
    await append(stack.log, [queued(job_id)])
    await stack.fold()
    client = stack.client(stack.keys.hs(roles=["viewer"]))
    # Waiting now: every view counts the wait so far, the listing as the job itself (it showed 0 s).
    got = await client.call(client.jobs.GetJob, jobs_pb2.GetJobRequest(job_id=job_id))
    listed = await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest(queue=got.queue, page_size=1000))
    [row] = [j for j in listed.jobs if j.job_id == job_id]
    assert 0 < got.waiting_ms <= row.waiting_ms, (got.waiting_ms, row.waiting_ms)
    answer = await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=job_id))
    assert row.waiting_ms <= answer.waiting_ms
    assert (answer.question, answer.status, answer.decision_type, answer.cycle_id) == (
        "waiting",
        "queued",
        "JobQueued",
        "cycle-7",
    )
    wait = answer.wait
    assert [r.code for r in wait.reasons] == ["InsufficientGpu", "QuotaExceeded"]
    assert [w.cluster for w in wait.why_not] == ["east", "west"]
    assert (wait.binding.requested, wait.binding.available, wait.binding.gpu_model) == (8000, 2000, "A100-80G")
    assert (wait.smallest_change.field, wait.smallest_change.suggested) == ("resources.gpus", "2")
    assert (wait.tenant_queue_position, wait.federation_position) == (3, 12)
    assert wait.estimated_start_ms == 1_900_000_000_000 and wait.pending_reason.code == "capacity"
    text = "\n".join(answer.summary)
    binding = "in cluster east: gpu of model A100-80G requested 8 GPUs for one replica on one node, available 2 GPUs"
    assert binding in text
    assert "resources.gpus from 8 to 2" in text and "Pending reason: capacity (" in text
    assert f"Position 3 in team-a/{got.queue}, 12 in the federation's order (1 is next)." in text
    assert json.loads(answer.decision_json)["federation_position"] == 12

    chosen = CandidateScore(
        cluster="east",
        total=700,
        components=(ScoreComponent(name="fit", points=500), ScoreComponent(name="locality", points=200)),
    )
    placed = JobPlaced(
        job_id=job_id,
        cycle_id="cycle-8",
        cluster="east",
        replicas=(ReplicaPlacement(replica=0, node="n1", gpu_indices=(0, 1), gpu_milli_each=1000),),
        chosen=chosen,
        runner_up=(CandidateScore(cluster="west", total=300),),
        explanation="best fit on east",
    )
    await append(stack.log, [placed])
    await stack.fold()
    answer = await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=job_id))
    assert (answer.question, answer.placement.cluster, answer.placement.chosen.total) == ("placed", "east", 700)
    assert "total 700 = fit 500 + locality 200" in "\n".join(answer.summary)

    preempt = JobPreemptionRequested(
        job_id=job_id, cycle_id="cycle-9", cluster="east", rule="priority", preemptor="j-important"
    )
    await append(stack.log, [preempt])
    await stack.fold()
    answer = await client.call(client.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(job_id=job_id))
    assert (answer.question, answer.preemption.preemptor, answer.preemption.rule) == (
        "preempted",
        "j-important",
        "priority",
    )
    assert [p.event for p in answer.preemptions] == ["JobPreemptionRequested"]


async def test_watch_streams_history_then_live_events_until_the_job_ends(stack: Stack) -> None:
    job_id = await submit(stack, stack.keys.hs(), name="watched")
    await append(stack.log, [queued(job_id)])
    await stack.fold()
    client = stack.client(stack.keys.hs())
    stream = client.stream(client.jobs.WatchJob, jobs_pb2.WatchJobRequest(job_id=job_id))
    seen: list[jobs_pb2.JobEvent] = []

    async def consume() -> None:
        async for event in stream:
            seen.append(event)
            if len(seen) == 2:  # the history is there: the scheduler places the job
                placed = JobPlaced(
                    job_id=job_id,
                    cycle_id="c-1",
                    cluster="east",
                    replicas=(ReplicaPlacement(replica=0, node="n1", gpu_indices=(0, 1), gpu_milli_each=1000),),
                    chosen=CandidateScore(cluster="east", total=1),
                    explanation="there",
                )
                await append(stack.log, [placed])
            elif len(seen) == 3:  # placed: its cluster runs it to the end
                await append(
                    stack.log, [JobStarted(job_id=job_id, cluster="east"), JobSucceeded(job_id=job_id, cluster="east")]
                )

    await asyncio.wait_for(consume(), timeout=60)
    assert [(e.event, e.history) for e in seen] == [
        ("JobSubmitted", True),
        ("JobQueued", True),
        ("JobPlaced", False),
        ("JobStarted", False),
        ("JobSucceeded", False),
    ]
    assert seen[-1].status == "succeeded" and json.loads(seen[2].data_json)["cluster"] == "east"

    await stack.fold()
    timeline = await client.call(client.audit.GetJobTimeline, audit_pb2.GetJobTimelineRequest(job_id=job_id))
    assert [e.event for e in timeline.entries] == [
        "JobSubmitted",
        "JobQueued",
        "JobPlaced",
        "JobStarted",
        "JobSucceeded",
    ]
    assert timeline.entries[1].reason_description.startswith("not enough free whole GPUs")


async def test_cancel_publishes_the_request_and_refuses_an_ended_job(stack: Stack) -> None:
    job_id = await submit(stack, stack.keys.hs(), name="to-cancel")
    tail = await LogTail.of(stack.log, JOBS.name)
    client = stack.client(stack.keys.hs(sub="bob@example.com"))
    answer = await client.call(
        client.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id, reason="wrong data", client_request_id="c-1")
    )
    assert (answer.job_id, answer.status) == (job_id, "submitted")
    [record] = await tail.wait_for(lambda r: r.key == job_id.encode())
    envelope = envelope_of(record)
    assert envelope is not None and envelope.type == "io.fedsched.JobCancelRequested"
    assert (envelope.data.requester, envelope.data.reason) == ("bob@example.com", "wrong data")  # type: ignore[attr-defined]

    await append(stack.log, [JobCancelled(job_id=job_id, requester="bob@example.com")])
    await stack.fold()
    with pytest.raises(CallError) as caught:
        await client.call(client.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id))
    assert (caught.value.code, caught.value.field) == ("FAILED_PRECONDITION", "job_id")
    viewer = stack.client(stack.keys.hs(roles=["viewer"]))
    with pytest.raises(CallError) as caught:
        await viewer.call(viewer.jobs.CancelJob, jobs_pb2.CancelJobRequest(job_id=job_id))
    assert caught.value.code == "PERMISSION_DENIED"


async def test_watch_never_ends_before_a_decision_read_late_from_the_other_topic(stack: Stack) -> None:
    job_id = await submit(stack, stack.keys.hs(), name="watched-late")
    await stack.fold()
    client = stack.client(stack.keys.hs())
    stream = client.stream(client.jobs.WatchJob, jobs_pb2.WatchJobRequest(job_id=job_id))
    placed = JobPlaced(
        job_id=job_id,
        cycle_id="c-2",
        cluster="east",
        replicas=(ReplicaPlacement(replica=0, node="n1", gpu_indices=(0,), gpu_milli_each=1000),),
        chosen=CandidateScore(cluster="east", total=1),
        explanation="there",
    )
    seen: list[str] = []

    async def consume() -> None:
        async for event in stream:
            seen.append(event.event)
            if event.history:
                # The decision and the end arrive together, on two topics: whichever the stream reads
                # first, it must deliver both before it ends.
                events = [
                    placed,
                    JobStarted(job_id=job_id, cluster="east"),
                    JobSucceeded(job_id=job_id, cluster="east"),
                ]
                await append(stack.log, events)

    await asyncio.wait_for(consume(), timeout=60)
    assert seen[0] == "JobSubmitted" and seen[-1] == "JobSucceeded"
    assert sorted(seen[1:]) == ["JobPlaced", "JobStarted", "JobSucceeded"]


async def test_concurrent_watches_share_the_api_reads_and_each_ends_with_its_own_job(stack: Stack) -> None:
    jobs = [await submit(stack, stack.keys.hs(), name=f"watched-{i}") for i in range(8)]
    await stack.fold()
    client = stack.client(stack.keys.hs())
    tails = stack.api.tails
    assert tails is not None

    async def watch_one(job_id: str) -> list[str]:
        stream = client.stream(client.jobs.WatchJob, jobs_pb2.WatchJobRequest(job_id=job_id, skip_history=True))
        return [event.event async for event in stream if event.job_id == job_id]

    watches = [asyncio.create_task(watch_one(job_id)) for job_id in jobs]
    deadline = asyncio.get_running_loop().time() + 30
    while tails.watching < 2 * len(jobs):  # every watch reads its jobs partition and the decisions one
        assert asyncio.get_running_loop().time() < deadline, tails.watching
        await asyncio.sleep(0.05)
    # One reader per partition watched, not one per watch.
    assert tails.partitions <= len({partition_for(job_id.encode(), JOBS.partitions) for job_id in jobs}) + 1
    for job_id in jobs:
        ended = [JobStarted(job_id=job_id, cluster="east"), JobSucceeded(job_id=job_id, cluster="east")]
        await append(stack.log, ended)
    results = await asyncio.wait_for(asyncio.gather(*watches), 60)
    assert results == [["JobStarted", "JobSucceeded"]] * len(jobs)
    deadline = asyncio.get_running_loop().time() + 30
    while tails.partitions:  # each partition's reader stops with its last watch
        assert asyncio.get_running_loop().time() < deadline, tails.partitions
        await asyncio.sleep(0.05)
