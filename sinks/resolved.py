"""The resolved-timestamp broadcaster: one marker to every partition of every output topic.

A marker R promises consumers that no row at or below R that they have not seen will follow on
that partition. The caller keeps the promise by emitting only after the rows are acknowledged
and the checkpoint covering R is durable; this class makes sure every partition gets the
marker, with a null key, and waits for the broker's acknowledgement.

Delivery guarantee: at-least-once; a marker sent twice is harmless (markers never go back).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from schemas.errors import SinkError
from schemas.hlc import Hlc

from .producer import AcknowledgedProducer, Record

log = logging.getLogger(__name__)


class ResolvedBroadcaster:
    """Sends resolved markers to all partitions of the output topics."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        topics: Sequence[str],
        encode: Callable[[Hlc, str], bytes],
        *,
        timeout: float = 60.0,
        producer: AcknowledgedProducer | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.topics = list(topics)
        # every marker's headers (``sink.extra_headers``, as the rows carry them)
        self._headers = [(k, v.encode()) for k, v in (headers or {}).items()] or None
        self._encode = encode
        self._timeout = timeout
        self._owned = producer is None  # a shared producer is its owner's to close
        if producer is None:
            producer = AcknowledgedProducer(client_config, timeout=timeout, linger_ms=5)
        self._producer = producer
        self._producer.connect()

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions as the broker reports them now (added ones included)."""
        metadata = self._producer.producer.list_topics(topic, timeout=self._timeout).topics[topic]
        if metadata.error is not None:
            raise SinkError(f"output topic {topic!r}: {metadata.error.str()}")
        return sorted(metadata.partitions)

    def emit(self, ts: Hlc) -> int:
        """Send ``ts`` to every partition and wait for the acknowledgements; return the count."""
        records: list[Record] = []
        for topic in self.topics:
            value = self._encode(ts, topic)
            records.extend(
                Record(topic, value, partition=p, headers=self._headers)
                for p in self.partitions(topic)
            )
        self._producer.send(records, f"sending resolved marker {ts}")
        log.info("resolved %s sent to %d partitions", ts, len(records))
        return len(records)

    def close(self) -> None:
        """Flush what is pending and release the producer (a later emit makes a new one)."""
        if self._owned:
            self._producer.close()
