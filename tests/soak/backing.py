"""The soak's own Kafka broker and PostgreSQL, which it stops and starts again on purpose.

Called by the soak's run (start, close) and its chaos (one outage of each). Calls the development
stack's scripts, as an operator would: ``deploy/local/kafka.sh start|stop DIR`` and
``deploy/local/postgres.py start|stop DIR``, with their data in the soak's own folder. The shared
services of the test command (``FEDSCHED_TEST_KAFKA``, ``FEDSCHED_TEST_POSTGRES``) are never touched.

A restart keeps the address (both scripts reuse the port of the same folder when it is free): if it
came back elsewhere, every component would talk to nothing, so that fails at once, naming the service.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KAFKA_SH = ROOT / "deploy" / "local" / "kafka.sh"
POSTGRES_PY = ROOT / "deploy" / "local" / "postgres.py"


class BackingError(RuntimeError):
    """A backing service that would not start, stop, or come back at its address."""


@dataclass
class Backing:
    root: Path
    bootstrap: str = ""
    dsn: str = ""

    @property
    def kafka_dir(self) -> Path:
        return self.root / "kafka"

    @property
    def postgres_dir(self) -> Path:
        return self.root / "postgres"

    @property
    def log_url(self) -> str:
        return f"kafka://{self.bootstrap}"

    async def start(self) -> None:
        self.bootstrap = await self.start_kafka()
        self.dsn = await self.start_postgres()

    async def start_kafka(self) -> str:
        address = await _last_line("bash", str(KAFKA_SH), "start", str(self.kafka_dir), timeout_s=120)
        _same_address("Kafka", self.bootstrap, address)
        return address

    async def stop_kafka(self) -> None:
        await _last_line("bash", str(KAFKA_SH), "stop", str(self.kafka_dir), timeout_s=90)

    async def start_postgres(self) -> str:
        dsn = await _last_line(sys.executable, str(POSTGRES_PY), "start", str(self.postgres_dir), timeout_s=60)
        _same_address("PostgreSQL", self.dsn, dsn)
        return dsn

    async def stop_postgres(self) -> None:
        await _last_line(sys.executable, str(POSTGRES_PY), "stop", str(self.postgres_dir), timeout_s=60)

    async def close(self) -> None:
        """Stop both (each is idempotent); the first failure is raised after both were tried."""
        results = await asyncio.gather(self.stop_kafka(), self.stop_postgres(), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result


def _same_address(what: str, before: str, now: str) -> None:
    if before and now != before:
        raise BackingError(f"{what} came back at {now}, not {before}: the components cannot follow it there")


async def _last_line(*argv: str, timeout_s: float) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise BackingError(f"{' '.join(argv[1:])}: no answer within {timeout_s:.0f} s") from None
    if process.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-15:]
        raise BackingError(f"{' '.join(argv[1:])} exited {process.returncode}:\n" + "\n".join(tail))
    lines = out.decode().strip().splitlines()
    return lines[-1].strip() if lines else ""
