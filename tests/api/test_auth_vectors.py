"""Every negative token vector is refused for the reason it is about, and a token's size and alphabet
are checked before any of it is decoded."""

from __future__ import annotations

import jwt
import pytest

from services.api.auth import MAX_TOKEN_BYTES, authenticate
from services.api.errors import Unauthenticated
from tests.api.support import Keys
from tests.api.vectors import NAMES, REASONS, negative_vectors

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::jwt.warnings.InsecureKeyLengthWarning"),
]


def test_every_vector_has_its_reason() -> None:
    assert set(REASONS) == set(NAMES)


@pytest.mark.parametrize("vector", NAMES)
def test_each_vector_is_refused_for_the_reason_it_is_about(keys: Keys, vector: str) -> None:
    with pytest.raises(Unauthenticated, match=REASONS[vector]):
        authenticate(negative_vectors(keys)[vector], keys.auth())


def test_an_oversized_or_non_ascii_token_is_refused_before_it_is_decoded(
    keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the token was decoded")

    valid = keys.hs()
    padded = keys.hs(padding="x" * MAX_TOKEN_BYTES)
    assert len(padded) > MAX_TOKEN_BYTES
    monkeypatch.setattr(jwt, "get_unverified_header", never)
    monkeypatch.setattr(jwt, "decode", never)
    with pytest.raises(Unauthenticated, match=f"longer than {MAX_TOKEN_BYTES} bytes"):
        authenticate(padded, keys.auth())
    with pytest.raises(Unauthenticated, match="longer than"):
        authenticate("a" * (10 * 1024 * 1024), keys.auth())  # 10 MiB, refused as fast as 9 KiB
    with pytest.raises(Unauthenticated, match="other than ASCII"):
        authenticate(valid[:-1] + "é", keys.auth())
    monkeypatch.undo()
    # The largest token under the limit is decoded as usual.
    largest = largest_token(keys)
    assert MAX_TOKEN_BYTES - 4 < len(largest) <= MAX_TOKEN_BYTES
    assert authenticate(largest, keys.auth()).subject == "alice@example.com"


def largest_token(keys: Keys) -> str:
    """The valid token with the longest padding claim that is still within ``MAX_TOKEN_BYTES``."""
    low, high = 0, MAX_TOKEN_BYTES
    while low < high:
        middle = (low + high + 1) // 2
        if len(keys.hs(padding="x" * middle)) <= MAX_TOKEN_BYTES:
            low = middle
        else:
            high = middle - 1
    return keys.hs(padding="x" * low)
