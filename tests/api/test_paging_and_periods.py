"""Pure parts of the governance reads and quota requests: pages bounded in count and in bytes, page tokens
checked before they are compared, and a quota request's period as the client gave it."""

from __future__ import annotations

import pytest

from events.catalog.governance import QuotaRequestSubmitted
from events.catalog.types import ResourceKind
from services.api import validation
from services.api.errors import InvalidArgument
from services.api.paging import BoundedPage, position
from services.api.pb import governance_pb2
from services.api.quota_commands import AskedPeriod

pytestmark = pytest.mark.timeout(30)

NOW = 1_900_000_000_000
DAY = 86_400_000


def a_finding(i: int, size: int = 10) -> governance_pb2.Finding:
    return governance_pb2.Finding(time_ms=i, kind="crash_loop", subject=f"j-{i}", message="m" * size)


def test_a_page_ends_at_its_size_and_its_token_continues_after_its_last_item() -> None:
    page: BoundedPage[governance_pb2.Finding] = BoundedPage(2)
    taken = [page.add((i,), a_finding(i)) for i in range(3)]
    assert taken == [True, True, False] and [f.subject for f in page.items] == ["j-0", "j-1"]
    assert position(page.token({"tenant": ""}), {"tenant": ""}, (int,)) == [1]


def test_a_page_ends_before_it_would_pass_its_bytes_but_always_holds_one_item() -> None:
    page: BoundedPage[governance_pb2.Finding] = BoundedPage(1000, max_bytes=10_000)
    while page.add((len(page.items),), a_finding(len(page.items), 4000)):
        pass
    assert len(page.items) == 2 and page.token({}) != ""
    lone: BoundedPage[governance_pb2.Finding] = BoundedPage(1000, max_bytes=100)
    assert lone.add((0,), a_finding(0, 4000)) and len(lone.items) == 1


def test_the_last_page_has_no_token() -> None:
    page: BoundedPage[governance_pb2.Finding] = BoundedPage(5)
    assert page.add((0,), a_finding(0)) and page.token({}) == ""


@pytest.mark.parametrize("after", [["one"], [True], [1, "x"]])
def test_a_token_whose_key_is_not_of_the_kinds_given_is_refused_naming_page_token(after: list[object]) -> None:
    token = validation.encode_page_token({}, after)  # as a client could make one by hand
    with pytest.raises(InvalidArgument) as refused:
        position(token, {}, (int,))
    assert refused.value.field == "page_token"


def a_request(start: int, end: int, amount: int = 500) -> QuotaRequestSubmitted:
    return QuotaRequestSubmitted(
        request_id="q-1",
        tenant="team-a",
        resource=ResourceKind.GPU,
        amount=amount,
        period_start_ms=start,
        period_end_ms=end,
        justification="j",
        requester="alice@example.com",
    )


def test_a_period_from_now_starts_now_and_is_the_same_request_whenever_it_is_retried() -> None:
    period = AskedPeriod(0, 0, DAY)
    assert period.resolved(NOW) == (NOW, NOW + DAY)
    first, later = a_request(NOW, NOW + DAY), a_request(NOW + 60_000, NOW + 60_000 + DAY)
    assert period.digest(first) == period.digest(later)
    assert AskedPeriod(0, 0, 2 * DAY).digest(a_request(NOW, NOW + 2 * DAY)) != period.digest(first)
    assert period.digest(a_request(NOW, NOW + DAY, amount=1)) != period.digest(first)


def test_a_period_with_both_ends_is_the_request_of_those_ends() -> None:
    period = AskedPeriod(NOW, NOW + DAY)
    assert period.resolved(0) == (NOW, NOW + DAY)
    assert period.digest(a_request(NOW, NOW + DAY)) != period.digest(a_request(NOW + 1, NOW + DAY))
    assert period.digest(a_request(NOW, NOW + DAY)) != AskedPeriod(0, NOW + DAY).digest(a_request(NOW, NOW + DAY))


@pytest.mark.parametrize(
    ("period", "field"),
    [
        (AskedPeriod(NOW, NOW + DAY, DAY), "period_ms"),
        (AskedPeriod(NOW, 0, 0), "period_end_ms"),
        (AskedPeriod(0, 0, -DAY), "period_ms"),
        (AskedPeriod(-1, NOW, 0), "period_start_ms"),
    ],
)
def test_a_period_given_wrong_is_refused_naming_the_field(period: AskedPeriod, field: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        period.resolved(NOW)
    assert refused.value.field == field
