"""How a service process learns it should stop: SIGINT or SIGTERM set one event its loops watch."""

from __future__ import annotations

import asyncio
import signal


def stop_on_signals(stop: asyncio.Event | None = None) -> asyncio.Event:
    """``stop`` (or a new event), set on SIGINT or SIGTERM. Call from inside the running loop."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
