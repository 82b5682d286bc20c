"""What an API process needs to know: where it listens, its log and database, keys and certificates.

Called by ``fedsched api`` (from flags and the environment), by ``fedsched up`` (embedded mode, built
in code) and by tests. Plain data: reading files happens in ``load_*`` helpers, never on import.

The development key (``services.api.auth.dev_auth``) serves on loopback only: anyone who can reach the
port could otherwise use its long-known admin token. ``check_listen`` says so naming the flag the user
set; ``ApiConfig`` refuses such a configuration whoever builds it. Secrets (the DSN's password, keys)
are left out of the ``repr`` of these settings, so a logged configuration does not carry them.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from events.log.publisher import wall_clock_ms
from projections.readmodel.rows.tables import SCHEMA
from services.api.auth import AuthConfig

DEFAULT_LISTEN = "127.0.0.1:50051"
MAX_MESSAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """Server certificate and key (PEM); with ``client_ca``, clients must present a certificate it signed."""

    cert_chain: bytes
    private_key: bytes = field(repr=False)
    client_ca: bytes | None = None

    @classmethod
    def from_files(cls, cert: Path, key: Path, client_ca: Path | None = None) -> TlsConfig:
        return cls(cert.read_bytes(), key.read_bytes(), client_ca.read_bytes() if client_ca else None)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    log_url: str = field(repr=False)
    """``kafka://host:port`` or a PostgreSQL DSN (the embedded log)."""
    dsn: str = field(repr=False)
    """PostgreSQL of the read models and of the API's own tables (idempotency keys, quota requests)."""
    auth: AuthConfig
    listen: str = DEFAULT_LISTEN
    tls: TlsConfig | None = None
    read_schema: str = SCHEMA
    """Schema of the read models the projections write."""
    api_schema: str = "fedsched_api"
    intake: bool = True
    """Also run the event intake for MLOps tools in this process."""
    instance: str = ""
    """Names this replica in transactional ids and consumer members; default: host name and pid."""
    source: str = "urn:fedsched:api"
    max_message_bytes: int = MAX_MESSAGE_BYTES
    create_topics: bool = True
    clock: Callable[[], int] = wall_clock_ms
    """Time stamped on the events the API publishes; ``fedsched up`` gives the simulated fleet's clock so
    every component of the embedded service tells the same time."""

    def __post_init__(self) -> None:
        check_listen(self.listen, self.auth, flag="listen")

    @property
    def instance_name(self) -> str:
        return self.instance or f"{socket.gethostname()}-{os.getpid()}"


def check_listen(listen: str, auth: AuthConfig, *, flag: str = "--api-listen") -> None:
    """Refuse to serve the development key anywhere but on loopback. ``flag`` is the setting the user
    gave ``listen`` with (``--api-listen`` of ``fedsched up``, ``--listen`` of ``fedsched api``)."""
    if auth.development and not is_loopback(listen):
        raise ValueError(
            f"{flag}: the development key (no JWT secret or public key configured) serves on a loopback address"
            f" only (127.0.0.1, [::1], localhost), not {listen!r}; to serve other hosts give the API a real key"
            " (fedsched api --jwt-public-key or --jwt-secret-file, or fedsched up --config FILE)"
        )


def is_loopback(listen: str) -> bool:
    """Whether a gRPC listen address (``host:port``, ``[v6]:port``, ``unix:path``) is reachable from this
    host only. A name other than ``localhost`` is not: what it resolves to is not ours to know."""
    if listen.startswith(("unix:", "unix-abstract:")):
        return True
    host = listen.rpartition(":")[0] if ":" in listen else listen
    host = host.removeprefix("[").removesuffix("]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, or "" (every interface)
        return False
