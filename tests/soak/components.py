"""The distributed mode's components as separate OS processes, kept running as a supervisor would.

Called by the soak's run (start, stop) and its chaos (kill, stop and continue a process, find the
leader). Each component is started as ``fedsched up --config`` starts it
(``services.runtime.supervisor``): ``python -m services.cli.main <command> ...``, here with the flags of
the soak's own Kafka and PostgreSQL: two schedulers (leader and hot standby, by election), the gRPC API
(without its intake), the intake on its own, the faust projections worker, the audit archiver (signing
checkpoints with the key in ``FEDSCHED_AUDIT_SIGNING_KEY_FILE`` when this fedsched can), governance,
and one simulated cluster connector per cluster.

A process that exits is started again (like Kubernetes restarts a pod): half a second after a kill of
ours, with a growing backoff after an exit nobody asked for. Those unplanned exits are counted with the
tail of their log, for the report. Secrets reach the processes through the environment, never argv.
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.soak.backing import ROOT, Backing

ISSUER = "fedsched-soak"
AUDIENCE = "fedsched"
CLUSTERS = ("sim-a", "sim-b")
CHECKPOINT_EVERY_S = 5
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


def specs(backing: Backing, workdir: Path, ports: list[int], *, signing: bool) -> list[Spec]:
    """Every component, with the API's port first in ``ports`` and one metrics port each after it;
    ``signing``: the archiver signs checkpoints into ``workdir/checkpoints``."""
    log, dsn = backing.log_url, backing.dsn
    api_port, *metrics = ports
    auth = ("--issuer", ISSUER, "--audience", AUDIENCE)

    def served(name: str, role: str, port: int, *argv: str, flag: str = "--metrics") -> Spec:
        return Spec(name, role, (*argv, flag, f"127.0.0.1:{port}"), port)

    out = [
        served("scheduler-1", "scheduler", metrics[0], "scheduler", "--log", log),
        served("scheduler-2", "scheduler", metrics[1], "scheduler", "--log", log),
        served(
            "api",
            "api",
            metrics[2],
            *("api", "--log", log, "--dsn", dsn, "--listen", f"127.0.0.1:{api_port}", "--no-intake", *auth),
            flag="--metrics-listen",
        ),
        Spec("intake", "intake", ("intake", "--log", log, "--dsn", dsn, *auth)),
        served(
            "projections",
            "projections",
            metrics[3],
            *("projections", "worker", "--log", log, "--dsn", dsn, "--lag-every-s", "1"),
        ),
        served(
            "archiver",
            "archiver",
            metrics[4],
            *("audit", "archive", "--log", log, "--dsn", dsn),
            *(
                ("--checkpoint-dir", str(workdir / "checkpoints"), "--checkpoint-every", str(CHECKPOINT_EVERY_S))
                if signing
                else ()
            ),
        ),
        served("governance", "governance", metrics[5], "gov", "run", "--log", log),
    ]
    for index, cluster in enumerate(CLUSTERS):
        nodes = str(workdir / f"{cluster}.yaml")
        argv = ("connector", "sim", "--cluster", cluster, "--nodes", nodes, "--log", log, "--seed", str(index))
        out.append(Spec(cluster, "sim", (*argv, "--start-delay-s", "1", "--usage-interval-s", "30")))
    return out


PORTS_NEEDED = 7  # the API's, then six metrics ports


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
        self._killed = True
        if self.paused:
            self.resume()
        os.kill(pid, signal.SIGKILL)
        return pid

    def pause(self) -> int | None:
        pid = self.pid
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)
            self.paused = True
        return pid

    def resume(self) -> None:
        pid = self.pid
        if pid is not None and self.paused:
            os.kill(pid, signal.SIGCONT)
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


@dataclass
class Fleet:
    """Every component of the soak, by name."""

    components: dict[str, Component] = field(default_factory=dict)
    kills: Counter[str] = field(default_factory=Counter)

    @classmethod
    def build(cls, specs: list[Spec], env: dict[str, str], logs: Path, seed: int) -> Fleet:
        logs.mkdir(parents=True, exist_ok=True)
        hash_seeds = random.Random(f"hash-seeds-{seed}")
        return cls({s.name: Component(s, env, logs, hash_seeds) for s in specs})

    def start(self) -> None:
        for component in self.components.values():
            component.start()

    def role(self, role: str) -> list[Component]:
        return [c for c in self.components.values() if c.spec.role == role]

    async def leaders(self) -> list[Component]:
        """The schedulers that say they lead now (a stopped one cannot say)."""
        out = []
        for scheduler in self.role("scheduler"):
            if scheduler.pid is None or scheduler.paused or scheduler.spec.metrics_port is None:
                continue
            metrics = await scrape(scheduler.spec.metrics_port)
            if metrics.get("fedsched_scheduler_leader") == 1.0:
                out.append(scheduler)
        return out

    def kill(self, component: Component, label: str) -> int | None:
        pid = component.kill()
        if pid is not None:
            self.kills[label] += 1
        return pid

    async def shutdown(self, names: list[str] | None = None) -> dict[str, int | None]:
        chosen = [c for c in self.components.values() if names is None or c.name in names]
        codes = await asyncio.gather(*(c.shutdown() for c in chosen))
        return {c.name: code for c, code in zip(chosen, codes, strict=True)}

    def unplanned(self) -> list[Exit]:
        return sorted((e for c in self.components.values() for e in c.unplanned), key=lambda e: e.at_ms)

    def hash_seeds_used(self) -> set[int]:
        return {s for c in self.components.values() for s in c.hash_seeds_used}


async def scrape(port: int, timeout_s: float = 2.0) -> dict[str, float]:
    """A process's ``/metrics`` (series, with its labels as exposed, -> value); empty if it does not answer."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout_s)
    except (OSError, TimeoutError):
        return {}
    try:
        writer.write(b"GET /metrics HTTP/1.0\r\nHost: soak\r\n\r\n")
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout_s)
    except (OSError, TimeoutError):
        return {}
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    out: dict[str, float] = {}
    for line in raw.decode(errors="replace").split("\r\n\r\n", 1)[-1].splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#"):
            with contextlib.suppress(ValueError):
                out[name] = float(value)
    return out


def free_ports(count: int) -> list[int]:
    import socket

    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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
