"""A producer whose writes are known to be acknowledged, for records Highwater relies on.

Checkpoints and resolved markers are promises: a checkpoint must be durable before a marker
goes out, and a marker must reach every partition. Both use this one wrapper: idempotent,
``acks=all``, and :meth:`AcknowledgedProducer.wait` raises a :class:`SinkError` unless every
record since the last wait was acknowledged by the broker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Producer

from schemas.errors import SinkError


class AcknowledgedProducer:
    """An idempotent ``acks=all`` producer with an all-or-error ``wait``."""

    def __init__(
        self, client_config: Mapping[str, Any], *, timeout: float, linger_ms: int = 0
    ) -> None:
        self._timeout = timeout
        self._config = {
            **client_config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "delivery.timeout.ms": int(timeout * 1000),
        }
        self._live: Producer | None = None
        self._failures: list[KafkaError] = []

    @property
    def producer(self) -> Producer:
        """The underlying producer, created on first use."""
        if self._live is None:
            self._live = Producer(self._config)
        return self._live

    def connect(self) -> None:
        """Create the producer now.

        Its idempotence handshake (a producer id from the broker, ~0.5 s) then overlaps with
        start-up instead of delaying the first write.
        """
        _ = self.producer

    def _delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._failures.append(err)

    def produce(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue one record."""
        if partition is None:
            self.producer.produce(topic, value=value, key=key, on_delivery=self._delivered)
        else:
            self.producer.produce(
                topic, value=value, key=key, partition=partition, on_delivery=self._delivered
            )

    def wait(self, what: str) -> None:
        """Wait for every queued record; raise SinkError naming ``what`` if any was not acked."""
        remaining = self.producer.flush(self._timeout + 5)
        failures, self._failures = self._failures, []
        if failures or remaining:
            reason = failures[0].str() if failures else "no acknowledgement in time"
            raise SinkError(f"{what} failed: {reason}")

    def close(self) -> None:
        """Flush and release the producer (a later produce makes a new one)."""
        if self._live is not None:
            self._live.flush(self._timeout)
            self._live = None
