"""Kafka's retry warnings: the first of a kind and then one a minute, saying how many were left out."""

from __future__ import annotations

import logging

from events.plumbing.logs import RetryWarnings
from events.plumbing.metrics import latency_quantiles


def record(message: str, level: int = logging.WARNING) -> logging.LogRecord:
    return logging.LogRecord("aiokafka.producer.sender", level, __file__, 1, message, None, None)


RETRY = "Got error produce response on topic-partition TP, retrying. Error: <class 'NotEnoughReplicasError'>"


def test_retry_warnings_are_let_through_once_a_minute_with_the_count_of_the_rest() -> None:
    now = [0.0]
    limiter = RetryWarnings(every_s=60.0, clock=lambda: now[0])
    assert limiter.filter(record(RETRY))
    for second in range(1, 50):
        now[0] = float(second)
        assert not limiter.filter(record(RETRY))
    other = record("Got error produce response, retrying. Error: <class 'ConcurrentTransactions'>")
    assert limiter.filter(other)  # another kind has its own minute
    assert limiter.filter(record("something else entirely"))
    assert limiter.filter(record(RETRY, logging.ERROR))  # only warnings are held back
    now[0] = 61.0
    passed = record(RETRY)
    assert limiter.filter(passed)
    assert "(49 more like it in the last 61 s, not logged)" in passed.getMessage()
    now[0] = 62.0
    assert not limiter.filter(record(RETRY))


def test_placement_latency_quantiles() -> None:
    assert latency_quantiles([]) == []
    samples = {labels["quantile"]: value for _, labels, value in latency_quantiles(range(1, 1001))}
    assert samples == {"0.5": 0.501, "0.95": 0.951, "0.99": 0.991}
