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

from confluent_kafka import KafkaError, Producer

from schemas.errors import SinkError
from schemas.hlc import Hlc

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
    ) -> None:
        self.topics = list(topics)
        self._encode = encode
        self._timeout = timeout
        self._config = {
            **client_config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "delivery.timeout.ms": int(timeout * 1000),
        }
        self._live: Producer | None = None

    @property
    def _producer(self) -> Producer:
        if self._live is None:
            self._live = Producer(self._config)
        return self._live

    def partitions(self, topic: str) -> list[int]:
        """The topic's partitions as the broker reports them now (added ones included)."""
        metadata = self._producer.list_topics(topic, timeout=self._timeout).topics[topic]
        if metadata.error is not None:
            raise SinkError(f"output topic {topic!r}: {metadata.error.str()}")
        return sorted(metadata.partitions)

    def emit(self, ts: Hlc) -> int:
        """Send ``ts`` to every partition and wait for the acknowledgements; return the count."""
        failures: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                failures.append(err)

        sent = 0
        for topic in self.topics:
            value = self._encode(ts, topic)
            for partition in self.partitions(topic):
                self._producer.produce(
                    topic, value=value, key=None, partition=partition, on_delivery=delivered
                )
                sent += 1
        remaining = self._producer.flush(self._timeout)
        if failures or remaining:
            reason = failures[0].str() if failures else "no acknowledgement in time"
            raise SinkError(f"resolved marker {ts} not acknowledged: {reason}")
        log.info("resolved %s sent to %d partitions", ts, sent)
        return sent

    def close(self) -> None:
        """Flush what is pending and release the producer (a later emit makes a new one)."""
        if self._live is not None:
            self._live.flush(self._timeout)
            self._live = None
