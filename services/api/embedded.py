"""The API inside ``fedsched up`` (embedded mode): the same server, a local development key and token.

Called by ``services.runtime.up``, which hands in governance's sides of the ports
(``services.api.quota_rules``, ``services.api.governance_reads``). Calls ``services.api.server.serve``.
The key is kept in ``state_dir/dev-jwt-secret`` (so tokens survive a restart) and the admin token in
``state_dir/dev-token``, where the CLI's API commands find it by themselves when run from the same folder.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import asyncpg

from events.log import EventLog
from events.log.publisher import wall_clock_ms
from services.api.auth import dev_auth, dev_token, write_dev_token
from services.api.config import DEFAULT_LISTEN, ApiConfig
from services.api.governance_reads import GovernanceReads
from services.api.quota_rules import QuotaRules
from services.api.server import ApiServer, serve


class EmbeddedApi:
    def __init__(self, server: ApiServer, token: str, token_file: Path) -> None:
        self.server = server
        self.dev_token = token
        self.token_file = token_file


async def start_embedded(
    log: EventLog,
    pool: asyncpg.Pool,
    listen: str = DEFAULT_LISTEN,
    *,
    quota_rules: QuotaRules,
    governance: GovernanceReads,
    state_dir: Path,
    intake: bool = True,
    clock: Callable[[], int] = wall_clock_ms,
) -> EmbeddedApi:
    auth = dev_auth(state_dir)
    token = dev_token(auth)
    token_file = write_dev_token(state_dir, token)
    config = ApiConfig(log_url="embedded", dsn="embedded", auth=auth, listen=listen, intake=intake, clock=clock)
    server = await serve(config, quota_rules=quota_rules, governance=governance, log=log, pool=pool)
    return EmbeddedApi(server, token, token_file)
