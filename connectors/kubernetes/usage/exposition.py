"""A parser of the Prometheus text exposition format (version 0.0.4), as the NVIDIA DCGM exporter writes it.

Called by ``usage.dcgm`` (the exporter's ``/metrics`` text). Pure: no I/O. Only the metric families asked
for are kept, so a scrape of an exporter with hundreds of counters costs memory for the few read.

What it reads: ``# HELP`` and ``# TYPE`` lines (kept: the family's type), other comments (skipped), and
samples ``name{label="value",...} value [timestamp]``: label values with the escapes ``\\\\``, ``\\"`` and
``\\n``; spaces around labels and a trailing comma (the exporter's README shows ``{gpu="0", UUID=...}``);
values as Go prints them (``NaN``, ``+Inf``, ``-Inf``, exponents). A malformed line is counted and the
first few are quoted (``Parsed.errors``), never raised: one bad series must not hide a node's others.

Bounded: at most ``Limits.max_bytes`` of text, ``max_lines`` lines and ``max_series`` kept samples per
scrape; what goes past a bound is dropped and ``Parsed.truncated`` says which bound and where.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
MAX_QUOTED_ERRORS = 5


@dataclass(frozen=True, slots=True)
class Limits:
    max_bytes: int = 8 * 1024 * 1024
    """The exporter's text is about 1-2 KiB per GPU and counter family; 8 MiB is far past any node."""
    max_lines: int = 200_000
    max_series: int = 20_000
    """Samples kept (of the families asked for): 64 GPUs x 4 families x a few pods each fits many times."""


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    """Sorted by label name (a label given twice: the last one)."""
    value: float
    timestamp_ms: int | None = None

    def label(self, name: str, default: str = "") -> str:
        for key, value in self.labels:
            if key == name:
                return value
        return default


@dataclass
class Parsed:
    samples: list[Sample] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)
    """``# TYPE`` of the families kept (gauge, counter, ...)."""
    malformed: int = 0
    errors: list[str] = field(default_factory=list)
    """The first malformed lines, each with its line number and what is wrong."""
    truncated: str | None = None
    """Which bound cut the scrape short, or None."""


class _Malformed(ValueError):
    pass


def parse(text: str, wanted: Collection[str], limits: Limits = DEFAULT_LIMITS) -> Parsed:
    """The samples of the families named in ``wanted`` (every family if empty)."""
    out = Parsed()
    if len(text) > limits.max_bytes:
        cut = text.rfind("\n", 0, limits.max_bytes)
        text = text[: max(cut, 0)]
        out.truncated = f"the scrape was longer than {limits.max_bytes} bytes: the rest was not read"
    for number, raw in enumerate(text.split("\n"), start=1):
        if number > limits.max_lines:
            out.truncated = f"more than {limits.max_lines} lines: the rest was not read"
            break
        line = raw.strip()
        if not line:
            continue
        try:
            if line.startswith("#"):
                _comment(line, wanted, out)
                continue
            sample = _sample(line, wanted)
        except _Malformed as error:
            out.malformed += 1
            if len(out.errors) < MAX_QUOTED_ERRORS:
                out.errors.append(f"line {number}: {error}: {line[:120]!r}")
            continue
        if sample is None:
            continue
        if len(out.samples) >= limits.max_series:
            out.truncated = f"more than {limits.max_series} samples of {sorted(wanted)}: the rest were dropped"
            break
        out.samples.append(sample)
    return out


def _comment(line: str, wanted: Collection[str], out: Parsed) -> None:
    parts = line[1:].split(None, 3)
    if len(parts) >= 3 and parts[0] == "TYPE":
        if not _NAME.fullmatch(parts[1]):
            raise _Malformed(f"bad metric name {parts[1]!r} in # TYPE")
        if not wanted or parts[1] in wanted:
            out.types[parts[1]] = parts[2]
    # HELP text and free comments say nothing we read.


def _sample(line: str, wanted: Collection[str]) -> Sample | None:
    match = _NAME.match(line)
    if match is None:
        raise _Malformed("no metric name")
    name, pos = match.group(), match.end()
    if wanted and name not in wanted:
        return None
    labels: dict[str, str] = {}
    if pos < len(line) and line[pos] == "{":
        pos = _labels(line, pos + 1, labels)
    rest = line[pos:].split()
    if not rest or (pos < len(line) and not line[pos].isspace()):
        raise _Malformed("no value after the metric name and labels")
    if len(rest) > 2:
        raise _Malformed("more than a value and a timestamp")
    value = _float(rest[0])
    timestamp = None
    if len(rest) == 2:
        try:
            timestamp = int(rest[1])
        except ValueError:
            raise _Malformed(f"timestamp {rest[1]!r} is not an integer of milliseconds") from None
    return Sample(name, tuple(sorted(labels.items())), value, timestamp)


def _labels(line: str, pos: int, labels: dict[str, str]) -> int:
    """Read ``name="value",...}`` from ``pos``; returns the position after the closing brace."""
    while True:
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == "}":
            return pos + 1
        match = _LABEL_NAME.match(line, pos)
        if match is None:
            raise _Malformed(f"bad label name at column {pos + 1}")
        pos = match.end()
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if line[pos : pos + 2] != '="':
            raise _Malformed(f'label {match.group()!r} is not followed by ="')
        value, pos = _quoted(line, pos + 2)
        labels[match.group()] = value
        while pos < len(line) and line[pos] in " \t":
            pos += 1
        if pos < len(line) and line[pos] == ",":
            pos += 1
        elif pos >= len(line) or line[pos] != "}":
            raise _Malformed(f"expected , or }} after label {match.group()!r}")


def _quoted(line: str, pos: int) -> tuple[str, int]:
    chars: list[str] = []
    while pos < len(line):
        char = line[pos]
        if char == '"':
            return "".join(chars), pos + 1
        if char == "\\":
            escaped = line[pos + 1 : pos + 2]
            if escaped not in _ESCAPES:
                raise _Malformed(f"unknown escape \\{escaped} in a label value")
            chars.append(_ESCAPES[escaped])
            pos += 2
            continue
        chars.append(char)
        pos += 1
    raise _Malformed("unterminated label value")


def _float(text: str) -> float:
    special = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}
    if text.lower() in special:
        return special[text.lower()]
    try:
        if "_" in text:  # Python's float() takes 1_000; the format does not
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise _Malformed(f"value {text!r} is not a number") from None
