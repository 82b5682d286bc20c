"""``fedsched up --config``: the supervisor's children get their secrets through their environment or
files, never their command line, and really work with them.

Real processes on the real PostgreSQL (the embedded log in a database of the test's own): the API and
the audit archiver are started by ``supervise`` from a configuration whose log URL and DSN carry a
password (the test server trusts local connections, so the password is carried, not checked) and whose
JWT secret sits in a file. The API answering a token signed with that secret and the archiver copying the
job it accepted prove the children read them; no ``/proc/<pid>/cmdline`` on the host holds either.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import jwt
import pytest
import pytest_asyncio

from services.api.client import CallError, Client, ClientConfig
from services.api.pb import jobs_pb2
from services.runtime.supervisor import SupervisorConfig, supervise
from tests.conftest import temporary_database

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.postgres, pytest.mark.timeout(120)]

PASSWORD = f"pw-{uuid.uuid4().hex}"
JWT_SECRET = f"jwt-{uuid.uuid4().hex}-{uuid.uuid4().hex}"
ISSUER, AUDIENCE = "https://issuer.supervisor.test", "fedsched-supervisor-test"


@pytest_asyncio.fixture(loop_scope="session")
async def database(postgres_dsn: str) -> AsyncIterator[str]:
    async with temporary_database(postgres_dsn, "sup") as dsn:
        yield dsn


def with_password(dsn: str, password: str) -> str:
    parts = urlsplit(dsn)
    user, _, host = parts.netloc.rpartition("@")
    return urlunsplit((parts.scheme, f"{user or 'postgres'}:{password}@{host}", parts.path, parts.query, ""))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def token(roles: list[str]) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ops@example.com", "iat": now, "exp": now + 600}
    return jwt.encode({**claims, "tenants": ["*"], "roles": roles}, JWT_SECRET, algorithm="HS256")


def children_of(pid: int) -> dict[int, list[str]]:
    """The live children of ``pid`` and their command lines."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        parent = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("PPid:"))
        if parent == pid and cmdline:
            out[int(entry.name)] = cmdline.decode(errors="replace").split("\0")
    return out


def command_lines_holding(secrets: tuple[str, ...]) -> list[str]:
    """Every command line on the host that holds one of ``secrets``, as an intruder would read them."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(secret.encode() in cmdline for secret in secrets):
            found.append(f"{entry.name}: {cmdline!r}")
    return found


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


async def until(check: object, what: str, timeout_s: float = 60.0) -> object:
    """The first true result of the coroutine function ``check``, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = await check()  # type: ignore[operator]
        if result:
            return result
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s} s")


async def test_children_read_their_secrets_from_environment_and_files_never_argv(
    database: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = with_password(database, PASSWORD)
    dsn_file, secret_file = tmp_path / "dsn", tmp_path / "jwt-secret"
    for path, text in ((dsn_file, dsn), (secret_file, JWT_SECRET)):
        path.write_text(text + "\n")
        path.chmod(0o600)
    port = free_port()
    config_file = tmp_path / "fedsched.yaml"
    config_file.write_text(
        f"log: '{dsn}'\npostgres_dsn_file: {dsn_file}\nmetrics: {{first_port: 0}}\n"
        f"api: {{listen: '127.0.0.1:{port}', jwt_secret_file: {secret_file}, issuer: '{ISSUER}',"
        f" audience: {AUDIENCE}}}\n"
    )
    config = SupervisorConfig.load(config_file, environ={})
    stop = asyncio.Event()
    caplog.set_level("INFO", logger="fedsched.supervisor")
    # Other tests' fixtures may keep processes of their own under this one: only the new ones are ours.
    others = set(children_of(os.getpid()))
    running = asyncio.create_task(supervise(config, stop=stop, components={"api", "archiver"}))
    client = Client(ClientConfig(f"127.0.0.1:{port}", token(["admin"]), timeout_s=5))
    try:

        async def answering() -> bool:
            try:
                await client.call(client.jobs.ListJobs, jobs_pb2.ListJobsRequest(page_size=1), retries=0)
                return True
            except CallError as error:
                assert error.code == "UNAVAILABLE", error.as_json()  # a wrong key would be UNAUTHENTICATED
                return False

        await until(answering, "the API answering a token signed with the secret from the file")
        children = {pid: argv for pid, argv in children_of(os.getpid()).items() if pid not in others}
        commands = sorted(" ".join(argv[argv.index("services.cli.main") + 1 :]) for argv in children.values())
        assert [c.split()[0] for c in commands] == ["api", "audit"], commands
        assert not command_lines_holding((PASSWORD, JWT_SECRET, dsn)), "a secret on a command line"
        assert not any("--dsn" in argv or "--jwt-secret" in argv or "--log" in argv for argv in children.values())
        by_command = {argv[argv.index("services.cli.main") + 1]: pid for pid, argv in children.items()}
        api_env, archiver_env = environment_of(by_command["api"]), environment_of(by_command["audit"])
        assert api_env["FEDSCHED_JWT_SECRET_FILE"] == str(secret_file)
        assert api_env["FEDSCHED_POSTGRES_DSN_FILE"] == archiver_env["FEDSCHED_POSTGRES_DSN_FILE"] == str(dsn_file)
        assert api_env["FEDSCHED_LOG"] == archiver_env["FEDSCHED_LOG"] == dsn
        assert not {"FEDSCHED_JWT_SECRET", "FEDSCHED_JWT_SECRET_FILE"} & set(archiver_env)

        # The archiver works with the log and the DSN it read: the job the API accepts reaches the archive.
        submitted = await client.call(
            client.jobs.SubmitJob,
            jobs_pb2.SubmitJobRequest(
                spec=jobs_pb2.JobSpec(
                    name="secret-check", tenant="team-a", resources=jobs_pb2.Resources(cpu_milli=1000, memory_mib=1024)
                ),
                client_request_id=f"sup-{uuid.uuid4().hex}",
            ),
        )

        async def archived() -> bool:
            connection = await asyncpg.connect(database)
            try:
                if not await connection.fetchval("SELECT to_regclass('fedsched_audit') IS NOT NULL"):
                    return False
                return bool(
                    await connection.fetchval(
                        "SELECT count(*) FROM fedsched_audit WHERE key = $1", submitted.job_id.encode()
                    )
                )
            finally:
                await connection.close()

        await until(archived, "the submitted job in the audit archive")
        assert children_of(os.getpid()).keys() - others == children.keys(), "a child restarted"
    finally:
        await client.close()
        stop.set()
        await asyncio.wait_for(running, 60)
    messages = [record.getMessage() for record in caplog.records]
    assert not any("child_exited" in message for message in messages), messages
    started = next(message for message in messages if "supervisor_started" in message)
    assert PASSWORD not in started and "***" in started
    assert not any(PASSWORD in message or JWT_SECRET in message for message in messages)
