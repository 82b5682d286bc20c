"""Time zones from the zone database, for the calendar windows of budgets (``events.catalog.budget_windows``).

Called by governance's host (which opens budget windows), the API (which checks a Budget's zone and
answers ``fedsched budget``) and the simulator. Calls ``zoneinfo``: the zone database of the machine, or
of the ``tzdata`` package where the machine has none.
"""

from __future__ import annotations

import functools
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime


class UnknownZone(ValueError):
    """A time zone name the zone database does not have."""


@functools.lru_cache(maxsize=256)
def offsets(zone: str) -> Callable[[int], int]:
    """``offset_at(utc_ms) -> offset_ms`` of ``zone`` (east of UTC positive), or ``UnknownZone``."""
    try:
        rules = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise UnknownZone(f"no time zone named {zone!r}") from None

    def offset_at(utc_ms: int) -> int:
        moment = datetime.fromtimestamp(utc_ms / 1000, tz=UTC).astimezone(rules)
        offset = moment.utcoffset()
        return 0 if offset is None else int(offset.total_seconds() * 1000)

    return offset_at


__all__ = ["UnknownZone", "offsets"]
