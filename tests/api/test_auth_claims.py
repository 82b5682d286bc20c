"""Auth claim checks, pure: every negative token vector refused, roles and tenants bound what a token
may do, every RPC has an action, keys that could be confused are refused."""

from __future__ import annotations

import jwt
import pytest

from services.api.auth import METHODS, Action, AuthConfig, Principal, Role, authenticate, authorize
from services.api.errors import PermissionDenied, Unauthenticated
from services.api.pb import SERVICES
from tests.api.support import AUDIENCE, ISSUER, Keys
from tests.api.vectors import NAMES, negative_vectors

# One vector signs with HS512 on purpose; PyJWT warns about the key length for it.
pytestmark = pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning")


@pytest.mark.parametrize("vector", NAMES)
def test_every_negative_vector_is_unauthenticated(keys: Keys, vector: str) -> None:
    assert set(negative_vectors(keys)) == set(NAMES)
    with pytest.raises(Unauthenticated):
        authenticate(negative_vectors(keys)[vector], keys.auth())


def test_valid_tokens_give_their_principal_and_unknown_roles_grant_nothing(keys: Keys) -> None:
    config = keys.auth()
    assert authenticate(keys.rs(roles=["viewer", "wizard"]), config) == Principal(
        "alice@example.com", frozenset({"team-a"}), frozenset({Role.VIEWER})
    )
    only_rs = AuthConfig(ISSUER, AUDIENCE, rs256_public_key=keys.rsa_public_pem)
    assert authenticate(keys.rs(), only_rs).subject == "alice@example.com"
    with pytest.raises(Unauthenticated, match="HS256"):
        authenticate(keys.hs(), only_rs)
    nobody = authenticate(keys.hs(roles=[]), config)
    with pytest.raises(PermissionDenied):
        authorize(nobody, Action.READ)


def test_roles_allow_exactly_their_actions_and_tenants_bound_them() -> None:
    viewer = Principal("v", frozenset({"a"}), frozenset({Role.VIEWER}))
    submitter = Principal("s", frozenset({"a"}), frozenset({Role.SUBMITTER}))
    admin = Principal("x", frozenset({"*"}), frozenset({Role.ADMIN}))
    authorize(viewer, Action.READ, "a")
    for action in (Action.SUBMIT_JOB, Action.CANCEL_JOB, Action.SET_QUOTA):
        with pytest.raises(PermissionDenied):
            authorize(viewer, action, "a")
    authorize(submitter, Action.SUBMIT_JOB, "a")
    with pytest.raises(PermissionDenied):
        authorize(submitter, Action.SUBMIT_JOB, "b")
    with pytest.raises(PermissionDenied):
        authorize(submitter, Action.DECIDE_QUOTA, "a")
    for action in Action:
        authorize(admin, action, "any-tenant")


def test_every_rpc_of_every_service_has_an_action() -> None:
    methods = {f"/{name}/{m.name}" for name, service in SERVICES.items() for m in service.methods}
    assert methods == set(METHODS)


def test_keys_are_refused_when_they_could_be_confused(keys: Keys) -> None:
    with pytest.raises(ValueError, match="PEM"):
        AuthConfig(ISSUER, AUDIENCE, hs256_secret=keys.rsa_public_pem)
    with pytest.raises(ValueError, match="32 bytes"):
        AuthConfig(ISSUER, AUDIENCE, hs256_secret=b"short")
    with pytest.raises(ValueError):
        AuthConfig(ISSUER, AUDIENCE)


def test_verified_tokens_are_reused_only_inside_their_validity_window(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    import services.api.auth as auth

    checked: list[str] = []
    real = auth.verified_claims

    def counting(token: str | None, config: AuthConfig) -> dict[str, object]:
        checked.append(str(token))
        return real(token, config)

    monkeypatch.setattr(auth, "verified_claims", counting)
    cache = auth.VerifiedTokens(keys.auth(), capacity=2)
    token = keys.hs()
    iat = jwt.decode(token, options={"verify_signature": False})["iat"]
    first = cache.principal(token)
    assert cache.principal(token) == first and len(checked) == 1
    # Past exp + leeway, or before iat - leeway, the token is checked again (and refused if it is bad).
    cache.principal(token, now=iat + 600 + 10)
    cache.principal(token, now=iat - 11)
    assert len(checked) == 3
    altered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    with pytest.raises(Unauthenticated):
        cache.principal(altered)
    with pytest.raises(Unauthenticated, match="no bearer token"):
        cache.principal(None)
    # Bounded: a third token pushes the oldest out.
    others = [keys.hs(sub=f"user{i}@example.com") for i in range(2)]
    for other in others:
        cache.principal(other)
    before = len(checked)
    cache.principal(token)
    assert len(checked) == before + 1
