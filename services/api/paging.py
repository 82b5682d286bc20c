"""Pages bounded in count and in bytes, for lists whose items vary in size: a quota request or a finding
carries free text of up to 4096 characters, so a page of the most items allowed could pass gRPC's 4 MiB.

Called by ``services.api.quota_requests`` and ``services.api.governance``. The page token
(``services.api.validation.encode_page_token``) holds the sort key of the last item given, so the next page
continues after it whatever was added meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from google.protobuf.message import Message

from services.api import validation
from services.api.errors import InvalidArgument

MAX_PAGE_BYTES = 2 * 1024 * 1024

M = TypeVar("M", bound=Message)


class BoundedPage(Generic[M]):
    """Items taken in order until ``size`` of them or ``max_bytes`` in all (a first item always fits)."""

    def __init__(self, size: int, max_bytes: int = MAX_PAGE_BYTES) -> None:
        self.items: list[M] = []
        self._size = size
        self._max_bytes = max_bytes
        self._bytes = 0
        self._last: Sequence[int | str] = ()
        self._more = False

    def add(self, key: Sequence[int | str], item: M) -> bool:
        """Take ``item`` (whose sort key is ``key``) if the page has room; ``False``: it is full, and
        ``item`` starts the next page."""
        size = item.ByteSize()
        if len(self.items) >= self._size or (self.items and self._bytes + size > self._max_bytes):
            self._more = True
            return False
        self.items.append(item)
        self._bytes += size
        self._last = key
        return True

    def token(self, query: Mapping[str, Any]) -> str:
        """The next page's token; empty when this page holds the last item."""
        return validation.encode_page_token(query, self._last) if self._more else ""


def position(token: str, query: Mapping[str, Any], kinds: Sequence[type]) -> list[Any] | None:
    """The sort key a page token continues after (``None`` for the first page), each part of the type
    ``kinds`` names: a token made by hand is refused naming ``page_token``, never compared as it is."""
    after = validation.decode_page_token(token, query, len(kinds))
    if after is None:
        return None
    if not all(
        isinstance(value, kind) and not isinstance(value, bool) for value, kind in zip(after, kinds, strict=True)
    ):
        raise InvalidArgument("page_token", "not a page token this server gave")
    return after
