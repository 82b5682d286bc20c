"""The development token, kept fresh: short-lived, renewed by the running service before it expires.

Called by ``fedsched api --dev`` (``services.cli.api_cmd``) and by ``fedsched up`` (``services.runtime.up``)
after the API has started::

    tokens = DevTokens(auth, state_dir)           # auth: dev_auth(state_dir)
    tokens.renew_if_due()                         # the first token, in state_dir/dev-token
    task = asyncio.create_task(tokens.keep_fresh(stop_event))

Calls ``services.api.auth`` (``dev_token``, ``write_dev_token``). The people CLI reads
``state_dir/dev-token`` at every call, so it keeps working across renewals.

A token lives ``DEV_TOKEN_TTL_S`` (12 hours) and is renewed once half of that has passed, so the file
always holds a token with at least 6 hours left and a token read a moment before a renewal stays good
for hours. The clock is injected (seconds since the epoch, ``time.time`` by default). ``keep_fresh``
looks at that clock every ``poll_s`` instead of sleeping until the renewal is due: a laptop asleep
through the due time renews as soon as it wakes, where a monotonic sleep would not count the time asleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from services.api.auth import DEV_TOKEN_TTL_S, AuthConfig, dev_token, write_dev_token

log = logging.getLogger("fedsched.api.dev_tokens")


class DevTokens:
    """The development token of ``auth`` (a ``dev_auth`` key) in ``state_dir/dev-token``, renewed when
    half its life has passed."""

    def __init__(
        self,
        auth: AuthConfig,
        state_dir: Path,
        *,
        ttl_s: int = DEV_TOKEN_TTL_S,
        clock: Callable[[], float] = time.time,
        subject: str = "dev@localhost",
    ) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s: must be positive, got {ttl_s}")
        self._auth = auth
        self._state_dir = state_dir
        self._ttl_s = ttl_s
        self._clock = clock
        self._subject = subject
        self._token: str | None = None
        self._issued_at = 0.0

    @property
    def token(self) -> str | None:
        """The token last written; ``None`` before the first ``renew_if_due``."""
        return self._token

    @property
    def path(self) -> Path:
        return self._state_dir / "dev-token"

    @property
    def renew_at(self) -> float:
        """When the current token is due for renewal (the clock's seconds); now, before the first one."""
        return self._issued_at + self._ttl_s / 2 if self._token is not None else float("-inf")

    def renew_if_due(self) -> bool:
        """Write a new token when the current one is half through its life (or there is none yet)."""
        now = self._clock()
        if now < self.renew_at:
            return False
        token = dev_token(self._auth, subject=self._subject, ttl_s=self._ttl_s, now=now)
        write_dev_token(self._state_dir, token)
        self._token, self._issued_at = token, now
        log.info("event=dev_token_renewed file=%s valid_s=%d", self.path, self._ttl_s)
        return True

    async def keep_fresh(self, stop: asyncio.Event, *, poll_s: float = 60.0) -> None:
        """Renew the token whenever it is due, until ``stop`` is set. A failed write (a full disk) is
        logged and tried again at the next look; the token in the file stays valid meanwhile."""
        while not stop.is_set():
            try:
                self.renew_if_due()
            except OSError as error:
                log.warning("event=dev_token_renewal_failed file=%s error=%s", self.path, error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_s)
