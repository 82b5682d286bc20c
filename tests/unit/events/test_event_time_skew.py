"""An event whose own time lies too far from its record's time in the log is refused on reading, naming
the field ``time`` and by how much, at the one place every consumer decodes (``decode_record``)."""

from __future__ import annotations

import pytest

from events.catalog.errors import InvalidEvent
from events.catalog.jobs import JobStarted
from events.log.contract import LogRecord
from events.log.reading import SKEW_VARIABLE, decode_record, skew_from_environment
from events.wire.codec import DEFAULT_SKEW, UNCHECKED, TimeSkew, encode, parse_skew
from events.wire.envelope import MAX_TIME_MS, Envelope

pytestmark = pytest.mark.timeout(30)

NOW = 1_764_680_400_000  # the record's time in the log
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def record_at(event_ms: int, log_ms: int = NOW) -> LogRecord:
    wire = encode(Envelope(id="e-1", time_ms=event_ms, data=JobStarted(job_id="j1", cluster="c1")))
    return LogRecord(wire.topic, 0, 7, wire.key, wire.value, wire.headers, log_ms)


def test_the_year_9999_is_refused_naming_the_time_and_how_far_ahead_it_is() -> None:
    with pytest.raises(InvalidEvent) as caught:
        decode_record(record_at(MAX_TIME_MS))
    error = caught.value
    assert error.field == "time"
    ahead_s = (MAX_TIME_MS - NOW) // 1000
    assert error.reason == f"{ahead_s} s ahead of the log's time, more than the allowed skew of 86400 s"
    assert str(error).startswith("io.fedsched.JobStarted: field 'time': ")


@pytest.mark.parametrize(
    ("event_ms", "accepted"),
    [
        (NOW, True),
        (NOW + DAY_MS, True),  # the bound itself is allowed
        (NOW + DAY_MS + 1000, False),
        (NOW - 3650 * DAY_MS, True),
        (NOW - 3650 * DAY_MS - 1000, False),
        (0, False),  # 1970, written now
    ],
    ids=["on time", "a day ahead", "a day and a second ahead", "ten years behind", "more than ten years", "1970"],
)
def test_the_default_skew_allows_a_day_ahead_and_ten_years_behind(event_ms: int, accepted: bool) -> None:
    if accepted:
        assert decode_record(record_at(event_ms)).time_ms == event_ms
    else:
        with pytest.raises(InvalidEvent, match=r"field 'time': .* the log's time, more than the allowed skew"):
            decode_record(record_at(event_ms))


def test_a_record_with_no_time_in_the_log_and_an_unchecked_skew_are_not_checked() -> None:
    assert decode_record(record_at(MAX_TIME_MS, log_ms=0)).time_ms == MAX_TIME_MS
    assert decode_record(record_at(MAX_TIME_MS, log_ms=-1)).time_ms == MAX_TIME_MS
    assert decode_record(record_at(MAX_TIME_MS), UNCHECKED).time_ms == MAX_TIME_MS
    assert decode_record(record_at(MAX_TIME_MS), None).time_ms == MAX_TIME_MS


def test_behind_the_log_the_reason_says_behind() -> None:
    with pytest.raises(InvalidEvent) as caught:
        decode_record(record_at(NOW - 2 * HOUR_MS), TimeSkew(ahead_ms=HOUR_MS, behind_ms=HOUR_MS))
    assert caught.value.reason == "7200 s behind the log's time, more than the allowed skew of 3600 s"


@pytest.mark.parametrize(
    ("text", "skew"),
    [
        ("off", UNCHECKED),
        ("OFF", UNCHECKED),
        ("24h", DEFAULT_SKEW),
        ("90s", TimeSkew(90_000, DEFAULT_SKEW.behind_ms)),
        ("30m,2d", TimeSkew(30 * 60_000, 2 * DAY_MS)),
        (" 2h , none ", TimeSkew(2 * HOUR_MS, None)),
        ("none,1h", TimeSkew(None, HOUR_MS)),
    ],
)
def test_the_skew_is_read_from_its_configuration_text(text: str, skew: TimeSkew) -> None:
    assert parse_skew(text) == skew


@pytest.mark.parametrize("text", ["", "24", "24 hours", "-1h", "1h,2h,3h", "1w", "h"])
def test_configuration_text_that_is_not_a_skew_is_refused_saying_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="time skew"):
        parse_skew(text)


def test_the_environment_names_the_skew_and_a_bad_value_names_the_variable() -> None:
    assert skew_from_environment({}) == DEFAULT_SKEW
    assert skew_from_environment({SKEW_VARIABLE: " "}) == DEFAULT_SKEW
    assert skew_from_environment({SKEW_VARIABLE: "off"}) == UNCHECKED
    assert skew_from_environment({SKEW_VARIABLE: "1h,1d"}) == TimeSkew(HOUR_MS, DAY_MS)
    with pytest.raises(ValueError, match=SKEW_VARIABLE):
        skew_from_environment({SKEW_VARIABLE: "tomorrow"})


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="ahead_ms must be 0 or more"):
        TimeSkew(ahead_ms=-1)
