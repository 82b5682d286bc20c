"""Tokens that must never be accepted, for the claim-check and the server tests."""

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
)


def negative_vectors(keys: Keys) -> dict[str, str | None]:
    stranger, _ = rsa_pair()
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
    }


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["tenants"] = ["*"]
    return f"{header}.{b64(json.dumps(claims).encode())}.{signature}"
