"""``Unique.check`` and ``JsonLimits.check`` take fast paths for the common cases; each must accept and
refuse exactly what the full check does, with the same error."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog.types import Unique


@dataclass(frozen=True)
class Item:
    a: object
    b: object


SCALARS = st.one_of(st.integers(-3, 3), st.sampled_from(["", "a", "b", "ab"]), st.booleans())
VALUES = st.one_of(SCALARS, st.floats(allow_nan=True, width=16), st.lists(st.integers(0, 2), max_size=2))
UNIQUES = st.builds(Unique, st.sampled_from([(), ("a",), ("b",), ("a", "b"), ("b", "a")]), st.booleans())


def outcome(check, items):  # type: ignore[no-untyped-def]
    try:
        return ("ok", check(items) is items)
    except Exception as error:  # the point is to compare whatever each raises
        return (type(error).__name__, str(error))


@settings(max_examples=3000, deadline=None)
@given(
    unique=UNIQUES,
    rows=st.lists(st.tuples(st.one_of(SCALARS, VALUES), st.one_of(SCALARS, VALUES)), max_size=6),
    scalars=st.booleans(),
    sort=st.booleans(),
)
def test_fast_paths_agree_with_the_full_check(
    unique: Unique, rows: list[tuple[object, object]], scalars: bool, sort: bool
) -> None:
    if sort:
        rows = sorted(rows, key=repr)
    if unique.keys:
        items: tuple[object, ...] = tuple(Item(a, b) for a, b in rows)
    else:
        items = tuple(a for a, _ in rows) if scalars else tuple(Item(a, b) for a, b in rows)
    full = outcome(unique._check_fully, items) if len(items) >= 2 else ("ok", True)
    assert outcome(unique.check, items) == full


@given(st.lists(st.integers(0, 300), max_size=40), st.booleans())
def test_increasing_integers_and_unique_names_pass(values: list[int], keyed: bool) -> None:
    ordered = tuple(sorted(set(values)))
    if keyed:
        items: tuple[object, ...] = tuple(Item(v, str(v)) for v in ordered)
        assert Unique(("a",), ordered=True).check(items) is items
        assert Unique(("b",)).check(items) is items
        assert Unique(("a", "b"), ordered=True).check(items) is items
    else:
        assert Unique(ordered=True).check(ordered) is ordered


@given(st.integers(0, 3), st.integers(0, 4))
def test_an_empty_document_is_checked_as_before(max_bytes: int, max_depth: int) -> None:
    from events.catalog.types import JsonLimits, _check_json

    limits = JsonLimits(max_bytes, max_depth)
    try:
        _check_json({}, max_depth, "")
        expected = None if max_bytes >= 2 else "document is 2 bytes"
    except ValueError as error:
        expected = str(error)
    try:
        limits.check({})
        got = None
    except ValueError as error:
        got = str(error)
    assert (got or "")[: len(expected or "")] == (expected or "") and (got is None) == (expected is None)
