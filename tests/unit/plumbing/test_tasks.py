"""cancel_and_wait stops a task that loses its first cancellation (as 3.11's wait_for can make it)."""

from __future__ import annotations

import asyncio

from events.plumbing.tasks import cancel_and_wait


def test_a_task_that_swallows_a_cancellation_is_cancelled_again_until_it_ends() -> None:
    swallowed = []

    async def stubborn() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            swallowed.append(1)  # lost, as a wait_for race would lose it
        await asyncio.Event().wait()

    async def failing() -> None:
        raise ValueError("taken, not raised")

    async def main() -> list[asyncio.Task[None]]:
        tasks = [asyncio.create_task(stubborn()), asyncio.create_task(failing())]
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_and_wait(tasks, again_after_s=0.05), timeout=10)
        return tasks

    tasks = asyncio.run(main())
    assert swallowed == [1]
    assert tasks[0].cancelled()
    assert isinstance(tasks[1].exception(), ValueError)


def test_tasks_that_end_within_the_grace_are_not_cancelled_and_the_rest_are() -> None:
    async def main() -> tuple[asyncio.Task[str], asyncio.Task[None]]:
        told = asyncio.Event()

        async def obedient() -> str:
            await told.wait()
            return "ended on its own"

        tasks = (asyncio.create_task(obedient()), asyncio.create_task(asyncio.Event().wait()))
        told.set()
        await asyncio.wait_for(cancel_and_wait(tasks, grace_s=0.5, again_after_s=0.05), timeout=10)
        return tasks  # type: ignore[return-value]

    obedient, deaf = asyncio.run(main())
    assert obedient.result() == "ended on its own"
    assert deaf.cancelled()
