"""Authentication and authorisation: bearer JWTs checked at the edge, pure claim checks, deny by default.

Called by the server (``AuthInterceptor`` on every call), by the servicers and the intake (``authorize``
with the tenant a request touches) and by ``fedsched up`` and ``fedsched api --dev`` (``dev_auth`` and
``dev_token``: a local development key and a short-lived admin token, written by ``write_dev_token``).
Calls PyJWT.

Tokens: ``Authorization: Bearer <JWT>`` (gRPC metadata ``authorization``; the intake reads the same value
from the CloudEvents extension attribute ``authorization``, header ``ce_authorization``). A token is
signed with HS256 (a shared secret) or RS256 (a private key whose public key the server is given); the
key is bound to its algorithm, so a token never chooses how it is checked: ``alg=none``, an algorithm
the server has no key for, and an HS256 token "signed" with the RS256 public key are all refused.
``iss``, ``aud``, ``exp``, ``iat`` and ``sub`` are required; ``exp`` is checked with a small leeway.

Claims: ``sub`` (who), ``tenants`` (the tenants whose jobs and quotas the token may see or touch;
``"*"`` means all of them) and ``roles``. Roles say what a token may do, tenants on what:

================  ==============================================================================
role              may
================  ==============================================================================
viewer            read jobs, timelines, explanations, quotas, quota requests and the resource view
submitter         viewer, plus submit and cancel jobs and request quota
operator          viewer, plus cancel jobs and read governance findings and reports
auditor           viewer, plus read governance findings and reports (for compliance and finance:
                  typically with ``tenants: ["*"]``)
admin             everything, including set quotas, decide quota requests and apply configuration
================  ==============================================================================

A method missing from ``METHODS`` is refused (``PERMISSION_DENIED``), as is a token without a role that
allows the method. The standard health service needs no token; reflection needs a valid one.

Tenant isolation, one rule so that no answer tells whether another tenant's thing exists:

- an object named by id (a job, a quota request) of a tenant outside the token's tenants is answered
  exactly as an id that does not exist: ``NOT_FOUND``, the same message;
- a tenant named in a request (a submission, a quota, a filter) outside the token's tenants is
  ``PERMISSION_DENIED`` naming the field ``tenant``, decided from the token alone before anything is
  read, so the answer is the same whether that tenant exists or not;
- a role that may not call the method at all is ``PERMISSION_DENIED`` before the request is read;
- lists (jobs, quotas, quota requests, findings) hold the token's tenants only, and a scoped token's
  governance report counts its tenants' data alone; the fleet (clusters, nodes, capacity) is not
  tenant data. ``tests/api/test_tenant_isolation.py`` holds this for every RPC.

Tokens are refused before decoding when longer than ``MAX_TOKEN_BYTES`` or not ASCII. The development
key (``dev_auth``) is marked ``development``: its tokens live ``DEV_TOKEN_TTL_S`` (renewed by
``services.api.dev_tokens``) and its server listens on loopback only (``services.api.config``).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import grpc
import jwt

from services.api.errors import ApiError, PermissionDenied, Unauthenticated, abort

ALL_TENANTS = "*"
HEALTH_PREFIX = "/grpc.health.v1.Health/"
REFLECTION_PREFIX = "/grpc.reflection."
MAX_TOKEN_BYTES = 8192
DEV_TOKEN_TTL_S = 12 * 3600
DEV_ISSUER = "fedsched-dev"
DEV_AUDIENCE = "fedsched"
_TENANT = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$")
_SUBJECT = re.compile(r"^[^\x00-\x1f\x7f]{1,256}$")


class Role(StrEnum):
    VIEWER = "viewer"
    SUBMITTER = "submitter"
    OPERATOR = "operator"
    AUDITOR = "auditor"
    ADMIN = "admin"


class Action(StrEnum):
    READ = "read"
    SUBMIT_JOB = "jobs.submit"
    CANCEL_JOB = "jobs.cancel"
    REQUEST_QUOTA = "quota.request"
    SET_QUOTA = "quota.set"
    DECIDE_QUOTA = "quota.decide"
    CONFIGURE = "config.apply"
    GOVERNANCE_READ = "governance.read"
    REFLECT = "reflect"


_ANY_ROLE = frozenset(Role)
ALLOWED: dict[Action, frozenset[Role]] = {
    Action.READ: _ANY_ROLE,
    Action.REFLECT: _ANY_ROLE,
    Action.SUBMIT_JOB: frozenset({Role.SUBMITTER, Role.ADMIN}),
    Action.CANCEL_JOB: frozenset({Role.SUBMITTER, Role.OPERATOR, Role.ADMIN}),
    Action.REQUEST_QUOTA: frozenset({Role.SUBMITTER, Role.ADMIN}),
    Action.SET_QUOTA: frozenset({Role.ADMIN}),
    Action.DECIDE_QUOTA: frozenset({Role.ADMIN}),
    Action.CONFIGURE: frozenset({Role.ADMIN}),
    Action.GOVERNANCE_READ: frozenset({Role.OPERATOR, Role.AUDITOR, Role.ADMIN}),
}

_J, _R, _Q, _A, _C, _G = (
    "/fedsched.v1.JobService/",
    "/fedsched.v1.ResourceService/",
    "/fedsched.v1.QuotaService/",
    "/fedsched.v1.AuditService/",
    "/fedsched.v1.ConfigService/",
    "/fedsched.v1.GovernanceService/",
)
#: What each method of the API does; a method not listed here is refused.
METHODS: dict[str, Action] = {
    _J + "SubmitJob": Action.SUBMIT_JOB,
    _J + "CancelJob": Action.CANCEL_JOB,
    _J + "GetJob": Action.READ,
    _J + "ListJobs": Action.READ,
    _J + "WatchJob": Action.READ,
    _J + "ExplainJob": Action.READ,
    _R + "ListClusters": Action.READ,
    _R + "ListNodes": Action.READ,
    _R + "GetCapacity": Action.READ,
    _Q + "GetQuota": Action.READ,
    _Q + "SetQuota": Action.SET_QUOTA,
    _Q + "RequestQuota": Action.REQUEST_QUOTA,
    _Q + "DecideQuotaRequest": Action.DECIDE_QUOTA,
    _Q + "GetBudgets": Action.READ,
    _Q + "ListQuotaRequests": Action.READ,
    _A + "GetJobTimeline": Action.READ,
    _C + "ApplyDocuments": Action.CONFIGURE,
    _C + "GetDocuments": Action.READ,
    _C + "DeleteDocument": Action.CONFIGURE,
    _G + "ListFindings": Action.GOVERNANCE_READ,
    _G + "GetReport": Action.GOVERNANCE_READ,
}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, from a verified token."""

    subject: str
    tenants: frozenset[str]
    roles: frozenset[Role]

    @property
    def all_tenants(self) -> bool:
        return ALL_TENANTS in self.tenants

    def may(self, action: Action) -> bool:
        return bool(self.roles & ALLOWED[action])

    def sees(self, tenant: str) -> bool:
        return self.all_tenants or tenant in self.tenants

    def tenant_scope(self) -> tuple[str, ...] | None:
        """The tenants this principal may see, sorted; ``None`` for all of them."""
        return None if self.all_tenants else tuple(sorted(self.tenants))


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """How tokens are checked. At least one key; each key is bound to its algorithm."""

    issuer: str
    audience: str
    hs256_secret: bytes | None = field(default=None, repr=False)
    rs256_public_key: bytes | None = None
    """PEM of the RSA public key."""
    leeway_s: int = 10
    development: bool = False
    """The local development key of ``dev_auth``: loopback only (``services.api.config.check_listen``)."""
    _keys: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.hs256_secret is None and self.rs256_public_key is None:
            raise ValueError("auth needs an HS256 secret or an RS256 public key")
        if self.hs256_secret is not None:
            if len(self.hs256_secret) < 32:
                raise ValueError("the HS256 secret must be at least 32 bytes")
            if b"-----BEGIN" in self.hs256_secret:
                raise ValueError("the HS256 secret looks like a PEM key: give a public key as --jwt-public-key")
            self._keys["HS256"] = self.hs256_secret
        if self.rs256_public_key is not None:
            from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
            from cryptography.hazmat.primitives.serialization import load_pem_public_key

            key = load_pem_public_key(self.rs256_public_key)
            if not isinstance(key, RSAPublicKey):
                raise ValueError("the RS256 public key must be an RSA public key (PEM)")
            self._keys["RS256"] = key

    @property
    def algorithms(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    def key_for(self, algorithm: str) -> Any:
        return self._keys.get(algorithm)


def authenticate(token: str | None, config: AuthConfig, *, now: float | None = None) -> Principal:
    """The principal of a bearer token, or ``Unauthenticated`` saying why not."""
    return principal_of(verified_claims(token, config))


def verified_claims(token: str | None, config: AuthConfig) -> dict[str, Any]:
    """The claims of a bearer token whose signature, issuer, audience and times check out."""
    if not token:
        raise Unauthenticated("no bearer token: send 'authorization: Bearer <JWT>'")
    # Bounded and plain before PyJWT parses anything: base64url and dots are ASCII.
    if len(token) > MAX_TOKEN_BYTES:
        raise Unauthenticated(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
    if not token.isascii():
        raise Unauthenticated("the token holds characters other than ASCII")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as error:
        raise Unauthenticated(f"malformed token: {error}") from None
    algorithm = header.get("alg")
    key = config.key_for(algorithm) if isinstance(algorithm, str) else None
    if key is None or not isinstance(algorithm, str):
        raise Unauthenticated(
            f"token algorithm {algorithm!r} is not accepted (accepted: {', '.join(config.algorithms)})"
        )
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=[algorithm],
            issuer=config.issuer,
            audience=config.audience,
            leeway=config.leeway_s,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
        )
    except jwt.ExpiredSignatureError:
        raise Unauthenticated("the token has expired") from None
    except jwt.InvalidIssuerError:
        raise Unauthenticated("the token's issuer is not accepted") from None
    except jwt.InvalidAudienceError:
        raise Unauthenticated("the token's audience is not this service") from None
    except jwt.PyJWTError as error:
        raise Unauthenticated(f"invalid token: {error}") from None
    return claims


class VerifiedTokens:
    """Tokens already verified, with the window they are valid in: a client sends the same token with
    every call, and checking its signature and claims again was ~6% of a busy API's CPU. A hit outside
    the window goes through ``authenticate`` again (which says why it is refused); the key is the whole
    token, signature included, so an altered token never hits. Bounded: the oldest entry goes first."""

    def __init__(self, config: AuthConfig, capacity: int = 4096) -> None:
        self._config = config
        self._capacity = capacity
        self._tokens: dict[str, tuple[Principal, float, float]] = {}

    def principal(self, token: str | None, *, now: float | None = None) -> Principal:
        at = time.time() if now is None else now
        if token is not None:
            hit = self._tokens.get(token)
            if hit is not None and hit[1] <= at < hit[2]:
                return hit[0]
        claims = verified_claims(token, self._config)
        principal = principal_of(claims)
        assert token is not None  # verified_claims refuses a missing token
        leeway = self._config.leeway_s
        start = max(_number(claims.get("iat")), _number(claims.get("nbf"))) - leeway
        if len(self._tokens) >= self._capacity:
            del self._tokens[next(iter(self._tokens))]
        self._tokens[token] = (principal, start, _number(claims.get("exp")) + leeway)
        return principal


def _number(value: object) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def principal_of(claims: dict[str, Any]) -> Principal:
    """The principal that verified claims name; malformed claims are refused, unknown roles ignored."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not _SUBJECT.match(subject):
        raise Unauthenticated("the token's 'sub' must be 1-256 printable characters")
    tenants = _strings(claims.get("tenants", []), "tenants")
    bad = [t for t in tenants if t != ALL_TENANTS and not _TENANT.match(t)]
    if bad:
        raise Unauthenticated(f"the token's 'tenants' holds an invalid tenant id: {bad[0][:64]!r}")
    roles = frozenset(Role(r) for r in _strings(claims.get("roles", []), "roles") if r in Role._value2member_map_)
    return Principal(subject, frozenset(tenants), roles)


def _strings(value: object, name: str) -> list[str]:
    if not isinstance(value, list) or len(value) > 1024 or not all(isinstance(v, str) for v in value):
        raise Unauthenticated(f"the token's {name!r} claim must be a list of strings")
    return list(value)


def authorize(principal: Principal, action: Action, tenant: str | None = None) -> None:
    """Refuse unless ``principal`` may do ``action`` (on ``tenant``, when the action touches one)."""
    if not principal.may(action):
        have = ", ".join(sorted(principal.roles)) or "none"
        raise PermissionDenied(f"{action.value} is not allowed for the roles of this token ({have})")
    if tenant is not None and not principal.sees(tenant):
        raise PermissionDenied(f"this token does not cover tenant {tenant[:128]!r}", field="tenant")


def check_scope(principal: Principal, tenant: str) -> None:
    """A tenant filter in a read request: refused when the token does not cover it."""
    if tenant and not principal.sees(tenant):
        raise PermissionDenied(f"this token does not cover tenant {tenant[:128]!r}", field="tenant")


def bearer(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of an ``authorization: Bearer ...`` entry (the scheme is case-insensitive)."""
    for key, value in metadata or ():
        if key.lower() == "authorization":
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            return strip_bearer(text)
    return None


def strip_bearer(text: str) -> str | None:
    scheme, _, token = text.strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("fedsched_principal")


def current_principal() -> Principal:
    """The principal of the call being handled (set by ``AuthInterceptor``)."""
    try:
        return _current.get()
    except LookupError:
        raise PermissionDenied("no authenticated principal for this call") from None


Behaviour = Callable[..., Any]
if TYPE_CHECKING:  # generic in grpc's stubs only
    Handler = grpc.RpcMethodHandler[Any, Any]
    """A method's handler as gRPC builds it (a named tuple of its four behaviours, one of them set)."""


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every call, checks the method's action against the token's roles, and makes the
    principal available to the handler (``current_principal``)."""

    def __init__(self, config: AuthConfig) -> None:
        self._config = config
        self._verified = VerifiedTokens(config)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(HEALTH_PREFIX):
            return handler
        try:
            principal = self._verified.principal(bearer(handler_call_details.invocation_metadata))
            action = Action.REFLECT if method.startswith(REFLECTION_PREFIX) else METHODS.get(method)
            if action is None:
                raise PermissionDenied(f"method {method[:200]} is not open to any role")
            authorize(principal, action)
        except ApiError as error:
            return _replace_behaviour(handler, _refusal(error, handler))
        return _replace_behaviour(handler, _with_principal(principal, handler))


def _behaviour_of(handler: Handler) -> Behaviour:
    for name in ("unary_unary", "unary_stream", "stream_unary", "stream_stream"):
        behaviour = getattr(handler, name)
        if behaviour is not None:
            return behaviour  # type: ignore[no-any-return]
    raise ValueError("a method handler without behaviour")


def _replace_behaviour(handler: Handler, behaviour: Behaviour) -> Handler:
    name = ("stream_" if handler.request_streaming else "unary_") + (
        "stream" if handler.response_streaming else "unary"
    )
    # gRPC's handlers are named tuples (``grpc._utilities.RpcMethodHandler``); the stubs type the interface.
    replaced: Handler = cast(Any, handler)._replace(**{name: behaviour})
    return replaced


def _refusal(error: ApiError, handler: Handler) -> Behaviour:
    async def refuse(request: object, context: grpc.aio.ServicerContext[object, object]) -> None:
        await abort(context, error)

    return refuse


def _with_principal(principal: Principal, handler: Handler) -> Behaviour:
    inner = _behaviour_of(handler)
    if handler.response_streaming:

        async def stream(request: object, context: grpc.aio.ServicerContext[object, object]) -> AsyncIterator[object]:
            _current.set(principal)
            async for item in inner(request, context):
                yield item

        return stream

    async def unary(request: object, context: grpc.aio.ServicerContext[object, object]) -> object:
        _current.set(principal)
        return await inner(request, context)

    return unary


# -- tokens for development and tests ------------------------------------------------------------------


def issue_token(
    config: AuthConfig,
    *,
    subject: str,
    tenants: Sequence[str],
    roles: Sequence[str],
    ttl_s: int = 3600,
    now: float | None = None,
) -> str:
    """An HS256 token for ``config`` (which must have a secret): for development and tests."""
    if config.hs256_secret is None:
        raise ValueError("issue_token needs an HS256 secret")
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": config.issuer,
        "aud": config.audience,
        "sub": subject,
        "iat": issued,
        "exp": issued + ttl_s,
        "tenants": list(tenants),
        "roles": list(roles),
    }
    return jwt.encode(claims, config.hs256_secret, algorithm="HS256")


def dev_auth(state_dir: Path | None = None) -> AuthConfig:
    """The embedded mode's auth: HS256 with a local secret, kept in ``state_dir/dev-jwt-secret`` (mode 0600)
    so tokens survive a restart; a fresh in-memory secret without ``state_dir``. Marked ``development``."""
    if state_dir is None:
        return AuthConfig(DEV_ISSUER, DEV_AUDIENCE, hs256_secret=secrets.token_bytes(32), development=True)
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / "dev-jwt-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
    secret = path.read_text().strip().encode()
    return AuthConfig(DEV_ISSUER, DEV_AUDIENCE, hs256_secret=secret, development=True)


def dev_token(
    config: AuthConfig, *, subject: str = "dev@localhost", ttl_s: int = DEV_TOKEN_TTL_S, now: float | None = None
) -> str:
    """A development token: role admin over every tenant, valid ``ttl_s`` (12 hours) from ``now``. The
    running service renews it (``services.api.dev_tokens``)."""
    return issue_token(config, subject=subject, tenants=[ALL_TENANTS], roles=[Role.ADMIN.value], ttl_s=ttl_s, now=now)


def write_dev_token(state_dir: Path, token: str) -> Path:
    """Keep the development token in ``state_dir/dev-token`` (mode 0600), where the CLI looks for it.
    Atomic: written to a private temporary file beside it, then renamed over it, so a CLI reading the
    file while the token is renewed sees the old token or the new one, never a part of either."""
    path = state_dir / "dev-token"
    fd, temporary = tempfile.mkstemp(dir=state_dir, prefix=".dev-token.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path
