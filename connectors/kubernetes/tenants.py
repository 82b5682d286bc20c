"""What the connector keeps of the governance topic: each tenant's image policy and quota.

Called by the connector (``load`` once before it acts on decisions) and by the executor (``apply`` for
each governance record its consumer group reads, then the tenant's objects are brought up to date);
read by ``connectors.kubernetes.images`` (allowed registries, pull secrets) and
``connectors.kubernetes.namespaces`` (ResourceQuota, LimitRange). Calls the event log.

Decision: the consumer group's offsets say where the connector stopped acting, not what it knew, so a
restart would start with no tenants. ``load`` reads the governance topic from its start to its end
(every record, keeping ``TenantRegistered`` and ``QuotaSet`` only, by their ``ce_type`` header), which is
what the log alone says about tenants; the group then goes on from its committed offsets, and a record
at or below what ``load`` already read is passed over (positions per partition), so an older setting
never comes back. Within a partition, the last record about a tenant (or a tenant's queue) wins: every
``QuotaSet``, a grant's included, states the queue's whole quota (``services.governance.core.quota``), and
a deleted Tenant document (``change.deleted``) takes its settings out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from events.catalog import REGISTRY
from events.catalog.base import Event
from events.catalog.errors import EventError
from events.catalog.governance import QuotaSet, TenantRegistered
from events.catalog.images import ImagePolicy, parse_registry
from events.catalog.topics import GOVERNANCE
from events.catalog.types import QueueId, QuotaLine, TenantId
from events.log import EventLog, LogRecord, TopicPartition
from events.log.reading import read_to_end
from events.wire.codec import decode

log = logging.getLogger("fedsched.connector.kubernetes")

_TYPES = {cls.event_type.encode() for cls in (TenantRegistered, QuotaSet)}
OTHER_GOVERNANCE = frozenset(cls.event_type for cls in REGISTRY.all_classes() if cls.topic == GOVERNANCE.name) - {
    TenantRegistered.event_type,
    QuotaSet.event_type,
}
"""The governance topic's other event types (clock ticks, findings, budgets, ...): the connector's
consumer passes over them undecoded."""


@dataclass(frozen=True, slots=True)
class TenantOptions:
    """The cluster's side of tenant policy (``ConnectorConfig``'s fields of the same names)."""

    allowed_registries: tuple[str, ...] | None = None
    """Registries (``HOST[:PORT][/PATH]``) every image in this cluster must come from, whatever its tenant
    allows; ``None``: the tenants' policies alone decide."""
    pull_secret_namespace: str | None = None
    """Where the platform team keeps the pull secrets the connector copies into tenant namespaces."""
    container_cpu_milli: int = 100
    """The CPU request a container that asks none gets in a tenant namespace (its LimitRange)."""
    container_memory_mib: int = 256
    """The memory request a container that asks none gets in a tenant namespace (its LimitRange)."""

    def __post_init__(self) -> None:
        """A configuration that cannot work is refused before the connector starts, naming the field."""
        for i, registry in enumerate(self.allowed_registries or ()):
            try:
                parse_registry(registry)
            except ValueError as error:
                raise ValueError(f"allowed_registries[{i}]: {error}") from None
        for name in ("container_cpu_milli", "container_memory_mib"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must not be negative")


class TenantBook:
    def __init__(self, log_: EventLog | None) -> None:
        """``log_``: the event log ``load`` reads (``None``: nothing to load, as in unit tests)."""
        self._log = log_
        self._images: dict[TenantId, ImagePolicy] = {}
        self._quotas: dict[TenantId, dict[QueueId, tuple[QuotaLine, ...]]] = {}
        self._ever_quoted: set[TenantId] = set()
        self._read: dict[int, int] = {}
        """Partition of the governance topic -> the next offset to take into account."""
        self.loaded = False

    def images(self, tenant: TenantId) -> ImagePolicy | None:
        """The tenant's image policy (``None``: it sets none)."""
        return self._images.get(tenant)

    def quotas(self, tenant: TenantId) -> Mapping[QueueId, tuple[QuotaLine, ...]]:
        """The quota lines of each of the tenant's queues (a queue set to no lines is left out)."""
        return self._quotas.get(tenant, {})

    def has_quota(self, tenant: TenantId) -> bool:
        """Whether the log ever set a quota of the tenant (then its namespace's limits are fedsched's to
        keep, a cleared quota included); a tenant never given one gets no objects and costs no request."""
        return tenant in self._ever_quoted

    def tenants(self) -> list[TenantId]:
        """Every tenant with an image policy or a quota, in name order."""
        return sorted(set(self._images) | set(self._quotas))

    def apply(self, record: LogRecord, event: Event) -> TenantId | None:
        """Take a governance record into account, once; the tenant whose settings it states, if any."""
        if record.offset < self._read.get(record.partition, 0):
            return None
        self._read[record.partition] = record.offset + 1
        return self.take(event)

    def take(self, event: Event) -> TenantId | None:
        if isinstance(event, TenantRegistered):
            deleted = event.change is not None and event.change.deleted
            if event.images is None or deleted:
                self._images.pop(event.tenant, None)
            else:
                self._images[event.tenant] = event.images
            return event.tenant
        if isinstance(event, QuotaSet):
            self._ever_quoted.add(event.tenant)
            queues = self._quotas.setdefault(event.tenant, {})
            if event.lines:
                queues[event.queue] = event.lines
            else:
                queues.pop(event.queue, None)
                if not queues:
                    del self._quotas[event.tenant]
            return event.tenant
        return None

    async def load(self) -> None:
        """Read the governance topic from its start to its end (see the module's docstring)."""
        if self._log is None:
            self.loaded = True
            return
        partitions = await self._log.partitions(GOVERNANCE.name)
        reader = await self._log.reader()
        try:
            for partition in range(partitions):
                tp = TopicPartition(GOVERNANCE.name, partition)
                async for batch in read_to_end(reader, tp, self._read.get(partition, 0)):
                    for record in batch:
                        self._read[partition] = record.offset + 1
                        if record.header("ce_type") not in _TYPES:
                            continue
                        try:
                            self.take(decode(record.headers, record.value).data)
                        except EventError:
                            continue  # the consumer group dead-letters it with the reason
        finally:
            await reader.close()
        self.loaded = True
        log.info("event=tenants_loaded tenants=%d read=%s", len(self.tenants()), dict(self._read))
