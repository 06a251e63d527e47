"""Reading what landed on a topic, with confluent-kafka, up to the end offsets at call time."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.core.batch.kafka_clients import watermarks


@dataclass(frozen=True)
class Message:
    """One record as a consumer sees it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int = 0  # the record's Kafka timestamp (CreateTime: when it was produced)


def consume_all(
    bootstrap: str, topic: str, timeout: float = 60.0, *, isolation: str = "read_committed"
) -> list[Message]:
    """Every record of every partition of ``topic``, in offset order per partition.

    Reads committed records up to each partition's end as of the call (the consumer's
    end-of-partition event: a transaction's control record may be a partition's last offset),
    so the result is exact (no 'wait until quiet' guessing). ``isolation``
    ``read_uncommitted``: also the records of transactions aborted or still open, as a reader
    that does not honour transactions sees them (control records are never returned).
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics[topic]
        if metadata.error is not None and metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return []  # a topic nobody created yet holds nothing
        assert metadata.error is None, metadata.error
        partitions = sorted(metadata.partitions)
        ends = {}
        for p in partitions:  # a topic just created: its leader may not serve it yet
            low, high = watermarks(consumer, TopicPartition(topic, p), timeout)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        out: list[Message] = []
        remaining = dict(ends)
        while remaining:
            msg = consumer.poll(timeout)
            assert msg is not None, f"timed out reading {topic}; still missing {remaining}"
            p, offset = msg.partition(), msg.offset()
            error = msg.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                if p in remaining and offset >= remaining[p]:
                    del remaining[p]
                continue
            assert error is None, error
            if p in remaining:
                out.append(
                    Message(
                        p,
                        offset,
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                        msg.timestamp()[1],
                    )
                )
                if offset + 1 >= remaining[p]:
                    del remaining[p]
        return sorted(out, key=lambda m: (m.partition, m.offset))
    finally:
        consumer.close()


def partition_count(bootstrap: str, topic: str) -> int:
    """How many partitions ``topic`` has."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "meta"})
    try:
        return len(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    finally:
        consumer.close()


# Three rows, a record that is not JSON at offset 2 (key [2]), a row after it, a marker
WITH_A_BAD_RECORD = [
    b'{"after":{"id":0},"updated":"10.0000000000"}',
    b'{"after":{"id":1},"updated":"20.0000000000"}',
    b"not json {",
    b'{"after":{"id":3},"updated":"30.0000000000"}',
    b'{"resolved":"40.0000000000"}',
]


def produce_with_a_bad_record(bootstrap: str, topic: str) -> None:
    """``WITH_A_BAD_RECORD`` on a new one-partition ``topic``.

    Record ``i`` is keyed ``[i]``; the last (the marker) has no key.
    """
    from confluent_kafka import Producer  # noqa: PLC0415 - only tests that write need it

    from sinks.admin import ensure_topics  # noqa: PLC0415

    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 1})
    producer = Producer({"bootstrap.servers": bootstrap})
    last = len(WITH_A_BAD_RECORD) - 1
    for i, value in enumerate(WITH_A_BAD_RECORD):
        key = None if i == last else f"[{i}]".encode()
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
