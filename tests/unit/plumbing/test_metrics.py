"""Health and Prometheus metrics as a scraper and a load balancer see them, over real HTTP."""

from __future__ import annotations

import asyncio

import pytest

from events.plumbing.metrics import Metrics

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.usefixtures("this_tests_health_only")]


async def get(port: int, path: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = data.decode().partition("\r\n\r\n")
    return int(head.split()[1]), body


async def test_metrics_are_exposed_in_prometheus_text_and_health_names_what_fails() -> None:
    metrics = Metrics()
    healthy = {"scheduler": True}
    metrics.add_source(
        lambda: [("fedsched_queue_depth", {"priority_class": 'st"d'}, 3), ("fedsched_scheduler_leader", {}, 1)]
    )
    metrics.add_source(lambda: 1 / 0)  # a broken source does not take the scrape down
    metrics.add_check("scheduler", lambda: healthy["scheduler"])
    server = await metrics.serve("127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code, body = await get(port, "/metrics")
        assert code == 200
        assert "# TYPE fedsched_queue_depth gauge" in body
        assert 'fedsched_queue_depth{priority_class="st\\"d"} 3' in body
        assert "fedsched_scheduler_leader 1" in body
        assert await get(port, "/healthz") == (200, "ok\n")
        healthy["scheduler"] = False
        code, body = await get(port, "/healthz")
        assert (code, body) == (503, "failing: scheduler\n")
        assert (await get(port, "/nope"))[0] == 404
    finally:
        server.close()
        await server.wait_closed()


async def test_the_scheduler_reports_queue_depth_per_class_and_where_its_last_cycle_went() -> None:
    from types import SimpleNamespace

    from events.wire.envelope import Envelope
    from services.scheduler.core.state import SchedulerState
    from services.scheduler.host import Metrics as SchedulerMetrics
    from services.scheduler.host import SchedulerHost
    from tests.unit.projections.builders import a_job

    state = SchedulerState()
    for i in range(3):
        state.fold(Envelope(id=f"e{i}", time_ms=1_800_000_000_000, data=a_job(f"j{i}")))
    metrics = SchedulerMetrics(last_phases_ms={"decide": 12.0, "append": 5.0, "fold": 0.5})
    samples = SchedulerHost.samples(SimpleNamespace(metrics=metrics, state=state))  # type: ignore[arg-type]
    assert ("fedsched_queue_depth", {"priority_class": "standard"}, 3) in samples
    assert ("fedsched_scheduler_cycle_phase_seconds", {"phase": "decide"}, 0.012) in samples
    assert ("fedsched_scheduler_cycle_phase_seconds", {"phase": "fold"}, 0.0005) in samples


async def test_a_process_serves_its_samples_and_lag_and_is_unhealthy_when_the_lag_goes_stale() -> None:
    import socket

    from events.hosting.lag import Lag
    from events.log.contract import TopicPartition
    from events.log.memory import MemoryLog
    from events.plumbing.metrics import serving

    log = MemoryLog()
    for i in range(7):
        log.append_raw("fedsched.jobs", b"k", f"v{i}".encode(), (), i)
    tp = next(TopicPartition("fedsched.jobs", p) for p, part in enumerate(log.parts["fedsched.jobs"]) if part)
    positions = {tp: 3}
    away = False

    def where() -> dict[TopicPartition, int]:
        if away:
            raise ConnectionError("the log does not answer")
        return positions

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lag = Lag(log, "unit", where, every_s=0.05)  # type: ignore[arg-type]
    async with serving(f"127.0.0.1:{port}", [lambda: [("fedsched_unit_total", {}, 2)]], lag=lag) as metrics:
        assert metrics is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while lag.value is None:
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        code, body = await get(port, "/metrics")
        assert code == 200 and "fedsched_unit_total 2" in body
        assert 'fedsched_consumer_lag{component="unit"} 4' in body
        assert await get(port, "/healthz") == (200, "ok\n")
        away = True
        while (await get(port, "/healthz"))[0] != 503:  # stale after three periods without an answer
            assert loop.time() < deadline
            await asyncio.sleep(0.05)
        assert await get(port, "/healthz") == (503, "failing: log\n")
        assert 'fedsched_consumer_lag{component="unit"} 4' in (await get(port, "/metrics"))[1]  # kept
    # Nothing served without a listen address.
    async with serving("", [lambda: []]) as none:
        assert none is None
