"""Kubernetes resource quantities (``3500m``, ``16Gi``, ``1e3``) as fedsched's integer units.

Called by ``nodes`` (allocatable CPU, memory and GPUs) and by tests. Pure. The grammar is the API
machinery's: a decimal number, then a binary suffix (Ki..Ei), a decimal one (n, u, m, k, M..E) or an
exponent (``e3``). Results round down, so a node never looks bigger than it is.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE])?$")
_MIB = Decimal(2**20)


class QuantityError(ValueError):
    pass


def parse(text: str | int | float) -> Decimal:
    """The value of a quantity in its base unit (cores, bytes, devices)."""
    if isinstance(text, int | float):
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip())
    if not match:
        raise QuantityError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        value = Decimal(number)
    except InvalidOperation:  # pragma: no cover - the pattern admits only numbers
        raise QuantityError(f"not a Kubernetes quantity: {text!r}") from None
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix[:1] in ("e", "E"):
        return value.scaleb(int(suffix[1:]))
    return value * _DECIMAL[suffix]


def milli(text: str | int | float) -> int:
    """CPU and similar: the quantity in thousandths (``3500m`` -> 3500, ``2`` -> 2000), rounded down."""
    return max(int((parse(text) * 1000).to_integral_value(rounding="ROUND_FLOOR")), 0)


def mebibytes(text: str | int | float) -> int:
    """Memory: the quantity in MiB (``16Gi`` -> 16384), rounded down."""
    return max(int((parse(text) / _MIB).to_integral_value(rounding="ROUND_FLOOR")), 0)


def count(text: str | int | float) -> int:
    """Devices (``nvidia.com/gpu``): a whole number, rounded down."""
    return max(int(parse(text).to_integral_value(rounding="ROUND_FLOOR")), 0)
