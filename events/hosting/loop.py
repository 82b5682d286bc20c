"""The loop every host runs: take a step, again and again, riding out outages of what it depends on.

Called by the hosts' ``run`` methods (the scheduler, governance, the audit archiver, the in-process
projection runner, the intake). Calls ``events.plumbing.outage`` for the backoff, the one warning per
failure streak and what ``/healthz`` reports meanwhile.

A step that fails because a dependency is away for now (a transient error, or ``Unreachable`` naming the
dependency) does not end the loop: the host starts over from the positions its sink kept, as a restart
would (``start_over``: drop connections, reload state where it lives in the sink), waits the backoff,
and steps again. Starting over may meet the same outage (a connection to open again): that is not an
end either, the next step meets it again after the backoff. Any other error ends the loop: a bug, or
``ProducerFenced`` (another instance took over), which the host handles as it must (under ``fedsched
up`` and the intake, ``events.plumbing.tasks.Supervised`` restarts a loop that ended on a bug).

A ``CancelledError`` that nobody aimed at the loop's task (a library re-raising the cancellation of a task
of its own: aiokafka's consumer ``stop()`` did, aiokafka#647) is a failure like another, not an end: left
to propagate, it ended a simulated cluster's loop in the stop-28 soak as if the host had been stopped,
while the process lived on without stepping. Only a cancellation of the task itself ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from events.plumbing.outage import Outage, Unreachable, transient

log = logging.getLogger("fedsched.hosting")


async def ride_out(
    step: Callable[[], Awaitable[object]],
    stop: asyncio.Event,
    outage: Outage,
    *,
    start_over: Callable[[], Awaitable[None]],
    dependency: str = "log",
    retry: Callable[[BaseException], bool] = transient,
) -> None:
    """Run ``step`` until ``stop`` is set. ``dependency``: what a bare transient error is blamed on (an
    ``Unreachable`` names its own). ``retry``: which errors start over rather than end the loop (a host
    that restarts itself on any failure but being fenced, as a simulated cluster does, says so; such an
    error that is not an outage is logged with its traceback, since it is a bug being survived)."""
    try:
        while not stop.is_set():
            try:
                await step()
            except Unreachable as error:
                await _start_over(start_over, outage)
                await outage.wait(error.dependency, error.error, stop)
            except asyncio.CancelledError as error:
                if not stray(error):
                    raise
                log.error("event=stray_cancellation component=%s retrying=true", outage.component, exc_info=True)
                await _start_over(start_over, outage)
                await outage.wait(dependency, error, stop)
            except Exception as error:
                if not retry(error):
                    raise
                if not transient(error):
                    log.exception("event=step_failed component=%s retrying=true", outage.component)
                await _start_over(start_over, outage)
                await outage.wait(dependency, error, stop)
            else:
                outage.recovered()
    finally:
        outage.forget()


def stray(error: BaseException) -> bool:
    """Whether ``error`` is a cancellation the current task did not receive (see the module docstring)."""
    task = asyncio.current_task()
    return isinstance(error, asyncio.CancelledError) and task is not None and not task.cancelling()


async def _start_over(start_over: Callable[[], Awaitable[None]], outage: Outage) -> None:
    try:
        await start_over()
    except asyncio.CancelledError as error:
        if not stray(error):
            raise
        log.error("event=stray_cancellation component=%s while=start_over", outage.component, exc_info=True)
    except Exception as error:
        if not isinstance(error, Unreachable) and not transient(error):
            raise
        # Still away: the next step meets it again after the backoff (the streak is logged already).
        log.debug("event=start_over_failed component=%s error=%r", outage.component, error)


__all__ = ["ride_out", "stray"]
