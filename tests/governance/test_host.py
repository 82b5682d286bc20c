"""The governance host on the real logs (Kafka and the embedded PostgreSQL log): approvals by rule and by a
person, the quota set at grant start, findings, and a restart that re-reads the log and repeats nothing."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import pytest
import pytest_asyncio

from events.catalog.base import Event
from events.catalog.decisions import CandidateScore, JobPlaced, ReplicaPlacement
from events.catalog.governance import (
    GovernanceFinding,
    QuotaLine,
    QuotaRequestApproved,
    QuotaRequestSubmitted,
    QuotaSet,
)
from events.catalog.jobs import JobFailed, JobStarted, JobSubmitted
from events.catalog.reasons import ReasonCode
from events.catalog.topics import GOVERNANCE, TOPICS, Cleanup, TopicSpec
from events.catalog.types import ClusterId, CycleId, JobId, NodeId, QuotaRequestId, ResourceKind, Resources, TenantId
from events.log import EventLog, TopicPartition
from events.log.publisher import Publisher, to_record
from events.log.reading import SKEW_VARIABLE, read_to_end
from events.wire.codec import decode
from services.governance.core.quota import decide
from services.governance.host import GovernanceHost

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(60)]
T0 = 1_800_000_000_000
HOUR_MS = 3_600_000
_ticks = itertools.count()


@pytest.fixture(autouse=True)
def _stories_run_ahead_of_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stories' clock is set in 2027, weeks ahead of the log's own time: the hosts' default check of
    event times against it (``events.log.reading``) would refuse every event, so it is off here."""
    monkeypatch.setenv(SKEW_VARIABLE, "off")


class Story:
    """Publishes facts into a private copy of the catalogue's topics, at increasing log times."""

    def __init__(self, event_log: EventLog, prefix: str) -> None:
        self.log, self.prefix = event_log, prefix
        self.publisher = Publisher(event_log, "urn:test", clock=lambda: T0 + next(_ticks) * 60_000)

    async def tell(self, *events: Event) -> None:
        records = [to_record(self.publisher.envelope(e)) for e in events]
        assert self.publisher._producer is not None
        renamed = [type(r)(f"{self.prefix}.{r.topic}", value=r.value, key=r.key, headers=r.headers) for r in records]
        await self.publisher._producer.append(renamed)

    async def governance(self) -> list[Event]:
        reader = await self.log.reader()
        out: list[Event] = []
        async for batch in read_to_end(reader, TopicPartition(f"{self.prefix}.{GOVERNANCE.name}", 0)):
            out += [decode(r.headers, r.value).data for r in batch]
        await reader.close()
        return out


@pytest_asyncio.fixture(loop_scope="session")
async def story(event_log: EventLog, make_topic: Callable[..., Awaitable[str]]) -> Story:
    prefix = (await make_topic(1)).replace(".", "-")
    await event_log.create_topics(
        [TopicSpec(f"{prefix}.{s.name}", s.partitions, s.key, Cleanup.DELETE, -1, s.purpose) for s in TOPICS]
    )
    told = Story(event_log, prefix)
    await told.publisher.start()
    return told


async def outputs_until(host: GovernanceHost, expected: set[str], timeout_s: float = 20) -> list[str]:
    """Every output id of the host's steps (sorted) until the expected ones came out; Kafka makes a
    committed transaction readable a moment after the append returns."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    got: list[str] = []
    while not expected <= set(got):
        assert loop.time() < deadline, f"only {got}"
        got += [o.id for o in await host.step()]
        await asyncio.sleep(0.02)
    return sorted(got)


def request(request_id: str, amount: int) -> QuotaRequestSubmitted:
    return QuotaRequestSubmitted(
        request_id=QuotaRequestId(request_id),
        tenant=TenantId("team-a"),
        resource=ResourceKind.GPU,
        amount=amount,
        period_start_ms=T0,
        period_end_ms=T0 + 24 * HOUR_MS,
        justification="deadline",
        requester="alice@example.com",
    )


def failing_run(i: int) -> list[Event]:
    job, cluster = JobId(f"etl-{i}"), ClusterId("c1")
    placed = JobPlaced(
        job_id=job,
        cycle_id=CycleId("c1"),
        cluster=cluster,
        replicas=(ReplicaPlacement(replica=0, node=NodeId(f"n{i}"), gpu_indices=(0,), gpu_milli_each=1000),),
        chosen=CandidateScore(cluster=cluster, total=0),
        explanation="test",
    )
    return [
        JobSubmitted(job_id=job, name="etl", tenant=TenantId("team-a"), resources=Resources(gpus=1)),
        placed,
        JobStarted(job_id=job, cluster=cluster),
        JobFailed(job_id=job, cluster=cluster, reason=ReasonCode.NON_ZERO_EXIT),
    ]


async def test_approvals_quota_changes_and_findings_are_published_once_even_across_a_restart(story: Story) -> None:
    line = QuotaLine(resource=ResourceKind.GPU, guaranteed=1000, limit=1000)
    await story.tell(QuotaSet(tenant=TenantId("team-a"), lines=(line,), set_by="ops"))
    await story.tell(request("qr-small", 1000), request("qr-big", 8000))
    for i in range(3):
        await story.tell(*failing_run(i))
    host = GovernanceHost(story.log, namespace=story.prefix, transactional_id="gov-test")
    await host.start()
    try:
        # The rule's approval, once read back, takes effect from its start.
        first = await outputs_until(host, {"gov:quota-approve:qr-small", "gov:quota-start:qr-small"})
        assert first == ["gov:finding:crash-loop:etl-2:1", "gov:quota-approve:qr-small", "gov:quota-start:qr-small"]
        await story.tell(decide(request("qr-big", 8000), approve=True, by="ops@example.com", comment="ok"))
        assert await outputs_until(host, {"gov:quota-start:qr-big"}) == ["gov:quota-start:qr-big"]
    finally:
        await host.close()

    restarted = GovernanceHost(story.log, namespace=story.prefix, transactional_id="gov-test")
    await restarted.start()
    try:
        for _ in range(3):
            assert await restarted.step() == [], "a restarted host re-reads its outputs and repeats none"
    finally:
        await restarted.close()

    told = await story.governance()
    approvals = [e for e in told if isinstance(e, QuotaRequestApproved)]
    assert [(a.request_id, a.rule, a.decided_by) for a in approvals] == [
        ("qr-small", "small-gpu-request", None),
        ("qr-big", None, "ops@example.com"),
    ]
    quota_sets = [e for e in told if isinstance(e, QuotaSet) and e.request_id is not None]
    assert [(q.request_id, q.lines[0].guaranteed) for q in quota_sets] == [("qr-small", 2000), ("qr-big", 10000)]
    assert len([e for e in told if isinstance(e, GovernanceFinding)]) == 1


async def test_an_idle_host_evaluates_its_rules_again_only_after_something_was_folded_or_published(
    story: Story, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.governance import host as host_module

    calls: list[int] = []
    real = host_module.evaluate
    monkeypatch.setattr(
        host_module, "evaluate", lambda state, config, offsets: calls.append(1) or real(state, config, offsets)
    )
    line = QuotaLine(resource=ResourceKind.GPU, guaranteed=1000, limit=1000)
    await story.tell(QuotaSet(tenant=TenantId("team-a"), lines=(line,), set_by="ops"))
    host = GovernanceHost(story.log, namespace=story.prefix, transactional_id="gov-idle")
    await host.start()
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while not host.metrics.folded:  # the quota, once readable: folded, and nothing to publish
            assert asyncio.get_running_loop().time() < deadline
            assert await host.step() == []
        before = len(calls)
        assert before >= 1
        for _ in range(5):
            assert await host.step() == []
        assert len(calls) == before  # nothing new was read: the rules would give nothing again
        await story.tell(request("qr-idle", 1000))
        assert await outputs_until(host, {"gov:quota-approve:qr-idle", "gov:quota-start:qr-idle"}) == [
            "gov:quota-approve:qr-idle",
            "gov:quota-start:qr-idle",
        ]
        assert len(calls) > before
    finally:
        await host.close()


async def test_a_quiet_log_is_ticked_so_a_runtime_limit_is_enforced_on_time(story: Story) -> None:
    job, cluster = JobId("long-1"), ClusterId("c1")
    placed = JobPlaced(
        job_id=job,
        cycle_id=CycleId("c1"),
        cluster=cluster,
        replicas=(ReplicaPlacement(replica=0, node=NodeId("n1"), gpu_indices=(0,), gpu_milli_each=1000),),
        chosen=CandidateScore(cluster=cluster, total=0),
        explanation="test",
    )
    submitted = JobSubmitted(
        job_id=job, name="long", tenant=TenantId("team-a"), resources=Resources(gpus=1), max_runtime_s=600
    )
    await story.tell(submitted, placed, JobStarted(job_id=job, cluster=cluster))
    wall = [0]
    host = GovernanceHost(
        story.log, namespace=story.prefix, transactional_id="gov-tick", clock=lambda: wall[0], tick_ms=15_000
    )
    await host.start()
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while host.metrics.folded < 3:
            assert asyncio.get_running_loop().time() < deadline
            assert await host.step() == []
        started = host.state.now_ms
        wall[0] = started + 10_000  # quiet for less than a tick: nothing noted
        assert not await host.tick()
        wall[0] = started + 601_000  # the limit passed while nothing was logged
        assert await host.step() == []  # the log's time has not moved: the rule cannot see it yet
        assert await host.tick()
        assert "gov:runtime:long-1:1" in await outputs_until(host, {"gov:runtime:long-1:1"})
        assert host.state.now_ms == started + 601_000
        assert not await host.tick()  # the tick is the latest moment now
        ticks = [e for e in await story.governance() if e.event_type == "io.fedsched.GovernanceClockTicked"]
        assert len(ticks) == 1
    finally:
        await host.close()


async def test_nothing_is_ticked_while_no_rule_waits_for_time(story: Story) -> None:
    line = QuotaLine(resource=ResourceKind.GPU, guaranteed=1000, limit=1000)
    await story.tell(QuotaSet(tenant=TenantId("team-a"), lines=(line,), set_by="ops"))
    host = GovernanceHost(
        story.log, namespace=story.prefix, transactional_id="gov-no-tick", clock=lambda: T0 + 10**9, tick_ms=15_000
    )
    await host.start()
    try:
        deadline = asyncio.get_running_loop().time() + 20
        while not host.metrics.folded:
            assert asyncio.get_running_loop().time() < deadline
            await host.step()
        assert not await host.tick()
    finally:
        await host.close()
