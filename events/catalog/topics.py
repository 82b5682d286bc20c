"""The topic catalogue: every topic's name, partition count, key, cleanup policy and retention.

Called by the admin step that creates topics (Kafka and the embedded log alike), by the codec to
route an event to its topic, and by ``fedsched events list``. Pure: no I/O.

Partitioning is computed here, not left to a client library, so Kafka and the embedded log put the
same key on the same partition, and Java producers using Kafka's default partitioner agree with us
(murmur2 of the key bytes, as ``org.apache.kafka.common.utils.Utils.murmur2``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Cleanup(StrEnum):
    DELETE = "delete"
    COMPACT = "compact"


FOREVER = -1
DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    key: str
    cleanup: Cleanup
    retention_ms: int
    purpose: str

    def kafka_config(self) -> dict[str, str]:
        """Topic-level configuration as Kafka's admin API takes it."""
        config = {"cleanup.policy": self.cleanup.value}
        if self.cleanup is Cleanup.COMPACT:
            # Compacted changelogs must not also expire by time (faust recovery issue #597).
            config["retention.ms"] = str(FOREVER)
        else:
            config["retention.ms"] = str(self.retention_ms)
        return config


INVENTORY = TopicSpec(
    "fedsched.inventory",
    6,
    "cluster/node id",
    Cleanup.DELETE,
    FOREVER,
    "cluster and node inventory, GPU health and usage reported by connectors",
)
JOBS = TopicSpec(
    "fedsched.jobs",
    6,
    "job id",
    Cleanup.DELETE,
    FOREVER,
    "job requests and lifecycle facts reported by connectors",
)
INTAKE = TopicSpec(
    "fedsched.intake",
    3,
    "client request id",
    Cleanup.DELETE,
    7 * DAY_MS,
    "submit and cancel requests published by MLOps tools, validated by the intake",
)
DECISIONS = TopicSpec(
    "fedsched.decisions",
    1,
    "job id",
    Cleanup.DELETE,
    FOREVER,
    "scheduler decisions and cycle records, on one partition so a cycle reads in order",
)
GOVERNANCE = TopicSpec(
    "fedsched.governance",
    1,
    "tenant id",
    Cleanup.DELETE,
    FOREVER,
    "policies, tenants, quotas and quota requests",
)
PROFILES = TopicSpec(
    "fedsched.profiles",
    6,
    "cluster/node id",
    Cleanup.COMPACT,
    FOREVER,
    "resource profiles computed by projections (latest per node)",
)
QUOTA_USAGE = TopicSpec(
    "fedsched.quota-usage",
    3,
    "tenant/queue id",
    Cleanup.COMPACT,
    FOREVER,
    "quota usage computed by projections (latest per tenant and queue)",
)
DEAD_LETTERS = TopicSpec(
    "fedsched.deadletter",
    1,
    "source topic/partition/offset",
    Cleanup.DELETE,
    30 * DAY_MS,
    "records that could not be read, with the reason, kept for inspection and replay",
)
AUDIT = TopicSpec(
    "fedsched.audit",
    1,
    "none (one partition)",
    Cleanup.DELETE,
    FOREVER,
    "signed checkpoints of the audit archive (events.audit.checkpoint), one record per checkpoint",
)

TOPICS: tuple[TopicSpec, ...] = (
    INVENTORY,
    JOBS,
    INTAKE,
    DECISIONS,
    GOVERNANCE,
    PROFILES,
    QUOTA_USAGE,
    DEAD_LETTERS,
    AUDIT,
)
_BY_NAME = {spec.name: spec for spec in TOPICS}


def topic(name: str) -> TopicSpec:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown topic {name!r}; known: {sorted(_BY_NAME)}") from None


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (32-bit, seed 0x9747b28c), as a signed 32-bit int like the Java original."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = data[i4] | (data[i4 + 1] << 8) | (data[i4 + 2] << 16) | (data[i4 + 3] << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    extra = length % 4
    tail = length4 * 4
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes | None, partitions: int) -> int:
    """The partition of a key, as Kafka's default partitioner picks it. Keyless records go to 0:
    the log's order for them is then total, which replay prefers over spreading."""
    if key is None or partitions == 1:
        return 0
    return (murmur2(key) & 0x7FFFFFFF) % partitions
