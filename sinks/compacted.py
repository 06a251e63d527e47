"""A compacted Kafka topic used as a small key-value store.

Checkpoints, and later safepoints, job status and schemas, live in compacted topics: the latest
record per key is the value, a null value (tombstone) deletes it. Writes wait for the broker's
acknowledgement (``acks=all``, idempotent producer), so a value returned from :meth:`put` is
durable; a changefeed's own records go through its fencing producer
(``sinks/producer.py``). Reads take committed records only, up to the end as of the call.

Delivery guarantee: :meth:`put` is at-least-once per call; replaying a put is a no-op for
readers because only the latest value per key counts.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from schemas.errors import SinkError

from .admin import Replication, ensure_topics
from .producer import AcknowledgedProducer, Record

log = logging.getLogger(__name__)

COMPACTED = {"cleanup.policy": "compact", "min.compaction.lag.ms": "0", "segment.ms": "3600000"}
RECORD_OVERHEAD = 64 * 1024  # room for a key and the record's framing beside a value
# a partition whose leader is not ready yet (just created, or moving)
_NOT_READY = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}


class CompactedTopic:
    """Latest-value-per-key over one compacted topic.

    ``max_value_bytes``: the largest value it must hold; the producer's message size limit
    and, for a topic it creates, the topic's are raised to fit it with its key. ``producer``:
    write through this one (shared, owned by the caller) instead of one of its own.
    """

    def __init__(
        self,
        client_config: Mapping[str, Any],
        topic: str,
        *,
        timeout: float = 30.0,
        max_value_bytes: int | None = None,
        producer: AcknowledgedProducer | None = None,
    ) -> None:
        self.topic = topic
        self._config = dict(client_config)
        self._timeout = timeout
        self._limit = None if max_value_bytes is None else max_value_bytes + RECORD_OVERHEAD
        self._owned = producer is None
        if producer is None:
            producer = AcknowledgedProducer(
                {**self._config, **producer_limit(max_value_bytes)}, timeout=timeout
            )
        self._producer = producer

    def ensure(self, replication_factor: Replication = "auto") -> None:
        """Create the topic (one partition, compacted) if it is missing."""
        settings = dict(COMPACTED)
        if self._limit is not None:
            settings["max.message.bytes"] = str(max(self._limit, 1_048_588))
        ensure_topics(
            self._config,
            {self.topic: 1},
            replication_factor=replication_factor,
            topic_config=settings,
        )
        self._producer.connect()

    def put(self, key: str, value: bytes | None) -> None:
        """Write ``value`` for ``key`` (None deletes) and wait until the broker acknowledged it."""
        self._producer.send(
            [Record(self.topic, value, key.encode())], f"writing {key!r} to {self.topic!r}"
        )

    def get(self, key: str) -> bytes | None:
        """The latest value of ``key``, or None when absent or deleted."""
        return self.read_all().get(key)

    def read_all(self) -> dict[str, bytes]:
        """The latest value of every live key."""
        consumer = Consumer(
            {
                **self._config,
                "group.id": f"highwater-reader-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,  # the end: committed records end before a
                # transaction's control record, so an offset never says it; and the fetch that
                # finds it waits at most this long for more (librdkafka's default, 500 ms, was
                # most of a run's set-up: checkpoint, jobs, the claim's two reads)
                "fetch.wait.max.ms": 10,
            }
        )
        try:
            metadata = consumer.list_topics(self.topic, timeout=self._timeout).topics.get(
                self.topic
            )
            if metadata is None or metadata.error is not None:
                return {}
            ends: dict[int, int] = {}
            for p in metadata.partitions:
                low, high = self._watermarks(consumer, p)
                if high > low:
                    ends[p] = high
            latest: dict[str, bytes | None] = {}
            consumer.assign([TopicPartition(self.topic, p, 0) for p in ends])
            while ends:
                msg = consumer.poll(self._timeout)
                if msg is None:
                    raise SinkError(f"reading {self.topic!r} timed out")
                error, key = msg.error(), msg.key()
                partition = int(msg.partition() or 0)
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    ends.pop(partition, None)
                    continue
                if error is not None:
                    raise SinkError(f"reading {self.topic!r} failed: {error.str()}")
                if key is not None:  # a key that is not UTF-8 is shown, not fatal
                    latest[key.decode(errors="backslashreplace")] = msg.value()
            return {k: v for k, v in latest.items() if v is not None}
        finally:
            consumer.close()

    def _watermarks(self, consumer: Consumer, partition: int) -> tuple[int, int]:
        """A partition's offsets; a partition just created may not have its leader ready yet."""
        deadline = time.monotonic() + self._timeout
        while True:
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=self._timeout
                )
                return int(low), int(high)
            except KafkaException as exc:
                if exc.args[0].code() not in _NOT_READY or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        """Flush and release the producer (a shared one is its owner's to close)."""
        if self._owned:
            self._producer.close()


def producer_limit(max_value_bytes: int | None) -> dict[str, Any]:
    """Producer settings that let a value of ``max_value_bytes`` (and its key) through."""
    if max_value_bytes is None:
        return {}
    return {"message.max.bytes": max(max_value_bytes + RECORD_OVERHEAD, 1_000_000)}
