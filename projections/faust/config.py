"""Settings of a faust projection worker and the names of every topic it reads and writes.

Called by ``projections.faust.app``, the ``fedsched projections worker`` command, the benchmark
and the tests. No I/O (it takes the entity format marker ``STATE_FORMAT`` from ``projections.readmodel.writer``
and the stage codec's layout fingerprint ``LAYOUT`` from ``projections.stages.codec``).

Every topic has an explicit partition count: source and public topics take theirs from the topic
catalogue; each stage's internal topic and its table's changelog share ``partitions`` (one for the
fleet, which has the single key ``fleet``). A ``topic_prefix`` puts a whole deployment's public
topics under ``<prefix>.fedsched.*`` (tests and benchmarks use it to stay apart).

``app_id`` with the entity format and layout makes the ``group``: the faust app id, hence the consumer
group, and the prefix of the internal and changelog topics (``<app id>.s<format>-<layout>``, the layout
being the first 8 hex digits of the stage codec's fingerprint of every class it stores). The changelogs
hold the stages' entities and the internal topics packs of their inputs, in the stage codec's format; a
worker of another layout refuses to read them (``projections.stages.codec.LayoutMismatch``). A change
of a stored class's fields (the layout changes by itself) or a raised ``STATE_FORMAT`` (by hand, when a
fold changes what the read models say, as for the in-process runner's read models) therefore starts a
new group with fresh changelogs and internal topics and no committed offsets:
its workers rebuild every entity from offset 0 of the source topics, and rewrite each entity's
read-model rows as they reach it (rows are replaced whole per entity, so once caught up they are
those of a clean rebuild). Nothing of the old layout is ever read; its topics and group are left
for an operator to delete. Stop the old workers before starting new ones: both would write the
same read models. (Detecting and resetting in place instead would need every worker of the group to
agree on when to reset, and the committed offsets and changelogs to be rewound together.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from events.catalog.topics import TOPICS, TopicSpec, topic
from projections.readmodel.rows.tables import SCHEMA
from projections.readmodel.writer import STATE_FORMAT
from projections.stages.codec import LAYOUT
from projections.stages.sources import SOURCE_TOPICS, source_rank

SOURCES = tuple(topic(name) for name in SOURCE_TOPICS)
SINGLE_PARTITION_STAGES = frozenset({"fleet"})


@dataclass(frozen=True)
class WorkerConfig:
    broker: str
    """Kafka bootstrap servers, ``host:port[,host:port]``."""
    dsn: str
    app_id: str = "fedsched-projections"
    topic_prefix: str = ""
    schema: str = SCHEMA
    store: str = "memory"
    """``memory`` (tables rebuilt from their changelogs on start) or ``rocksdb`` (rocksdict)."""
    data_dir: Path | None = None
    web_port: int | None = None
    partitions: int = 6
    replication: int = 1
    batch: int = 2000
    """Records one agent takes at a time (a stage's batch is one PostgreSQL transaction). The router
    takes all it holds once it holds this many, or ``linger_s`` after the first arrived."""
    linger_s: float = 0.02
    """How long an agent (or the router) waits to fill a batch."""
    pack_size: int = 500
    session_timeout_s: float = 10.0
    commit_interval_s: float = 1.0
    tick_s: float = 0.05
    """How often the router retries what alignment holds back when nothing new arrives."""
    align: bool = True

    def source(self, name: str) -> str:
        return f"{self.topic_prefix}.{name}" if self.topic_prefix else name

    def logical(self, topic: str) -> str:
        prefix = f"{self.topic_prefix}." if self.topic_prefix else ""
        return topic.removeprefix(prefix)

    @property
    def source_topics(self) -> tuple[str, ...]:
        return tuple(self.source(spec.name) for spec in SOURCES)

    @property
    def group(self) -> str:
        """The faust app id and consumer group: ``app_id`` in the current entity format and layout (see above)."""
        return f"{self.app_id}.s{STATE_FORMAT}-{LAYOUT[:8]}"

    def stage_topic(self, stage: str) -> str:
        return f"{self.group}.stage.{stage}"

    def stage_partitions(self, stage: str) -> int:
        return 1 if stage in SINGLE_PARTITION_STAGES else self.partitions

    def table_name(self, stage: str) -> str:
        return f"stage-{stage}"

    def changelog_topic(self, stage: str) -> str:
        """As faust names it: ``<faust app id>-<table>-changelog``."""
        return f"{self.group}-{self.table_name(stage)}-changelog"

    def public_specs(self) -> list[TopicSpec]:
        """The catalogue's topics under this deployment's prefix, to create if missing."""
        return [
            TopicSpec(self.source(s.name), s.partitions, s.key, s.cleanup, s.retention_ms, s.purpose) for s in TOPICS
        ]

    def rank(self, topic: str) -> int:
        return source_rank(self.logical(topic))

    def internal_topics(self, stages: Iterable[str]) -> list[str]:
        return [name for stage in stages for name in (self.stage_topic(stage), self.changelog_topic(stage))]
