"""List-then-watch of one kind of object, resumed from the last resource version, relisted on 410 Gone.

Called by ``node_watcher`` and ``pod_watcher`` (each hands in a ``Handler``). Calls the API server
through ``KubeApi``. The loop, as client-go's reflector runs it:

1. List every object (in pages), note the list's ``resourceVersion``; hand the whole set to
   ``handler.synced`` (which diffs it against what it knew: that is how deletions missed while the
   watch was down are found).
2. Watch from that version with bookmarks; hand each ADDED / MODIFIED / DELETED to ``handler.changed``
   and keep the version of the last event or bookmark.
3. When the stream ends (server timeout) or breaks (connection lost, API server restarted), watch
   again from the kept version: nothing is lost and nothing repeats.
4. When the server answers 410 Gone (the version was compacted away), go back to 1.
5. Other errors: back off (capped, jittered) and retry; reachability is tracked by ``KubeApi``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Protocol

from connectors.kubernetes.kubeapi import KubeApi, KubeError, Obj
from connectors.kubernetes.throttle import Backoff

log = logging.getLogger("fedsched.connector.kubernetes")


class Handler(Protocol):
    async def synced(self, objects: list[Obj]) -> None:
        """The full set of objects as of a list."""
        ...

    async def changed(self, kind: str, obj: Obj) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""
        ...


@dataclass
class ReflectorStats:
    lists: int = 0
    relists_gone: int = 0
    watches: int = 0
    watch_breaks: int = 0
    events: int = 0
    errors: int = 0


class Gone(Exception):
    """The watched version is no longer available (410): relist."""


def _version(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    version = meta.get("resourceVersion") if isinstance(meta, dict) else None
    return str(version) if version else None


class Reflector:
    def __init__(
        self,
        api: KubeApi,
        path: str,
        *,
        name: str,
        label_selector: str | None = None,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        backoff: Backoff | None = None,
    ) -> None:
        self.api = api
        self.path = path
        self.name = name
        self.label_selector = label_selector
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.backoff = backoff or Backoff(0.2, 30.0)
        self.stats = ReflectorStats()
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        """Set after the first complete list has been handed to the handler."""

    def _selector(self) -> dict[str, str]:
        return {"labelSelector": self.label_selector} if self.label_selector else {}

    async def _list(self, handler: Handler) -> None:
        items: list[Obj] = []
        token = ""
        while True:
            query = {**self._selector(), "limit": str(self.page_size)}
            if token:
                query["continue"] = token
            page = await self.api.request("GET", self.path, query=query)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            token = meta.get("continue") or ""
            if not token:
                break
        self.stats.lists += 1
        await handler.synced(items)
        self.resource_version = str(meta.get("resourceVersion") or "") or None
        self.synced.set()
        log.info("event=listed what=%s objects=%d resource_version=%s", self.name, len(items), self.resource_version)

    async def _watch(self, handler: Handler) -> None:
        query = {
            **self._selector(),
            "resourceVersion": self.resource_version or "",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout_s),
        }
        self.stats.watches += 1
        async for event in self.api.watch(self.path, query, idle_timeout_s=self.watch_timeout_s + 30):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Gone(obj.get("message", "resource version too old"))
                raise KubeError(int(obj.get("code") or 0), str(obj.get("reason", "")), str(obj.get("message", "")))
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.stats.events += 1
                await handler.changed(kind, obj)
            self.resource_version = _version(obj) or self.resource_version
            self.backoff.reset()

    async def run(self, handler: Handler) -> None:
        """List and watch until cancelled. ``resource_version`` set beforehand skips the first list."""
        while True:
            try:
                if self.resource_version is None:
                    await self._list(handler)
                    self.backoff.reset()
                await self._watch(handler)
            except (Gone, KubeError) as error:
                gone = isinstance(error, Gone) or (isinstance(error, KubeError) and error.status == 410)
                if gone:
                    self.stats.relists_gone += 1
                    log.info("event=relist what=%s reason=%r", self.name, str(error))
                    self.resource_version = None
                    continue
                if isinstance(error, KubeError) and error.status == 0:
                    self.stats.watch_breaks += 1
                self.stats.errors += 1
                delay = self.backoff.next_delay()
                log.warning("event=watch_error what=%s error=%r retry_in_s=%.2f", self.name, str(error), delay)
                await asyncio.sleep(delay)
