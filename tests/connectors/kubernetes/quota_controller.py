"""The test plays the quota controller, as it plays the kubelet: no kube-controller-manager runs here.

Until a ResourceQuota's ``status.hard`` is written, the API server refuses every pod of its namespace
("status unknown for quota"). ``QuotaController`` copies the ``spec.hard`` of fedsched's quotas into their
status (with nothing used), which is what the real controller does first, while a test runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from connectors.kubernetes import names
from connectors.kubernetes.kubeapi import MERGE_PATCH, KubeApi, KubeError


async def _sync(api: KubeApi) -> None:
    selector = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE}"
    listing = await api.request("GET", "/api/v1/resourcequotas", query={"labelSelector": selector})
    for quota in listing.get("items") or []:
        hard = (quota.get("spec") or {}).get("hard") or {}
        if (quota.get("status") or {}).get("hard") == hard:
            continue
        meta = quota["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/resourcequotas/{meta['name']}/status"
        gone = dict.fromkeys((quota.get("status") or {}).get("hard") or {})  # a merge patch keeps other keys
        status = {"status": {"hard": {**gone, **hard}, "used": {**gone, **dict.fromkeys(hard, "0")}}}
        with contextlib.suppress(KubeError):
            await api.request("PATCH", path, body=status, content_type=MERGE_PATCH)


@contextlib.asynccontextmanager
async def quota_controller(api: KubeApi) -> AsyncIterator[None]:
    async def run() -> None:
        while True:
            await _sync(api)
            await asyncio.sleep(0.1)

    task = asyncio.create_task(run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
