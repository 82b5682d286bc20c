"""The distributed mode's components, each a separate OS process (``tests.soak.supervised``): what
each runs, the fleet of them, and what their ``/metrics`` say.

Called by the soak's run (build, start, stop) and its chaos (kill, stop and continue a process, find the
leader). Each component runs the command ``fedsched up --config`` gives it
(``services.runtime.supervisor.SupervisorConfig.commands``), here with the flags of the soak's own Kafka
and PostgreSQL: two schedulers (leader and hot standby, by election), the gRPC API (without its intake),
the intake on its own, the faust projections worker, the audit archiver (signing checkpoints with the
key in ``FEDSCHED_AUDIT_SIGNING_KEY_FILE`` when this fedsched can), governance, and one simulated
cluster connector per cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tests.soak.backing import Backing
from tests.soak.supervised import Component, Exit, Spec

ISSUER = "fedsched-soak"
AUDIENCE = "fedsched"
CLUSTERS = ("sim-a", "sim-b")
CHECKPOINT_EVERY_S = 5


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
            *("--data-dir", str(workdir / "projections")),  # faust's default is a folder in the working directory
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
