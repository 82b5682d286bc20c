"""A tenant namespace's policy objects: its ResourceQuota and LimitRange, and copies of its pull secrets.

Called by the executor: ``namespace_ready`` once it has made (or found) a tenant's namespace, before the
pods; ``refresh`` when the governance topic changes the tenant's quota or image policy; ``refresh_all``
once at start, after the tenant book has read the log (a change made while the connector was away), for
the namespaces where the cluster's pods run.
Calls the API server; renders with ``connectors.kubernetes.namespaces``; reads the ``TenantBook``.

Every object is written by server-side apply (field manager ``fedsched-connector``, forced): applying the
same manifest again changes nothing, a changed one replaces what fedsched wrote and nothing else. A
ResourceQuota the tenant's quota no longer calls for is deleted. A tenant the log never gave a quota gets
neither object, and costs no request. The limits are a safety net beside fedsched's own quota (which
placed the pods): the API server refusing them (422, ...) is logged and retried at the next launch into
the namespace or change of the tenant, and does not fail the launch; a refusal of the connector itself
(RBAC) is treated as for its pods (retried for ``denied_retry_s``, the cluster reported unreachable).

Pull secrets, decided: the platform team creates each ``kubernetes.io/dockerconfigjson`` Secret a Tenant
document names once, in the connector's namespace (``ConnectorConfig.pull_secret_namespace``); the
connector copies its type and data into the tenant's namespace (applied, so a rotated secret reaches
namespaces at the next refresh) before making pods that name it. A secret missing there fails the launch
with words saying where it is expected, rather than pods that cannot pull. Its content is never logged.
Without a ``pull_secret_namespace`` nothing is copied: the pods name the secrets, which someone else
(an external-secrets operator, the team) keeps in the tenant's namespace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from connectors.kubernetes import accelerators, names, namespaces
from connectors.kubernetes.kubeapi import KubeApi, KubeError, Obj
from connectors.kubernetes.pods import RenderOptions
from connectors.kubernetes.tenants import TenantBook, TenantOptions
from events.catalog.types import TenantId

log = logging.getLogger("fedsched.connector.kubernetes")
Retrying = Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]

APPLY = "application/apply-patch+yaml"
FIELD_MANAGER = "fedsched-connector"
_APPLY_QUERY = {"fieldManager": FIELD_MANAGER, "force": "true"}
QUOTA_SYNC_S = 10.0
"""How long a new or changed ResourceQuota is waited for, before pods are made (the quota controller
takes it in within a second or two)."""


class PullSecretMissing(Exception):
    """A pull secret the tenant names cannot be copied into its namespace; the message says why."""


class TenantSetup:
    def __init__(
        self, api: KubeApi, tenants: TenantBook, render: RenderOptions, options: TenantOptions, retrying: Retrying
    ) -> None:
        self.api = api
        self.tenants = tenants
        self.namespace_prefix = render.namespace_prefix
        self.gpu_resource = render.gpu_resource
        self.defaults = namespaces.ContainerDefaults(options.container_cpu_milli, options.container_memory_mib)
        self.pull_secret_namespace = options.pull_secret_namespace
        self._retrying = retrying
        self._applied: dict[str, tuple[object, ...]] = {}
        """Namespace -> the settings last written into it by this process."""

    def _secret_names(self, tenant: TenantId) -> tuple[str, ...]:
        policy = self.tenants.images(tenant)
        return policy.pull_secrets if policy is not None else ()

    def _wanted(self, tenant: TenantId) -> tuple[object, ...]:
        return namespaces.caps_of(self.tenants.quotas(tenant)), self._secret_names(tenant)

    async def namespace_ready(self, tenant: TenantId, namespace: str) -> None:
        """Bring the namespace's objects to the tenant's settings, unless this process already did.
        Raises ``PullSecretMissing``."""
        if self._applied.get(namespace) != self._wanted(tenant):
            await self._write(tenant, namespace)

    async def refresh(self, tenant: TenantId) -> None:
        """After a change of the tenant's settings: rewrite its namespace's objects, if it has one."""
        namespace = names.namespace_name(tenant, self.namespace_prefix)
        if not self.tenants.has_quota(tenant) and not self._secret_names(tenant):
            self._applied.pop(namespace, None)
            return  # nothing of fedsched's to keep in its namespace: no request
        if namespace not in self._applied:
            try:
                await self._get(f"/api/v1/namespaces/{namespace}")
            except KubeError as error:
                if error.status != 404:
                    log.warning("event=tenant_refresh_error tenant=%s error=%r", tenant, str(error))
                return  # none (made, with its objects, at the tenant's first placement here), or retried then
        await self._write_between_launches(tenant, namespace)

    async def refresh_all(self, namespaces_in_use: Collection[str]) -> None:
        """At start: rewrite the objects of every tenant namespace where this cluster's pods run (what the
        pod watcher listed), so a change made while the connector was away is in force; other namespaces
        are brought up to date at their next placement or change."""
        for tenant in self.tenants.tenants():
            namespace = names.namespace_name(tenant, self.namespace_prefix)
            if namespace in namespaces_in_use:
                await self._write_between_launches(tenant, namespace)

    async def _write_between_launches(self, tenant: TenantId, namespace: str) -> None:
        """Write with no launch to fail: a missing pull secret is logged (the next launch fails on it)."""
        try:
            await self._write(tenant, namespace)
        except PullSecretMissing as error:
            log.warning("event=pull_secret_missing tenant=%s namespace=%s error=%r", tenant, namespace, str(error))

    async def _write(self, tenant: TenantId, namespace: str) -> None:
        wanted = self._wanted(tenant)
        limits_ok = await self._limits(tenant, namespace)
        await self._secrets(tenant, namespace)
        if limits_ok:
            self._applied[namespace] = wanted

    async def _limits(self, tenant: TenantId, namespace: str) -> bool:
        if not self.tenants.has_quota(tenant):
            return True  # no quota in the log: the namespace is left as it is
        caps = namespaces.caps_of(self.tenants.quotas(tenant))
        gpus = (self.gpu_resource, accelerators.AMD_GPU)
        quota = namespaces.resource_quota(tenant, namespace, caps, gpus, tuple(accelerators.ASCEND_RESOURCES))
        limits = namespaces.limit_range(tenant, namespace, caps, self.defaults)
        base = f"/api/v1/namespaces/{namespace}"
        try:  # the limits first: their default requests let pods in under a new quota
            await self._apply(f"{base}/limitranges/{namespaces.LIMITS_NAME}", limits)
            if quota is None:
                await self._delete(f"{base}/resourcequotas/{namespaces.QUOTA_NAME}")
            else:
                path = f"{base}/resourcequotas/{namespaces.QUOTA_NAME}"
                await self._in_force(path, await self._apply(path, quota))
        except KubeError as error:
            log.warning("event=tenant_limits_error tenant=%s namespace=%s error=%r", tenant, namespace, str(error))
            return False
        hard = (quota or {}).get("spec", {}).get("hard", {})
        log.info("event=tenant_limits_applied tenant=%s namespace=%s hard=%s", tenant, namespace, hard)
        return True

    async def _secrets(self, tenant: TenantId, namespace: str) -> None:
        policy = self.tenants.images(tenant)
        source = self.pull_secret_namespace
        if policy is None or not policy.pull_secrets or source is None or source == namespace:
            return
        for name in policy.pull_secrets:
            path = f"/api/v1/namespaces/{source}/secrets/{name}"
            try:
                secret = await self._get(path)
            except KubeError as error:
                if error.status == 404:
                    raise PullSecretMissing(
                        f"pull secret {name!r} of tenant {tenant} is not in namespace {source!r}, where the "
                        "platform team keeps the secrets the connector copies into tenant namespaces"
                    ) from None
                raise PullSecretMissing(f"pull secret {name!r} could not be read from {source!r}: {error}") from None
            try:
                await self._apply(
                    f"/api/v1/namespaces/{namespace}/secrets/{name}", _copy(secret, tenant, namespace, source)
                )
            except KubeError as error:
                raise PullSecretMissing(
                    f"pull secret {name!r} could not be copied into {namespace!r}: {error}"
                ) from None
            log.info("event=pull_secret_copied tenant=%s secret=%s from=%s to=%s", tenant, name, source, namespace)

    async def _get(self, path: str) -> Obj:
        found: Obj = await self._retrying(lambda: self.api.request("GET", path))
        return found

    async def _apply(self, path: str, manifest: Obj) -> Obj:
        applied: Obj = await self._retrying(
            lambda: self.api.request("PATCH", path, body=manifest, content_type=APPLY, query=_APPLY_QUERY)
        )
        return applied

    async def _in_force(self, path: str, quota: Obj) -> None:
        """Wait (at most ``QUOTA_SYNC_S``) until the quota controller has taken the ResourceQuota in: until
        then the API server refuses every pod of the namespace ("status unknown for quota") or applies the
        old caps."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUOTA_SYNC_S
        while (quota.get("status") or {}).get("hard") != (quota.get("spec") or {}).get("hard"):
            if loop.time() >= deadline:
                log.warning("event=quota_not_synced path=%s waited_s=%.0f", path, QUOTA_SYNC_S)
                return
            await asyncio.sleep(0.2)
            quota = await self._get(path)

    async def _delete(self, path: str) -> None:
        try:
            await self._retrying(lambda: self.api.request("DELETE", path))
        except KubeError as error:
            if error.status != 404:
                raise


def _copy(secret: Obj, tenant: TenantId, namespace: str, source: str) -> Obj:
    """The secret as it goes into the tenant's namespace: its type and data, fedsched's labels."""
    meta = secret.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": meta.get("name"),
            "namespace": namespace,
            "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.LABEL_TENANT: names.label_value(tenant)},
            "annotations": {names.ANN_TENANT: tenant, "fedsched.io/copied-from": f"{source}/{meta.get('name')}"},
        },
        "type": secret.get("type") or "Opaque",
        "data": secret.get("data") or {},
    }
