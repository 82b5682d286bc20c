"""Fixtures of the integration tests: the Kafka log adapter on the session's broker
(``tests.integration.kafka_support``)."""

from tests.integration.kafka_support import kafka

__all__ = ["kafka"]
