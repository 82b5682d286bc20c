"""The development token is short-lived and kept fresh; the development key serves on loopback only.

``DevTokens`` runs on an injected clock: no test waits for hours, or sleeps. ``fedsched api --dev`` on a
non-loopback address is refused before it opens anything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import jwt
import pytest

from services.api.auth import (
    DEV_AUDIENCE,
    DEV_ISSUER,
    DEV_TOKEN_TTL_S,
    AuthConfig,
    Role,
    authenticate,
    dev_auth,
    write_dev_token,
)
from services.api.config import ApiConfig, check_listen, is_loopback
from services.api.dev_tokens import DevTokens
from tests.api.support import AUDIENCE, ISSUER, Keys

pytestmark = pytest.mark.timeout(60)


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def claims_of(token: str) -> dict[str, object]:
    return dict(jwt.decode(token, options={"verify_signature": False}))


def test_the_token_lives_twelve_hours_and_is_renewed_when_half_its_life_has_passed(tmp_path: Path) -> None:
    auth = dev_auth(tmp_path)
    clock = FakeClock(1_900_000_000.0)
    tokens = DevTokens(auth, tmp_path, clock=clock)
    assert tokens.token is None and tokens.renew_if_due()
    first = tokens.token
    assert first is not None and tokens.path.read_text() == first + "\n"
    assert stat.S_IMODE(tokens.path.stat().st_mode) == 0o600
    claims = claims_of(first)
    assert {"iss", "aud", "iat", "exp", "sub"} <= set(claims)
    assert (claims["iss"], claims["aud"], claims["sub"]) == (DEV_ISSUER, DEV_AUDIENCE, "dev@localhost")
    assert claims["iat"] == 1_900_000_000 and claims["exp"] == 1_900_000_000 + 12 * 3600
    assert DEV_TOKEN_TTL_S <= 12 * 3600
    assert (claims["tenants"], claims["roles"]) == (["*"], [Role.ADMIN.value])

    clock.now += DEV_TOKEN_TTL_S / 2 - 1
    assert not tokens.renew_if_due() and tokens.token == first
    clock.now += 1
    assert tokens.renew_if_due()
    second = tokens.token
    assert second is not None and second != first and tokens.path.read_text().strip() == second
    assert claims_of(second)["exp"] == int(clock.now) + DEV_TOKEN_TTL_S
    # Written by rename: nothing of the temporary file is left beside it, the mode is still 0600.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev-jwt-secret", "dev-token"]
    assert stat.S_IMODE(tokens.path.stat().st_mode) == 0o600


def test_a_renewed_token_is_accepted_and_an_expired_one_is_not(tmp_path: Path) -> None:
    auth = dev_auth(tmp_path)
    now = time.time()
    stale = DevTokens(auth, tmp_path, clock=lambda: now - DEV_TOKEN_TTL_S - 60)
    stale.renew_if_due()
    assert stale.token is not None
    with pytest.raises(Exception, match="expired"):
        authenticate(stale.token, auth)
    fresh = DevTokens(auth, tmp_path)
    fresh.renew_if_due()
    assert fresh.token is not None
    assert authenticate(fresh.token, auth).subject == "dev@localhost"
    assert authenticate(tmp_path.joinpath("dev-token").read_text().strip(), auth).all_tenants


@pytest.mark.asyncio(loop_scope="session")
async def test_keep_fresh_renews_the_file_when_the_clock_says_so_and_stops_on_request(tmp_path: Path) -> None:
    clock = FakeClock(1_900_000_000.0)
    tokens = DevTokens(dev_auth(tmp_path), tmp_path, clock=clock)
    stop = asyncio.Event()
    task = asyncio.create_task(tokens.keep_fresh(stop, poll_s=0.01))
    first = await wait_for_token(tokens.path, None)
    clock.now += DEV_TOKEN_TTL_S / 2
    second = await wait_for_token(tokens.path, first)
    assert claims_of(second)["iat"] == 1_900_000_000 + DEV_TOKEN_TTL_S // 2
    stop.set()
    await asyncio.wait_for(task, 5)


@pytest.mark.asyncio(loop_scope="session")
async def test_a_failed_renewal_is_logged_and_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures = [OSError(28, "No space left on device")]

    def flaky(state_dir: Path, token: str) -> Path:
        if failures:
            raise failures.pop()
        return write_dev_token(state_dir, token)

    monkeypatch.setattr("services.api.dev_tokens.write_dev_token", flaky)
    tokens = DevTokens(dev_auth(tmp_path), tmp_path, clock=FakeClock(1_900_000_000.0))
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="fedsched.api.dev_tokens"):
        task = asyncio.create_task(tokens.keep_fresh(stop, poll_s=0.01))
        await wait_for_token(tokens.path, None)
        stop.set()
        await asyncio.wait_for(task, 5)
    assert any("dev_token_renewal_failed" in r.getMessage() for r in caplog.records)


def read_token(path: Path) -> str | None:
    return path.read_text().strip() if path.exists() else None


async def wait_for_token(path: Path, other_than: str | None, timeout_s: float = 10.0) -> str:
    """The token in ``path`` once it is there and differs from ``other_than`` (checked with a deadline)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        token = await asyncio.to_thread(read_token, path)
        if token and token != other_than:
            return token
        await asyncio.sleep(0.01)
    raise AssertionError(f"no new token in {path} after {timeout_s} s")


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:50051", True),
        ("127.8.9.10:1", True),
        ("localhost:50051", True),
        ("[::1]:50051", True),
        ("unix:/run/fedsched.sock", True),
        ("0.0.0.0:50051", False),
        ("[::]:50051", False),
        (":50051", False),
        ("10.1.2.3:50051", False),
        ("api.example.com:50051", False),
        ("localhost.example.com:50051", False),
    ],
)
def test_the_development_key_serves_on_loopback_only(listen: str, loopback: bool, keys: Keys) -> None:
    assert is_loopback(listen) == loopback
    dev = dev_auth()
    assert dev.development and not keys.auth().development
    check_listen(listen, keys.auth())  # a real key serves anywhere
    if loopback:
        check_listen(listen, dev)
        return
    with pytest.raises(ValueError, match=r"^--api-listen: the development key") as caught:
        check_listen(listen, dev)
    assert repr(listen) in str(caught.value)
    with pytest.raises(ValueError, match=r"^listen: "):
        ApiConfig(log_url="embedded", dsn="embedded", auth=dev, listen=listen)


def test_a_configuration_keeps_its_secrets_out_of_its_repr(keys: Keys) -> None:
    config = ApiConfig(
        log_url="postgresql://u:log-password@db/x", dsn="postgresql://u:dsn-password@db/x", auth=keys.auth()
    )
    shown = repr(config)
    assert "log-password" not in shown and "dsn-password" not in shown
    assert keys.secret.decode() not in shown and keys.secret.decode() not in repr(keys.auth())
    assert "development=False" in repr(AuthConfig(ISSUER, AUDIENCE, hs256_secret=keys.secret))


def test_fedsched_api_dev_refuses_a_non_loopback_address_naming_the_flag(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FEDSCHED_")}
    nowhere = "postgresql://nowhere.invalid/x"
    command = ["api", "--dev", str(tmp_path), "--listen", "0.0.0.0:0", "--log", nowhere, "--dsn", nowhere]
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", *command],
        capture_output=True,
        text=True,
        timeout=50,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "--listen: the development key" in done.stderr and "'0.0.0.0:0'" in done.stderr
    assert not (tmp_path / "dev-token").exists()
