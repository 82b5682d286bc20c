"""The API process: the gRPC server (jobs, resources, quota, audit, configuration, governance, health,
reflection) and the intake.

Called by ``fedsched api`` and, in embedded mode, by ``fedsched up``: ``api = await serve(config,
quota_rules=..., governance=...)`` (governance's sides of the ports ``services.api.quota_rules`` and
``services.api.governance_reads``; ``log=..., pool=...`` to share an open log and pool), then ``await
api.stop()``. Opens the log and the database unless given, creates the
topics and the API's tables, wires the servicers to the read models (``projections.readmodel.reader``)
and starts the intake task.

The server refuses messages over ``max_message_bytes`` (4 MiB) before parsing them, serves TLS when a
certificate is configured (mutual TLS when a client CA is), and authenticates every call but health.

Health: the log and the database are probed in the background (``events.plumbing.health``); while
either does not answer, the gRPC health service says NOT_SERVING and the process's ``/healthz`` fails
naming it, as the calls that need it answer UNAVAILABLE. The intake is checked the same way: while it
does not read its topic (an outage, or a crash waiting for its supervised restart), the health service
``fedsched.intake`` and the server as a whole say NOT_SERVING, and ``/healthz`` names ``intake``;
SERVING again once it reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import asyncpg
import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from events.catalog.topics import JOBS, TOPICS
from events.log import EventLog, LogReader, TopicPartition, open_log
from events.log.publisher import Publisher
from events.plumbing.health import DependencyProbe
from events.plumbing.startup import patiently
from events.plumbing.tasks import cancel_and_wait
from projections.readmodel import writer as readmodels
from projections.readmodel.reader import ReadModels
from services.api.audit import AuditService
from services.api.auth import AuthInterceptor
from services.api.commands import JobCommands
from services.api.config import ApiConfig, is_loopback
from services.api.documents import ConfigCommands, ConfigService
from services.api.governance import GovernanceService
from services.api.governance_reads import GovernanceReads
from services.api.handlers import generic_handler, request_samples
from services.api.intake import Intake
from services.api.jobs import JobService
from services.api.pb import SERVICES
from services.api.quota import QuotaService
from services.api.quota_commands import QuotaCommands
from services.api.quota_rules import QuotaRules
from services.api.resources import ResourceService
from services.api.store import ApiStore
from services.api.watch_tails import WatchTails

logger = logging.getLogger("fedsched.api")

INTAKE_HEALTH = "fedsched.intake"
"""The gRPC health service name under which the intake's state is reported."""


@dataclass
class ApiServer:
    """A running API: ``port`` is the bound port (useful with ``listen="127.0.0.1:0"``)."""

    server: grpc.aio.Server
    port: int
    config: ApiConfig
    health: health.aio.HealthServicer
    publisher: Publisher
    intake: Intake | None = None
    tails: WatchTails | None = None
    probe: DependencyProbe | None = None
    _intake_task: asyncio.Task[None] | None = None
    _owned: list[object] = field(default_factory=list)

    @property
    def address(self) -> str:
        host = self.config.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    async def stop(self, grace_s: float = 2.0) -> None:
        if self.probe is not None:
            await self.probe.close()  # before the shutdown status, which it must not overwrite
        await self.health.enter_graceful_shutdown()
        if self.intake is not None:
            self.intake.stop()
        if self._intake_task is not None:
            await cancel_and_wait([self._intake_task], grace_s=10)  # it ends on intake.stop()
        await self.server.stop(grace_s)
        if self.tails is not None:
            await self.tails.close()
        if self.intake is not None:
            await self.intake.close()
        await self.publisher.close()
        for resource in reversed(self._owned):
            with contextlib.suppress(Exception):
                await resource.close()  # type: ignore[attr-defined]

    def samples(self) -> list[tuple[str, dict[str, str], float]]:
        """Prometheus samples: API requests by method and code, the intake's, watches."""
        out = request_samples()
        if self.tails is not None:
            out.append(("fedsched_watch_streams", {}, float(self.tails.watching)))
            out.append(("fedsched_watch_partitions", {}, float(self.tails.partitions)))
        if self.intake is not None:
            out += self.intake.samples()  # requests by outcome, whether it reads, its restarts
        return out

    async def wait(self) -> None:
        await self.server.wait_for_termination()


async def serve(
    config: ApiConfig,
    *,
    quota_rules: QuotaRules,
    governance: GovernanceReads,
    log: EventLog | None = None,
    pool: asyncpg.Pool | None = None,
) -> ApiServer:
    """Start the API (and the intake, if configured). Pass ``log`` and ``pool`` to share open ones;
    otherwise they are opened from ``config`` and closed by ``stop``."""
    owned: list[object] = []
    if log is None:
        log = open_log(config.log_url)
        await patiently("log", log.start, component="api", undo=log.close)
        owned.append(log)
    if pool is None:
        dsn = config.dsn
        pool = await patiently(
            "postgres",
            lambda: asyncpg.create_pool(dsn, min_size=1, max_size=16, reset=_nothing_to_reset),
            component="api",
        )
        owned.append(pool)
    opened_log, opened_pool = log, pool  # not Optional: what the retried steps below read
    if config.create_topics:
        await patiently("log", lambda: opened_log.create_topics(TOPICS), component="api")
    await patiently("postgres", lambda: readmodels.ensure_schema(opened_pool, config.read_schema), component="api")
    store = ApiStore(pool, config.api_schema)
    await patiently("postgres", store.ensure_schema, component="api")
    reads = ReadModels(pool, config.read_schema)
    publisher = Publisher(log, config.source, clock=config.clock)
    await patiently("log", publisher.start, component="api", undo=publisher.close)
    jobs = JobCommands(publisher, store, reads)
    tails = WatchTails(log)
    quotas = QuotaCommands(publisher, store, log, quota_rules)
    servicers = {
        "fedsched.v1.JobService": JobService(jobs, reads, store, log, tails),
        "fedsched.v1.ResourceService": ResourceService(reads),
        "fedsched.v1.QuotaService": QuotaService(quotas, reads, publisher.clock, quota_rules, log),
        "fedsched.v1.AuditService": AuditService(jobs, reads, store),
        "fedsched.v1.ConfigService": ConfigService(ConfigCommands(publisher, reads)),
        "fedsched.v1.GovernanceService": GovernanceService(governance, reads, log, publisher.clock),
    }
    limit = config.max_message_bytes
    server = grpc.aio.server(
        interceptors=[AuthInterceptor(config.auth)],
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.max_metadata_size", 16 * 1024),
        ],
    )
    server.add_generic_rpc_handlers([generic_handler(SERVICES[name], impl) for name, impl in servicers.items()])
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection([*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    port = _bind(server, config)
    await server.start()
    for name in ("", *SERVICES):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    api = ApiServer(server, port, config, health_servicer, publisher, tails=tails, _owned=owned)
    if config.intake:
        api.intake = Intake(log, jobs, config)
        await api.intake.start()
        await health_servicer.set(INTAKE_HEALTH, health_pb2.HealthCheckResponse.SERVING)
        api._intake_task = asyncio.create_task(api.intake.run(), name="fedsched-intake")
    api.probe = _dependency_probe(log, reads, health_servicer, api.intake)
    api.probe.start()
    mode = "mTLS" if config.tls and config.tls.client_ca else "TLS" if config.tls else "plaintext"
    logger.info(
        "event=api_started address=%s transport=%s intake=%s auth=%s",
        api.address,
        mode,
        config.intake,
        ",".join(config.auth.algorithms),
    )
    return api


def _dependency_probe(
    log: EventLog, reads: ReadModels, servicer: health.aio.HealthServicer, intake: Intake | None
) -> DependencyProbe:
    serving_, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING

    async def serving(unreachable: list[str]) -> None:
        await servicer.set("", not_serving if unreachable else serving_)
        if intake is not None:  # it cannot read while the log is away, whatever its own loop has seen yet
            reading = "intake" not in unreachable and "log" not in unreachable
            await servicer.set(INTAKE_HEALTH, serving_ if reading else not_serving)

    probes = {"log": _LogProbe(log).check, "postgres": reads.ping}
    if intake is not None:
        probes["intake"] = _IntakeProbe(intake).check
    return DependencyProbe(probes, on_change=serving)


class _IntakeProbe:
    """Whether the intake reads its topic (no round trip: the intake knows, ``Intake.reading``)."""

    def __init__(self, intake: Intake) -> None:
        self._intake = intake

    async def check(self) -> None:
        if not self._intake.reading:
            raise RuntimeError("the intake is not reading its topic")


class _LogProbe:
    """Where one partition ends: a round trip to the log (one ListOffsets on Kafka, one small query on
    the embedded log), on a reader kept between checks and replaced after a failure."""

    def __init__(self, log: EventLog) -> None:
        self._log = log
        self._reader: LogReader | None = None

    async def check(self) -> None:
        try:
            if self._reader is None:
                self._reader = await self._log.reader()
            await self._reader.end_offset(TopicPartition(JOBS.name, 0))
        except BaseException:  # a timeout's cancellation too: the reader may be mid-request
            reader, self._reader = self._reader, None
            if reader is not None:
                with contextlib.suppress(Exception):
                    await reader.close()
            raise


def _bind(server: grpc.aio.Server, config: ApiConfig) -> int:
    if config.tls is None:
        if not is_loopback(config.listen):
            logger.warning(
                "event=api_plaintext address=%s: bearer tokens cross the network in clear; serve TLS"
                " (--tls-cert, --tls-key; --client-ca for mutual TLS)",
                config.listen,
            )
        port = server.add_insecure_port(config.listen)
    else:
        credentials = grpc.ssl_server_credentials(
            [(config.tls.private_key, config.tls.cert_chain)],
            root_certificates=config.tls.client_ca,
            require_client_auth=config.tls.client_ca is not None,
        )
        port = server.add_secure_port(config.listen, credentials)
    if not port:
        raise OSError(f"cannot listen on {config.listen}")
    return int(port)


async def _nothing_to_reset(conn: asyncpg.Connection) -> None:
    """The API's queries leave no session state (no LISTEN, SET or session advisory locks; only
    transaction-scoped locks), so a connection going back to the pool needs no RESET ALL round trip on
    every request; asyncpg still rolls back an open transaction before calling this."""
