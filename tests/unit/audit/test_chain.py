"""The hash chain names the first edited, deleted, reordered or truncated record."""

from __future__ import annotations

import dataclasses

import pytest

from events.audit.chain import ArchivedRecord, ChainHead, Tamper, extend, verify_partition


def a_chain(length: int = 6) -> tuple[list[ArchivedRecord], ChainHead]:
    rows = [(10 + 2 * i, f"k{i}".encode(), f"value {i}".encode(), b"", 1_000 + i) for i in range(length)]
    records = list(extend(None, "fedsched.jobs", 2, rows))
    last = records[-1]
    return records, ChainHead("fedsched.jobs", 2, last.seq, last.offset, last.hash)


def test_an_untouched_chain_verifies() -> None:
    records, head = a_chain()
    assert verify_partition(records, head) is None


def test_extending_a_head_continues_the_same_chain() -> None:
    whole, _ = a_chain(6)
    first, _ = a_chain(3)
    head = ChainHead("fedsched.jobs", 2, first[-1].seq, first[-1].offset, first[-1].hash)
    rest = list(
        extend(head, "fedsched.jobs", 2, [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in whole[3:]])
    )
    assert first + rest == whole


@pytest.mark.parametrize("field", ["value", "key", "headers", "timestamp_ms", "offset"])
def test_an_edited_record_is_named(field: str) -> None:
    records, head = a_chain()
    original = getattr(records[3], field)
    changed = original + 1 if isinstance(original, int) else (original or b"") + b"!"
    records[3] = dataclasses.replace(records[3], **{field: changed})
    problem = verify_partition(records, head)
    assert problem is not None
    assert (problem.kind, problem.seq) == (Tamper.EDITED, 3)


def test_a_deleted_record_is_named() -> None:
    records, head = a_chain()
    del records[2]
    problem = verify_partition(records, head)
    assert problem is not None
    assert (problem.kind, problem.seq) == (Tamper.DELETED, 2)


def test_reordered_records_are_named() -> None:
    records, head = a_chain()
    a, b = records[1], records[2]
    records[1] = dataclasses.replace(b, seq=1)
    records[2] = dataclasses.replace(a, seq=2)
    problem = verify_partition(records, head)
    assert problem is not None
    assert (problem.kind, problem.seq) == (Tamper.REORDERED, 1)


def test_a_truncated_chain_is_named() -> None:
    records, head = a_chain()
    problem = verify_partition(records[:-2], head)
    assert problem is not None
    assert (problem.kind, problem.seq) == (Tamper.TRUNCATED, 4)
    assert "seq 5" in str(problem)


def test_a_forged_record_after_the_head_is_named() -> None:
    records, head = a_chain()
    forged = list(extend(head, "fedsched.jobs", 2, [(99, None, b"forged", b"", 5)]))
    problem = verify_partition(records + forged, head)
    assert problem is not None
    assert problem.kind is Tamper.EDITED
