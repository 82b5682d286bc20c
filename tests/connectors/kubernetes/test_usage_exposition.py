"""The Prometheus text format as the DCGM exporter writes it: what is read, what is refused, the bounds."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from connectors.kubernetes.usage import Limits, parse
from connectors.kubernetes.usage.dcgm import FAMILIES, FB_USED, GPU_UTIL

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm"


def test_a_recorded_exporter_answer_keeps_only_the_families_asked_for() -> None:
    parsed = parse((FIXTURES / "node-a.prom").read_text(), FAMILIES)
    assert parsed.malformed == 0 and parsed.truncated is None
    assert {s.name for s in parsed.samples} == set(FAMILIES)
    assert parsed.types == {name: "gauge" for name in FAMILIES}
    util = [s for s in parsed.samples if s.name == GPU_UTIL]
    assert [(s.label("gpu"), s.label("pod"), s.value) for s in util] == [
        ("0", "train-job-1-0", 92.0),
        ("1", "train-job-1-0", 88.0),
        ("2", "notebook-x-0", 35.0),
        ("3", "", 0.0),
    ]
    assert util[0].label("Hostname") == "gpu-node-a" and util[0].label("modelName") == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("line", "labels"),
    [
        ('m{a="x\\"y"} 1', {"a": 'x"y'}),
        ('m{a="back\\\\slash"} 1', {"a": "back\\slash"}),
        ('m{a="two\\nlines"} 1', {"a": "two\nlines"}),
        ('m{gpu="0", UUID="GPU-1"} 1', {"gpu": "0", "UUID": "GPU-1"}),  # the README's spacing
        ('m{a="1",} 1', {"a": "1"}),  # a trailing comma
        ('m{a="{,}"} 1', {"a": "{,}"}),  # braces and commas inside a value
        ("m 1", {}),
        ("m{} 1", {}),
    ],
)
def test_label_values_are_unescaped(line: str, labels: dict[str, str]) -> None:
    parsed = parse(line, ["m"])
    assert parsed.malformed == 0, parsed.errors
    assert dict(parsed.samples[0].labels) == labels


@pytest.mark.parametrize(
    ("text", "check"),
    [
        ("m NaN", math.isnan),
        ("m +Inf", lambda v: v == math.inf),
        ("m -Inf", lambda v: v == -math.inf),
        ("m 1.5e3", lambda v: v == 1500.0),
        ("m 9223372036854775794", lambda v: v > 2**62),  # DCGM's blank: read as it is, judged by dcgm
    ],
)
def test_values_as_go_prints_them(text: str, check: object) -> None:
    parsed = parse(text, ["m"])
    assert callable(check) and check(parsed.samples[0].value)


def test_a_timestamp_is_kept() -> None:
    assert parse("m 1 1700000000123", ["m"]).samples[0].timestamp_ms == 1700000000123


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('m{a="x} 1', "unterminated label value"),
        ('m{a="x\\q"} 1', "unknown escape"),
        ("m{a=x} 1", 'is not followed by ="'),
        ('m{1a="x"} 1', "bad label name"),
        ('m{a="x" b="y"} 1', "expected , or }"),
        ("m", "no value"),
        ("m one", "is not a number"),
        ("m 1_000", "is not a number"),
        ("m 1 2 3", "more than a value and a timestamp"),
        ("m 1 soon", "timestamp"),
        ('m{a="x"}1', "no value"),
    ],
)
def test_a_malformed_line_is_counted_and_quoted_not_raised(line: str, why: str) -> None:
    parsed = parse(f"m 7\n{line}\nm 8\n", ["m"])
    assert parsed.malformed == 1
    assert why in parsed.errors[0] and parsed.errors[0].startswith("line 2:")
    assert [s.value for s in parsed.samples] == [7.0, 8.0], "the lines around it still count"


def test_only_the_first_errors_are_quoted() -> None:
    parsed = parse("m x\n" * 20, ["m"])
    assert parsed.malformed == 20 and len(parsed.errors) == 5


def test_families_not_asked_for_are_not_parsed_at_all() -> None:
    parsed = parse('other{a="broken\nm 1\n', ["m"])
    assert parsed.malformed == 0 and [s.name for s in parsed.samples] == ["m"]


def test_the_series_bound_drops_the_rest_and_says_so() -> None:
    text = "".join(f'{FB_USED}{{gpu="{i}"}} {i}\n' for i in range(10))
    parsed = parse(text, [FB_USED], Limits(max_series=4))
    assert len(parsed.samples) == 4
    assert parsed.truncated is not None and "more than 4 samples" in parsed.truncated


def test_the_line_bound_stops_reading_and_says_so() -> None:
    parsed = parse("# a comment\n" * 10 + "m 1\n", ["m"], Limits(max_lines=10))
    assert parsed.samples == [] and parsed.truncated == "more than 10 lines: the rest was not read"


def test_the_byte_bound_cuts_at_a_whole_line_and_says_so() -> None:
    text = "m 1\n" + "m 22222\n" * 3
    parsed = parse(text, ["m"], Limits(max_bytes=10))
    assert [s.value for s in parsed.samples] == [1.0]
    assert parsed.malformed == 0 and parsed.truncated is not None and "10 bytes" in parsed.truncated
