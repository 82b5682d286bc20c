"""The dependency probe keeps going when telling a change fails (the API's gRPC health is set there): the
change is told again at the next round, and ``/healthz`` says what failed meanwhile."""

from __future__ import annotations

import asyncio

import pytest

from events.plumbing.health import DependencyProbe

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.timeout(30)]


async def test_a_failed_on_change_is_made_again_and_the_probe_goes_on() -> None:
    told: list[list[str]] = []
    up = [False]

    async def probe() -> None:
        if not up[0]:
            raise ConnectionRefusedError("away")

    async def on_change(failing: list[str]) -> None:
        if not told:
            told.append(["<failed>"])
            raise RuntimeError("the health servicer is not ready")
        told.append(failing)

    checker = DependencyProbe({"log": probe}, every_s=0.01, on_change=on_change)
    checker.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while told[-1:] != [["log"]]:
            assert loop.time() < deadline, told
            assert checker.unreachable() == ["log"] or not told
            await asyncio.sleep(0.01)
        up[0] = True
        while told[-1] != []:
            assert loop.time() < deadline, told
            await asyncio.sleep(0.01)
        assert told == [["<failed>"], ["log"], []]
    finally:
        await checker.close()
