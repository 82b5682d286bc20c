"""Test-wide fixtures: the real services started by the test command, and the skip guard.

``make test`` starts a real Kafka broker, a real PostgreSQL, a real kube-apiserver and a real Slurm and
passes their addresses in ``FEDSCHED_TEST_KAFKA`` (host:port), ``FEDSCHED_TEST_POSTGRES`` (a DSN),
``FEDSCHED_TEST_KUBE_KUBECONFIG`` and ``FEDSCHED_TEST_SLURM_URL`` with ``FEDSCHED_TEST_SLURM_TOKEN_FILE``.
A test marked ``kafka``, ``postgres``, ``kube`` or ``slurm`` fails, never skips, when its service is
missing: a green run without them is a defect.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import uuid
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# Imported here, at a shallow stack, and not first by Hypothesis's pytest plugin in its end-of-session
# summary: a run that collected no Hypothesis test had pytest rewrite the module from deep inside that
# hook, and CPython 3.11's parser failed there ("AST constructor recursion depth mismatch"), ending the
# run with a traceback instead of its summary and exit status.
import hypothesis  # noqa: F401
import pytest
import pytest_asyncio

from events.catalog.topics import Cleanup, TopicSpec
from events.log import EventLog, open_log
from events.plumbing import outage as outage_module
from events.plumbing import tasks as tasks_module


def _require(variable: str, what: str) -> str:
    value = os.environ.get(variable)
    if not value:
        pytest.fail(
            f"{what} is not available: set {variable} (make test starts the service and sets it)",
            pytrace=False,
        )
    return value


@pytest.fixture
def this_tests_health_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Health reads every component of the process; under one pytest that includes the session's test
    stack, whose own probe may be failing under load. A test using this judges only what it made."""
    monkeypatch.setattr(outage_module, "_WATCHED", weakref.WeakSet())
    monkeypatch.setattr(tasks_module, "_SUPERVISED", weakref.WeakSet())


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    return _require("FEDSCHED_TEST_KAFKA", "the real Kafka broker")


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    return _require("FEDSCHED_TEST_POSTGRES", "the real PostgreSQL")


@pytest.fixture(scope="session")
def kube_config() -> str:
    """Path of an admin kubeconfig for the real kube-apiserver (``deploy/local/kube.sh``)."""
    return _require("FEDSCHED_TEST_KUBE_KUBECONFIG", "the real kube-apiserver")


@dataclass(frozen=True)
class SlurmRest:
    """Where the real Slurm's REST API (``deploy/local/slurm.sh``) answers, and who we are to it."""

    url: str  # http://127.0.0.1:PORT, without the /slurm/v0.0.38 prefix
    user: str  # the token's user ("sun" claim); jobs submitted with it run as this user
    token: str  # a JWT from `scontrol token`

    @property
    def headers(self) -> dict[str, str]:
        # slurmrestd's rest_auth/jwt wants both: a token without the user name is refused (401).
        return {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": self.token}


@pytest.fixture(scope="session")
def slurm_rest() -> SlurmRest:
    url = _require("FEDSCHED_TEST_SLURM_URL", "the real Slurm (slurmrestd)")
    token_file = Path(_require("FEDSCHED_TEST_SLURM_TOKEN_FILE", "the real Slurm's JWT"))
    try:
        token = token_file.read_text().strip()
    except OSError as error:
        pytest.fail(f"FEDSCHED_TEST_SLURM_TOKEN_FILE: cannot read the Slurm JWT: {error}", pytrace=False)
    # The token names its user in the "sun" claim; slurmrestd also wants the name in a header.
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return SlurmRest(url=url.rstrip("/"), user=str(claims["sun"]), token=token)


@pytest.fixture(
    scope="session",
    params=[pytest.param("kafka", marks=pytest.mark.kafka), pytest.param("postgres", marks=pytest.mark.postgres)],
)
def log_url(request: pytest.FixtureRequest) -> str:
    """Each test using the log runs twice: on the real Kafka broker and on the embedded log."""
    if request.param == "kafka":
        return "kafka://" + request.getfixturevalue("kafka_bootstrap")
    return str(request.getfixturevalue("postgres_dsn"))


@pytest_asyncio.fixture(loop_scope="session", scope="session")
async def event_log(log_url: str) -> AsyncIterator[EventLog]:
    log = open_log(log_url)
    await log.start()
    yield log
    await log.close()


_counter = itertools.count()


@pytest.fixture
def make_topic(event_log: EventLog) -> Callable[..., Awaitable[str]]:
    """Fresh topics with unique names, so tests never see each other's records."""

    async def make(partitions: int = 3) -> str:
        name = f"test.{os.getpid()}.{next(_counter)}"
        await event_log.create_topics([TopicSpec(name, partitions, "test key", Cleanup.DELETE, -1, "test")])
        return name

    return make


@contextlib.asynccontextmanager
async def temporary_database(postgres_dsn: str, prefix: str = "t") -> AsyncIterator[str]:
    """A new, empty database on the real PostgreSQL for the block, dropped afterwards."""
    import asyncpg

    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = await asyncpg.connect(postgres_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(postgres_dsn)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))
    finally:
        admin = await asyncpg.connect(postgres_dsn)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


@pytest_asyncio.fixture(loop_scope="session")
async def fresh_database(postgres_dsn: str) -> AsyncIterator[str]:
    """A new, empty database on the real PostgreSQL, dropped after the test."""
    async with temporary_database(postgres_dsn) as dsn:
        yield dsn


_REAL_SERVICE_MARKERS = ("kafka", "postgres", "kube", "slurm")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Tests that use the service fixtures get the marker even if their author forgot it, so the
    # skip guard and -m selections see them.
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "kafka_bootstrap" in fixtures and not item.get_closest_marker("kafka"):
            item.add_marker(pytest.mark.kafka)
        if "postgres_dsn" in fixtures and not item.get_closest_marker("postgres"):
            item.add_marker(pytest.mark.postgres)
        if "kube_config" in fixtures and not item.get_closest_marker("kube"):
            item.add_marker(pytest.mark.kube)
        if "slurm_rest" in fixtures and not item.get_closest_marker("slurm"):
            item.add_marker(pytest.mark.slurm)


_skipped_real: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and any(marker in report.keywords for marker in _REAL_SERVICE_MARKERS):
        _skipped_real.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped_real and os.environ.get("FEDSCHED_REQUIRE_REAL_SERVICES") == "1":
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"FAILED: {len(_skipped_real)} real-service test(s) were skipped: " + ", ".join(_skipped_real[:10]),
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
