"""Tokens that must never be accepted, for the claim-check and the server tests.

Every vector here is refused by ``services.api.auth.authenticate`` (``test_auth_claims``) and by the
server with UNAUTHENTICATED on every method (``test_auth``). Each can travel in gRPC metadata (printable
ASCII, under the server's 16 KiB metadata limit); a token that cannot is tested in ``test_auth_limits``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import jwt

from tests.api.support import Keys, rsa_pair


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def unsigned(claims: dict[str, object], alg: str = "none") -> str:
    header = b64(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    return f"{header}.{b64(json.dumps(claims).encode())}."


def hs256_with_key(claims: dict[str, object], key: bytes) -> str:
    """An HS256 token whose HMAC key is ``key`` (the algorithm-confusion attack uses the RSA public key)."""
    signing = f"{b64(json.dumps({'alg': 'HS256', 'typ': 'JWT'}).encode())}.{b64(json.dumps(claims).encode())}"
    return f"{signing}.{b64(hmac.new(key, signing.encode(), hashlib.sha256).digest())}"


NAMES = (
    "no token",
    "garbage",
    "expired",
    "wrong issuer",
    "wrong audience",
    "alg none",
    "alg none uppercase",
    "HS256 signed with the RS256 public key",
    "RS256 by another key",
    "HS256 by another secret",
    "HS512",
    "no expiry",
    "no subject",
    "tenants not a list",
    "tampered payload",
    "no issuer",
    "no audience",
    "no issued-at",
    "empty subject",
    "subject not a string",
    "not valid before a future nbf",
    "issued in the future",
    "expiry not a number",
    "audience list of other services",
    "RS256 token relabelled HS256",
    "HS256 token relabelled RS256",
    "oversized (over 8 KiB)",
)


def negative_vectors(keys: Keys) -> dict[str, str | None]:
    stranger, _ = rsa_pair()
    now = int(time.time())
    rs_only = Keys(keys.rsa_private, keys.rsa_public_pem, secret=b"another-secret-of-at-least-32-bytes-long")
    return {
        "no token": None,
        "garbage": "not-a-jwt",
        "expired": keys.hs(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200),
        "wrong issuer": keys.hs(iss="https://evil.example"),
        "wrong audience": keys.hs(aud="someone-else"),
        "alg none": unsigned(keys.claims()),
        "alg none uppercase": unsigned(keys.claims(), alg="None"),
        "HS256 signed with the RS256 public key": hs256_with_key(keys.claims(), keys.rsa_public_pem),
        "RS256 by another key": jwt.encode(keys.claims(), stranger, algorithm="RS256"),
        "HS256 by another secret": rs_only.hs(),
        "HS512": jwt.encode(keys.claims(), keys.secret, algorithm="HS512"),
        "no expiry": keys.hs(exp=None),
        "no subject": keys.hs(sub=None),
        "tenants not a list": keys.hs(tenants="team-a"),
        "tampered payload": tampered(keys.hs()),
        "no issuer": keys.hs(iss=None),
        "no audience": keys.hs(aud=None),
        "no issued-at": keys.hs(iat=None),
        "empty subject": keys.hs(sub=""),
        "subject not a string": keys.hs(sub=42),
        "not valid before a future nbf": keys.hs(nbf=now + 3600),
        "issued in the future": keys.hs(iat=now + 3600, exp=now + 7200),
        "expiry not a number": keys.hs(exp="tomorrow"),
        "audience list of other services": keys.hs(aud=["billing", "fedsched-staging"]),
        "RS256 token relabelled HS256": relabelled(keys.rs(), "HS256"),
        "HS256 token relabelled RS256": relabelled(keys.hs(), "RS256"),
        "oversized (over 8 KiB)": keys.hs(padding="x" * 8192),
    }


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["tenants"] = ["*"]
    return f"{header}.{b64(json.dumps(claims).encode())}.{signature}"


def relabelled(token: str, alg: str) -> str:
    """``token`` with its header's algorithm changed and its signature kept: whatever the header says,
    the key bound to that algorithm must not verify it."""
    _, payload, signature = token.split(".")
    return f"{b64(json.dumps({'alg': alg, 'typ': 'JWT'}).encode())}.{payload}.{signature}"


#: Why each vector is refused (a regular expression of the refusal's message): a vector refused for
#: another reason than the one it is about would test nothing.
REASONS: dict[str, str] = {
    "no token": "no bearer token",
    "garbage": "malformed token",
    "expired": "expired",
    "wrong issuer": "issuer is not accepted",
    "wrong audience": "audience is not this service",
    "alg none": "algorithm 'none' is not accepted",
    "alg none uppercase": "algorithm 'None' is not accepted",
    "HS256 signed with the RS256 public key": "Signature verification failed",
    "RS256 by another key": "Signature verification failed",
    "HS256 by another secret": "Signature verification failed",
    "HS512": "algorithm 'HS512' is not accepted",
    "no expiry": 'missing the "exp" claim',
    "no subject": 'missing the "sub" claim',
    "tenants not a list": "'tenants' claim must be a list",
    "tampered payload": "Signature verification failed",
    "no issuer": 'missing the "iss" claim',
    "no audience": 'missing the "aud" claim',
    "no issued-at": 'missing the "iat" claim',
    "empty subject": "'sub' must be 1-256 printable characters",
    "subject not a string": "Subject must be a string",
    "not valid before a future nbf": r"not yet valid \(nbf\)",
    "issued in the future": r"not yet valid \(iat\)",
    "expiry not a number": r"\(exp\) must be an integer",
    "audience list of other services": "audience is not this service",
    "RS256 token relabelled HS256": "Signature verification failed",
    "HS256 token relabelled RS256": "Signature verification failed",
    "oversized (over 8 KiB)": "longer than 8192 bytes",
}
