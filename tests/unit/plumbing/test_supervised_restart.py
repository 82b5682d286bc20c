"""A supervised component (``events.plumbing.tasks.Supervised``) is started again after it ends early, with
backoff, counted by reason and logged once per restart; it is reported down meanwhile; a fenced one stays
down; stopping the process ends the supervision at once, even in the middle of a backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from events.plumbing.metrics import Metrics
from events.plumbing.tasks import Ended, Supervised, components_down

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(30)]


class Fenced(Exception):
    pass


async def eventually(condition: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        assert loop.time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.001)


class Component:
    """Fails as told, run after run; between failures it runs until stopped."""

    def __init__(self, failures: list[BaseException | None], stop: asyncio.Event) -> None:
        self.failures = failures
        self.stop = stop
        self.runs = 0
        self.restarts = 0
        self.restart_failures: list[BaseException] = []
        self.healthy = asyncio.Event()

    async def run(self) -> None:
        self.runs += 1
        if self.failures:
            failure = self.failures.pop(0)
            if failure is None:
                return  # ends on its own
            raise failure
        self.healthy.set()
        await self.stop.wait()

    async def restart(self) -> None:
        if self.restart_failures:
            raise self.restart_failures.pop(0)
        self.restarts += 1


def supervised(component: Component, **options: object) -> Supervised:
    settings: dict[str, object] = {"initial_s": 0.01, "maximum_s": 0.04, **options}
    return Supervised(
        "worker",
        component.run,
        stop=component.stop,
        restart=component.restart,
        fenced=lambda error: isinstance(error, Fenced),
        **settings,  # type: ignore[arg-type]
    )


async def test_a_crashed_component_is_restarted_with_backoff_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = asyncio.Event()
    component = Component([ValueError("a bug"), ConnectionRefusedError("the database is away"), KeyError("x")], stop)
    runner = supervised(component)
    with caplog.at_level(logging.INFO, logger="fedsched.supervisor"):
        task = asyncio.create_task(runner.run())
        await asyncio.wait_for(component.healthy.wait(), 10)
        assert not runner.down and "worker" not in components_down()
        stop.set()
        await asyncio.wait_for(task, 10)
    assert component.runs == 4 and component.restarts == 3
    assert runner.restarts == {Ended.CRASHED: 2, Ended.UNREACHABLE: 1}
    lines = [r.getMessage() for r in caplog.records if "component_restarted" in r.getMessage()]
    assert lines == [
        "event=component_restarted name=worker attempt=1 reason=crashed",
        "event=component_restarted name=worker attempt=2 reason=unreachable",
        "event=component_restarted name=worker attempt=3 reason=crashed",
    ]
    crashes = [r for r in caplog.records if "component_failed" in r.getMessage()]
    assert [r.exc_info is not None for r in crashes] == [True, False, True]  # a bug's traceback, an outage's line
    samples = {(labels.get("reason"), name): value for name, labels, value in runner.samples()}
    assert samples[("crashed", "fedsched_component_restarts_total")] == 2
    assert samples[(None, "fedsched_component_up")] == 1.0


async def test_it_is_reported_down_until_its_restart_gets_through() -> None:
    stop = asyncio.Event()
    component = Component([ValueError("a bug")], stop)
    component.restart_failures = [ConnectionRefusedError("still away"), ConnectionRefusedError("still away")]
    runner = supervised(component, initial_s=0.2, maximum_s=0.2)
    metrics = Metrics()
    task = asyncio.create_task(runner.run())
    try:
        await eventually(lambda: runner.down, "it is down after its crash")
        assert "worker" in components_down() and "worker" in metrics.failing()
        await asyncio.wait_for(component.healthy.wait(), 10)
        assert not runner.down and "worker" not in metrics.failing()
        # Two failed restarts are waited out and counted like the crash.
        assert runner.restarts == {Ended.CRASHED: 1, Ended.UNREACHABLE: 2} and component.restarts == 1
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_fenced_component_is_not_restarted_and_stays_down(caplog: pytest.LogCaptureFixture) -> None:
    stop = asyncio.Event()
    component = Component([Fenced("another instance took over")], stop)
    runner = supervised(component)
    with caplog.at_level(logging.INFO, logger="fedsched.supervisor"):
        await asyncio.wait_for(runner.run(), 10)  # returns: nothing more to supervise
    assert component.runs == 1 and component.restarts == 0 and runner.attempts == 0
    assert runner.down and runner.last_end is Ended.FENCED and "worker" in components_down()
    assert any("component_stopped name=worker reason=fenced" in r.getMessage() for r in caplog.records)


async def test_a_component_that_returns_on_its_own_is_final_unless_asked_to_restart() -> None:
    stop = asyncio.Event()
    final = supervised(Component([None], stop))
    await asyncio.wait_for(final.run(), 10)
    assert final.down and final.last_end is Ended.RETURNED and final.attempts == 0

    component = Component([None], stop)
    again = supervised(component, restart_on_return=True)
    task = asyncio.create_task(again.run())
    await asyncio.wait_for(component.healthy.wait(), 10)
    assert again.restarts == {Ended.RETURNED: 1} and not again.down
    stop.set()
    await asyncio.wait_for(task, 10)
    del final


async def test_stopping_during_a_backoff_ends_the_supervision_at_once() -> None:
    stop = asyncio.Event()
    component = Component([ValueError("a bug")], stop)
    runner = supervised(component, initial_s=60.0, maximum_s=60.0)
    task = asyncio.create_task(runner.run())
    await eventually(lambda: runner.down, "it waits out its backoff")
    stop.set()
    await asyncio.wait_for(task, 5)
    assert component.runs == 1 and not runner.down  # stopping: nothing is down


async def test_the_backoff_starts_over_after_a_run_that_lasted() -> None:
    now = [0.0]
    stop = asyncio.Event()
    healthy = asyncio.Event()
    runs = [0]

    async def run() -> None:
        runs[0] += 1
        if runs[0] == 3:
            now[0] += 100.0  # the third run lasts past settled_s before it crashes
        if runs[0] <= 3:
            raise ValueError(f"crash {runs[0]}")
        healthy.set()
        await stop.wait()

    runner = Supervised("worker", run, stop=stop, initial_s=0.01, maximum_s=1.0, settled_s=10.0, clock=lambda: now[0])
    delays: list[float] = []
    original = runner._backoff.next_delay

    def recorded() -> float:
        delays.append(original())
        return delays[-1]

    runner._backoff.next_delay = recorded  # type: ignore[method-assign]
    task = asyncio.create_task(runner.run())
    await asyncio.wait_for(healthy.wait(), 10)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert len(delays) == 3
    assert delays[1] > delays[0] * 1.3  # doubled (give or take the jitter) after a crash at once
    assert delays[2] < delays[1]  # after a run that lasted, from the start again
