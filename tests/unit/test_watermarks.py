"""A partition's watermarks, asked again while a topic just created has no serving leader.

CI met it (2026-12-07): Connect's producer had just created Debezium's topic, the metadata
listed its partitions, and ListOffsets answered NOT_LEADER_FOR_PARTITION. The driver reads
Debezium's transaction topic the same way (list it, then its watermarks) as it appears.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline.core.batch import watermarks

TP = TopicPartition("dbz.public.accounts", 0)


class _Broker:
    """A consumer whose ListOffsets answers ``errors`` in turn, then (3, 9)."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.asked = 0

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        assert tp is TP
        assert timeout > 0
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 9


@pytest.mark.parametrize(
    "code",
    [
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    ],
)
def test_a_partition_not_served_yet_is_asked_again(code: int) -> None:
    broker = _Broker(code, code)
    assert watermarks(broker, TP, timeout=5) == (3, 9)
    assert broker.asked == 3
    # the control: asked once, as a plain get_watermark_offsets does, the error reaches the caller
    with pytest.raises(KafkaException):
        _Broker(code).get_watermark_offsets(TP, timeout=5)


def test_other_errors_are_raised_at_once() -> None:
    broker = _Broker(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException) as raised:
        watermarks(broker, TP, timeout=5)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert broker.asked == 1


def test_a_leader_that_never_comes_is_an_error_after_the_timeout() -> None:
    broker = _Broker(*[KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    with pytest.raises(KafkaException) as raised:
        watermarks(broker, TP, timeout=0.3)
    assert raised.value.args[0].code() == KafkaError.NOT_LEADER_FOR_PARTITION
    assert 2 <= broker.asked < 10


def test_a_topic_unknown_past_the_grace_is_named_before_the_timeout(monkeypatch: Any) -> None:
    """A topic deleted for good: its error after a few seconds, not the caller's 30."""
    monkeypatch.setattr("pipeline.core.batch.kafka_clients.UNKNOWN_GRACE", 0.3)
    broker = _Broker(*[KafkaError.UNKNOWN_TOPIC_OR_PART] * 1000)
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        watermarks(broker, TP, timeout=30)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert time.monotonic() - started < 5
    assert 2 <= broker.asked < 10
