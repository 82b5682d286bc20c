"""Where events are kept: the ``EventLog`` contract and its two implementations.

``open_log(url)`` is the one place that picks an implementation: ``kafka://host:port[,host:port]``
for Kafka, ``postgresql://...`` for the embedded log.
"""

from __future__ import annotations

from events.log.contract import (
    Appended,
    EventLog,
    GroupConsumer,
    GroupOffsets,
    LogError,
    LogProducer,
    LogReader,
    LogRecord,
    LogTail,
    OutRecord,
    ProducerFenced,
    TopicPartition,
    UnknownTopic,
)

__all__ = [
    "Appended",
    "EventLog",
    "GroupConsumer",
    "GroupOffsets",
    "LogError",
    "LogProducer",
    "LogReader",
    "LogRecord",
    "LogTail",
    "OutRecord",
    "ProducerFenced",
    "TopicPartition",
    "UnknownTopic",
    "open_log",
]


def open_log(url: str) -> EventLog:
    """An unstarted log for a URL; call ``await log.start()``."""
    if url.startswith("kafka://"):
        from events.log.kafka import KafkaEventLog

        return KafkaEventLog(url.removeprefix("kafka://"))
    if url.startswith(("postgresql://", "postgres://")):
        from events.log.postgres import PostgresEventLog

        return PostgresEventLog(url)
    raise ValueError(f"log url must start with kafka:// or postgresql://, got {url!r}")
