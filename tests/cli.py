"""Running the ``fedsched`` command as an operator would, in a subprocess, for end-to-end tests."""

from __future__ import annotations

import asyncio
import os
import sys


async def fedsched(*args: str, dsn: str, timeout_s: float = 120) -> tuple[int, str]:
    """Exit code and output (standard output; standard error too when it failed)."""
    env = {**os.environ, "FEDSCHED_POSTGRES_DSN": dsn, "FEDSCHED_LOG": dsn}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    assert process.returncode is not None
    return process.returncode, out.decode() + (err.decode() if process.returncode else "")
