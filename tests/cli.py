"""Running the ``fedsched`` command as an operator would, in a subprocess, for end-to-end tests."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping


async def fedsched(
    *args: str, dsn: str, timeout_s: float = 120, env: Mapping[str, str] | None = None
) -> tuple[int, str]:
    """Exit code and output (standard output; standard error too when it failed). ``env``: more of the
    environment (``FEDSCHED_SERVER`` and ``FEDSCHED_TOKEN`` for the commands that call the API)."""
    environment = {**os.environ, "FEDSCHED_POSTGRES_DSN": dsn, "FEDSCHED_LOG": dsn, **(env or {})}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "services.cli.main",
        *args,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=timeout_s)
    assert process.returncode is not None
    return process.returncode, out.decode() + (err.decode() if process.returncode else "")
