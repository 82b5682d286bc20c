"""One component's process, kept running as a supervisor would: started again whenever it exits.

Called by the soak's fleet (``tests.soak.components``), which builds one per component, and through it
by the chaos (kill, stop, continue). Starts ``python -m services.cli.main <argv>`` as ``fedsched up
--config`` does (``services.runtime.supervisor``), each start with its own log file and its own
PYTHONHASHSEED (drawn from the soak's seed), the secrets in the environment, never on argv.

Half a second after a kill of ours the process is started again (as Kubernetes restarts a pod); after an
exit nobody asked for, with a growing backoff, and the exit is kept (``Exit``) with the error its log
ends with, for the report.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.soak.backing import ROOT

_KILL_RESTART_S = 0.5
_MAX_BACKOFF_S = 8.0


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    role: str
    argv: tuple[str, ...]
    metrics_port: int | None = None


@dataclass(frozen=True, slots=True)
class Exit:
    """An exit nobody asked for: the process, its code, and the error its log ends with."""

    name: str
    code: int | None
    at_ms: int
    log: Path
    tail: str


class Component:
    """One component's process, started again whenever it exits until ``shutdown``."""

    def __init__(self, spec: Spec, env: dict[str, str], logs: Path, hash_seeds: random.Random) -> None:
        self.spec = spec
        self._env = env
        self._logs = logs
        self._hash_seeds = hash_seeds
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.paused = False
        self.unplanned: list[Exit] = []
        self.hash_seeds_used: list[int] = []
        self._killed = False
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.returncode is None else None

    @property
    def log_path(self) -> Path:
        return self._logs / f"{self.name}.{self.starts}.log"

    def start(self) -> None:
        self._task = asyncio.create_task(self._keep_running(), name=f"soak-{self.name}")

    async def _keep_running(self) -> None:
        backoff = 1.0
        while not self._stopping:
            started = time.monotonic()
            await self._spawn()
            assert self.process is not None
            code = await self.process.wait()
            if self._stopping:
                return
            if self._killed:
                delay = _KILL_RESTART_S
            else:
                self.unplanned.append(Exit(self.name, code, _now_ms(), self.log_path, _tail(self.log_path)))
                backoff = 1.0 if time.monotonic() - started > 30 else min(backoff * 2, _MAX_BACKOFF_S)
                delay = backoff
            self._killed = False
            await asyncio.sleep(delay)  # a supervisor's restart delay, not a wait for a condition

    async def _spawn(self) -> None:
        self.starts += 1
        seed = self._hash_seeds.randrange(1, 2**32 - 1)
        self.hash_seeds_used.append(seed)
        with self.log_path.open("wb") as out:  # the child keeps its own descriptor
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "services.cli.main",
                *self.spec.argv,
                cwd=ROOT,
                env={**self._env, "PYTHONHASHSEED": str(seed)},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        self.paused = False

    def kill(self) -> int | None:
        """SIGKILL the running process (it is started again); its pid, or None if none was running."""
        pid = self.pid
        if pid is None:
            return None
        if self.paused:
            self.resume()
        if not _signal(pid, signal.SIGKILL):
            return None
        self._killed = True  # after the signal went: an exit of its own stays unplanned
        return pid

    def pause(self) -> int | None:
        pid = self.pid
        if pid is not None and _signal(pid, signal.SIGSTOP):
            self.paused = True
            return pid
        return None

    def resume(self) -> None:
        pid = self.pid
        if pid is not None and self.paused:
            _signal(pid, signal.SIGCONT)
        self.paused = False

    async def shutdown(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; not started again. The exit code, None if none ran."""
        self._stopping = True
        process = self.process
        code: int | None = None
        if process is not None and process.returncode is None:
            self.resume()
            process.send_signal(signal.SIGTERM)
            try:
                code = await asyncio.wait_for(process.wait(), grace_s)
            except TimeoutError:
                process.kill()
                code = await process.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return code


def _signal(pid: int, signum: int) -> bool:
    """Whether the signal reached the process: one that has just exited is reaped before asyncio
    records its exit code, so ``pid`` may still name it for a moment."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        return False
    return True


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_ERROR_LINE = re.compile(r"^[\w.]*(Error|Exception|Exit)\b.*")


def _tail(path: Path) -> str:
    """The last error line of the log (what ended the process, as a traceback's last line says), else its
    last line."""
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    return (errors or lines or [""])[-1][:300]
