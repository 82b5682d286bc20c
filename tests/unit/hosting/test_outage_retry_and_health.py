"""Riding out an outage (``events.plumbing.outage``): backoff, one warning per streak, the health it reports, and
the loops that use it (governance, archiver, read-model sink) on fakes that fail N times then work."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import pytest
from aiokafka.errors import KafkaTimeoutError

from events.audit.archive import AuditArchiver
from events.log.contract import LogRecord, ProducerFenced, TopicPartition
from events.plumbing.health import DependencyProbe
from events.plumbing.metrics import Metrics
from events.plumbing.outage import Outage, Unreachable, reaching, transient, unreachable_now
from projections.faust.sink import Sink
from services.governance.host import GovernanceHost

pytestmark = [pytest.mark.timeout(30), pytest.mark.usefixtures("this_tests_health_only")]

KAFKA_DOWN = KafkaTimeoutError("Failed to get offsets by times in 40000 ms")


def quick(component: str = "test") -> Outage:
    return Outage(component, initial_s=0.001, maximum_s=0.004, jitter=0.0)


async def eventually(condition: Any, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.001)


# -- the pure mechanism ---------------------------------------------------------------------------------


def test_backoff_doubles_up_to_its_cap_and_starts_over_after_a_recovery() -> None:
    outage = Outage("test", initial_s=0.5, maximum_s=4.0, jitter=0.0)
    assert [outage.failed("log", KAFKA_DOWN) for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    outage.recovered()
    assert outage.failed("log", KAFKA_DOWN) == 0.5


def test_jitter_stays_within_its_band() -> None:
    outage = Outage("test", initial_s=1.0, maximum_s=1.0, jitter=0.2, rng=random.Random(7))
    delays = [outage.failed("log", KAFKA_DOWN) for _ in range(200)]
    assert all(0.8 <= d <= 1.2 for d in delays) and len(set(delays)) > 1


def test_one_warning_per_failure_streak_and_one_line_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    outage = Outage("governance")
    with caplog.at_level(logging.INFO, logger="fedsched.outage"):
        for _ in range(50):
            outage.failed("log", KAFKA_DOWN)
        outage.recovered()
        outage.recovered()  # nothing was failing: nothing to say
        outage.failed("log", KAFKA_DOWN)
    lines = [(r.levelno, r.getMessage().split()[0]) for r in caplog.records]
    assert lines == [
        (logging.WARNING, "event=dependency_unreachable"),
        (logging.INFO, "event=dependency_recovered"),
        (logging.WARNING, "event=dependency_unreachable"),
    ]
    assert "attempts=50" in caplog.records[1].getMessage()


def test_health_fails_naming_the_dependency_while_a_streak_lasts() -> None:
    metrics = Metrics()
    metrics.add_check("log", lambda: True)
    outage = Outage("archiver")
    assert metrics.failing() == []
    outage.failed("postgres", ConnectionRefusedError(111, "Connect call failed"))
    assert metrics.failing() == ["postgres"]
    outage.recovered()
    assert metrics.failing() == []
    outage.failed("log", KAFKA_DOWN)
    outage.forget()  # the loop stopped: nothing is waiting for the log any more
    assert "log" not in unreachable_now()


@pytest.mark.parametrize(
    "error",
    [
        KAFKA_DOWN,
        ConnectionRefusedError(111, "Connect call failed"),
        TimeoutError(),
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.TooManyConnectionsError("sorry, too many clients already"),
    ],
)
def test_an_away_dependency_is_transient(error: BaseException) -> None:
    assert transient(error)


@pytest.mark.parametrize(
    "error",
    [ProducerFenced("newer instance"), ValueError("a bug"), asyncpg.exceptions.UndefinedTableError("no table")],
)
def test_a_fault_of_ours_is_not_transient(error: BaseException) -> None:
    assert not transient(error)


def test_reaching_blames_the_dependency_and_lets_other_errors_through() -> None:
    with pytest.raises(Unreachable) as caught, reaching("postgres"):
        raise ConnectionRefusedError(111, "refused")
    assert caught.value.dependency == "postgres"
    with pytest.raises(Unreachable) as nested, reaching("log"), reaching("postgres"):
        raise OSError("reset")
    assert nested.value.dependency == "postgres"  # the innermost blame stands
    with pytest.raises(ValueError), reaching("log"):
        raise ValueError("a bug")


# -- the loops, on fakes that fail a number of times and then work -------------------------------------


class Flaky:
    """Raises ``error`` on the first ``failures`` calls of ``fail_on``."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def maybe_fail(self) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error


class FakeReader:
    def __init__(self, records: Mapping[TopicPartition, list[LogRecord]], flaky: Flaky) -> None:
        self.records, self.flaky = records, flaky
        self.closed = False

    async def end_offsets(self, tps: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        self.flaky.maybe_fail()
        return {tp: len(self.records.get(tp, [])) for tp in tps}

    async def end_offset(self, tp: TopicPartition) -> int:
        return len(self.records.get(tp, []))

    async def read(
        self, tp: TopicPartition, offset: int, *, max_records: int = 500, timeout_s: float = 0.0
    ) -> list[LogRecord]:
        batch = self.records.get(tp, [])[offset : offset + max_records]
        if not batch:
            await asyncio.sleep(timeout_s)  # as a real log waits for records (and lets others run)
        return batch

    async def caught_up(self, tp: TopicPartition, offset: int) -> bool:
        return offset >= len(self.records.get(tp, []))

    async def close(self) -> None:
        self.closed = True


class FakeProducer:
    def __init__(self) -> None:
        self.appended: list[Any] = []

    async def append(self, records: Sequence[Any], *, offsets: Any = None) -> list[Any]:
        self.appended += records
        return []

    async def close(self) -> None:
        pass


class FakeLog:
    commit_markers = False

    def __init__(self, flaky: Flaky, records: Mapping[TopicPartition, list[LogRecord]] | None = None) -> None:
        self.flaky, self.records = flaky, dict(records or {})
        self.readers: list[FakeReader] = []

    async def partitions(self, topic: str) -> int:
        return 1

    async def reader(self) -> FakeReader:
        self.readers.append(FakeReader(self.records, self.flaky))
        return self.readers[-1]

    async def producer(self, transactional_id: str | None = None) -> FakeProducer:
        return FakeProducer()


@pytest.mark.asyncio
async def test_governance_rides_out_a_log_that_times_out_then_answers() -> None:
    flaky = Flaky(3, KAFKA_DOWN)
    host = GovernanceHost(FakeLog(flaky))  # type: ignore[arg-type]
    host.outage = quick("governance")
    await host.start()
    stop = asyncio.Event()
    seen_failing: list[list[str]] = []
    metrics = Metrics()

    async def watch_health() -> None:
        while not stop.is_set():
            seen_failing.append(metrics.failing())
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch_health())
    run = asyncio.create_task(host.run(stop, poll_s=0.001))
    await eventually(lambda: flaky.calls > 3 and host.outage.failing is None)
    assert not run.done()  # the old host ended here with the KafkaTimeoutError
    assert ["log"] in seen_failing
    assert host.outage.streaks == 1
    stop.set()
    await asyncio.wait_for(run, 5)
    watcher.cancel()
    assert metrics.failing() == []
    await host.close()


@pytest.mark.asyncio
async def test_governance_still_ends_on_an_error_that_is_not_an_outage() -> None:
    host = GovernanceHost(FakeLog(Flaky(1, ValueError("a bug"))))  # type: ignore[arg-type]
    await host.start()
    with pytest.raises(ValueError):
        await asyncio.wait_for(host.run(asyncio.Event(), poll_s=0.001), 5)
    await host.close()


class FailingPool:
    """An asyncpg pool whose every call is refused the first ``failures`` times, then works on a
    dictionary of chain heads (enough for the archiver's position lookups)."""

    def __init__(self, flaky: Flaky) -> None:
        self.flaky = flaky

    async def fetchval(self, query: str, *args: Any) -> Any:
        self.flaky.maybe_fail()
        return None


@pytest.mark.asyncio
async def test_archiver_rides_out_a_refused_database_and_then_an_away_log() -> None:
    tp = TopicPartition("t", 0)
    archiver = AuditArchiver(
        FakeLog(Flaky(2, KAFKA_DOWN)), FailingPool(Flaky(2, ConnectionRefusedError(111, "no"))), ["t"]
    )  # type: ignore[arg-type]
    archiver._sink._schema_ready = True  # the schema is the real PostgreSQL test's business
    archiver.outage = quick("archiver")
    blamed: list[str] = []
    failed = archiver.outage.failed

    def spy(dependency: str, error: BaseException) -> float:
        blamed.append(dependency)
        return failed(dependency, error)

    archiver.outage.failed = spy  # type: ignore[method-assign]
    stop = asyncio.Event()
    run = asyncio.create_task(archiver.run(stop, idle_wait_s=0.001))
    await eventually(lambda: tp in archiver.positions and archiver.outage.failing is None)
    assert not run.done()
    assert blamed == ["postgres", "postgres", "log", "log"]
    stop.set()
    await asyncio.wait_for(run, 5)
    await archiver.close()


class RefusingSink(Sink):
    def __init__(self, failures: int) -> None:
        super().__init__("postgresql://unused", "rm")
        self.flaky = Flaky(failures, ConnectionRefusedError(111, "Connect call failed"))
        self.written: list[str] = []
        self.outage = quick("projections")

    async def _write(self, stage: str, entities: Mapping[str, Any]) -> None:
        self.flaky.maybe_fail()
        self.written.append(stage)


@pytest.mark.asyncio
async def test_read_model_sink_waits_for_postgres_instead_of_crashing_the_worker() -> None:
    sink = RefusingSink(4)
    failing: list[list[str]] = []
    metrics = Metrics()
    original = sink.outage.wait

    async def observed(dependency: str, error: BaseException, stop: asyncio.Event | None = None) -> None:
        await original(dependency, error, stop)
        failing.append(metrics.failing())

    sink.outage.wait = observed  # type: ignore[method-assign]
    await asyncio.wait_for(sink.write("nodes", {"n1": None}), 5)
    assert sink.written == ["nodes"]  # once, after the refusals
    assert failing == [["postgres"]] * 4
    assert metrics.failing() == []


@pytest.mark.asyncio
async def test_dependency_probe_names_what_does_not_answer_and_clears_after() -> None:
    answers = {"log": True, "postgres": True}
    changes: list[list[str]] = []

    def probe(name: str) -> Any:
        async def check() -> None:
            if not answers[name]:
                raise ConnectionRefusedError(111, "refused")

        return check

    async def hang() -> None:
        await asyncio.Event().wait()

    async def changed(failing: list[str]) -> None:
        changes.append(failing)

    health = DependencyProbe(
        {"log": probe("log"), "postgres": probe("postgres"), "slow": hang}, timeout_s=0.01, on_change=changed
    )
    metrics = Metrics()
    assert await health.check() == ["slow"]  # a probe that hangs is bounded, and counts as down
    health._probes.pop("slow")
    answers["postgres"] = False
    assert await health.check() == ["postgres"]
    assert metrics.failing() == ["postgres"]
    answers["postgres"] = True
    assert await health.check() == []
    assert changes == [["slow"], ["postgres"], []]
    await health.close()
