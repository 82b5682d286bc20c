"""What an API process needs to know: where it listens, its log and database, keys and certificates.

Called by ``fedsched api`` (from flags and the environment), by ``fedsched up`` (embedded mode, built
in code) and by tests. Plain data: reading files happens in ``load_*`` helpers, never on import.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
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
    private_key: bytes
    client_ca: bytes | None = None

    @classmethod
    def from_files(cls, cert: Path, key: Path, client_ca: Path | None = None) -> TlsConfig:
        return cls(cert.read_bytes(), key.read_bytes(), client_ca.read_bytes() if client_ca else None)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    log_url: str
    """``kafka://host:port`` or a PostgreSQL DSN (the embedded log)."""
    dsn: str
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

    @property
    def instance_name(self) -> str:
        return self.instance or f"{socket.gethostname()}-{os.getpid()}"
