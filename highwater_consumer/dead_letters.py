"""Output records an applier cannot write, sent to a dead-letter topic instead of stopping it.

An applier (``highwater apply --on-error dlq``) that meets a record its target cannot hold (a
value its column cannot take) sends the record **as it came** (key and value bytes) to the
changefeed's dead-letter topic (the job status names it: ``dlq_topic``, by default
``_highwater_dlq_<changefeed id>``), with the headers the changefeed's own dead letters carry:
``highwater.error`` (the reason: the table, the column, why) and ``highwater.source`` (the
output record's ``topic/partition@offset``). Nothing is skipped silently: the dead letters
are acknowledged by Kafka (:meth:`DeadLetters.flush`) before the window they were taken out
of is committed to the target, so a crash in between sends them again (at least once: a dead
letter can appear twice, a record is never lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from .decoding import ConsumerError

ERROR_HEADER = "highwater.error"  # as the changefeed's dead letters
SOURCE_HEADER = "highwater.source"


class DeadLetters:
    """A dead-letter topic an applier sends the records it cannot write to."""

    def __init__(self, bootstrap: str, topic: str, kafka: Mapping[str, Any] | None = None) -> None:
        self.topic = topic
        self.settings = {"bootstrap.servers": bootstrap, **dict(kafka or {})}
        self._producer: Producer | None = None
        self.sent = 0  # dead letters sent (and acknowledged once flushed)
        self._failed: list[str] = []

    def send(self, record: str, key: bytes | None, value: bytes | None, reason: str) -> None:
        """Send a record (``record``: its ``topic/partition@offset``) with why it is here."""
        if self._producer is None:
            self._producer = self._open()
        headers: list[tuple[str, str | bytes | None]] = [
            (ERROR_HEADER, reason.encode()),
            (SOURCE_HEADER, record.encode()),
        ]
        self._producer.produce(
            self.topic, key=key, value=value, headers=headers, on_delivery=self._delivered
        )
        self.sent += 1

    def flush(self, timeout: float = 60.0) -> None:
        """Wait until Kafka acknowledged every dead letter sent; raise if one was refused."""
        if self._producer is None:
            return
        left = self._producer.flush(timeout)
        if left or self._failed:
            why = self._failed[0] if self._failed else f"{left} not acknowledged in {timeout} s"
            raise ConsumerError(f"dead letters to {self.topic!r} were not written: {why}")

    def _delivered(self, err: Any, _message: Any) -> None:
        if err is not None:
            self._failed.append(str(err))

    def _open(self) -> Producer:
        """The producer, the topic made first when missing (as the changefeed makes it)."""
        admin = AdminClient(self.settings)
        if self.topic not in admin.list_topics(timeout=30).topics:
            future = admin.create_topics([NewTopic(self.topic, 1)])[self.topic]
            try:
                future.result(30)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise ConsumerError(f"dead-letter topic {self.topic!r}: {exc}") from exc
        return Producer({**self.settings, "enable.idempotence": True})

    def close(self) -> None:
        """Flush what is left and let the producer go."""
        if self._producer is not None:
            self._producer.flush(30)
            self._producer = None
