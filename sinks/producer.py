"""A producer whose writes are known to be acknowledged, for records Highwater relies on.

Checkpoints and resolved markers are promises: a checkpoint must be durable before a marker
goes out, and a marker must reach every partition. Both use this one wrapper: idempotent,
``acks=all``, and :meth:`AcknowledgedProducer.send` returns only once every record it was
given is acknowledged by the broker, or raises a :class:`SinkError`.

**One writer.** With a ``transactional_id`` (one per changefeed and cluster), each
:meth:`~AcknowledgedProducer.send` is a Kafka transaction, and opening the producer
(:meth:`~AcknowledgedProducer.connect`) fences every earlier producer of the same id: the
broker bumps the id's epoch and refuses the older one's next write, which then raises
:class:`FencedError`. A changefeed writes its checkpoints, markers, safepoint and status
through such producers, so of two instances only the one started last can write them;
readers of those records read committed records only.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from schemas.errors import FencedError, SinkError

_FENCED = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


class Record(NamedTuple):
    """One record to send."""

    topic: str
    value: bytes | None
    key: bytes | None = None
    partition: int | None = None
    headers: Sequence[tuple[str, bytes]] | None = None


class AcknowledgedProducer:
    """An idempotent ``acks=all`` producer with an all-or-error :meth:`send`."""

    def __init__(
        self,
        client_config: Mapping[str, Any],
        *,
        timeout: float,
        linger_ms: int = 0,
        transactional_id: str | None = None,
    ) -> None:
        self._timeout = timeout
        self._config = {
            **client_config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": linger_ms,
            "delivery.timeout.ms": int(timeout * 1000),
        }
        self.transactional_id = transactional_id
        if transactional_id is not None:
            self._config["transactional.id"] = transactional_id
            self._config["transaction.timeout.ms"] = int(timeout * 1000) + 10_000
        self._live: Producer | None = None
        self._failures: list[KafkaError] = []
        self._lock = threading.Lock()  # one send (one transaction) at a time
        # A transactional producer is opened once: opening another would fence the instance
        # that fenced this one. After a fatal error or a fence it only says so.
        self._broken: SinkError | None = None

    @property
    def producer(self) -> Producer:
        """The underlying producer, created (and, transactional, fencing) on first use."""
        if self._broken is not None:
            raise self._broken
        if self._live is None:
            live = Producer(self._config)
            if self.transactional_id is not None:
                self._transact(lambda: live.init_transactions(self._timeout), "taking over")
            self._live = live
        return self._live

    def connect(self) -> None:
        """Create the producer now: a transactional one fences its predecessors here.

        Its handshake (a producer id from the broker, ~0.5 s) then overlaps with start-up
        instead of delaying the first write.
        """
        _ = self.producer

    def _delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._failures.append(err)

    def send(self, records: Sequence[Record], what: str) -> None:
        """Write ``records`` (one transaction if transactional); return once all are acked.

        Raises :class:`FencedError` if another instance took this producer's id over,
        :class:`SinkError` naming ``what`` for any other failure (nothing was committed).
        """
        with self._lock:
            producer = self.producer
            transactional = self.transactional_id is not None
            if transactional:
                self._transact(producer.begin_transaction, what)
            try:
                self._produce(producer, records, what)
                if transactional:
                    self._transact(lambda: producer.commit_transaction(self._timeout), what)
                remaining = producer.flush(self._timeout + 5)
            except SinkError:
                self._failures = []
                if transactional:
                    self._abort(producer, what)  # raises FencedError if that is the cause
                raise
            failures, self._failures = self._failures, []
            if failures or remaining:
                if any(f.code() in _FENCED for f in failures):
                    raise self._fence(what)
                reason = failures[0].str() if failures else "no acknowledgement in time"
                raise SinkError(f"{what} failed: {reason}")

    def _produce(self, producer: Producer, records: Sequence[Record], what: str) -> None:
        """Queue ``records``; what the client refuses at once (too large, full) is our error."""
        try:
            for r in records:
                extra: dict[str, Any] = {}
                if r.partition is not None:
                    extra["partition"] = r.partition
                if r.headers:
                    extra["headers"] = list(r.headers)
                producer.produce(
                    r.topic, value=r.value, key=r.key, on_delivery=self._delivered, **extra
                )
        except KafkaException as exc:
            raise SinkError(f"{what} failed: {exc.args[0].str()}") from None
        except BufferError as exc:
            raise SinkError(f"{what} failed: {exc}") from None

    def _transact(self, call: Any, what: str) -> None:
        """A transactional call; its failure as our error."""
        try:
            call()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in _FENCED:
                raise self._fence(what) from None
            failed = SinkError(f"{what} failed: {error.str()}")
            if error.fatal():
                self._broken = failed
            raise failed from None

    def _abort(self, producer: Producer, what: str) -> None:
        """Abort the open transaction after a failure.

        A fence does not always come back as one: a commit cut short by the new instance's
        takeover can fail with a generic broker error, and only the abort then says the id
        was fenced. So the abort is tried even after a fatal error, and a fence it reports
        is raised as the cause.
        """
        if isinstance(self._broken, FencedError):
            return  # nothing to abort with: the broker aborts what a fenced producer left
        try:
            producer.abort_transaction(self._timeout)
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.code() in _FENCED:
                raise self._fence(what) from None
            if self._broken is None:
                self._broken = SinkError(f"aborting a transaction failed: {error.str()}")

    def _fence(self, what: str) -> FencedError:
        self._broken = FencedError(
            f"{what}: another instance of this changefeed took over its writes "
            f"(transactional id {self.transactional_id!r} fenced); this one stops"
        )
        return self._broken

    def close(self) -> None:
        """Flush and release the producer.

        A later send makes a new one, unless it is transactional: then a later send is an
        error, as opening another would fence whoever holds the id now. Closing a producer
        already broken (fenced, or a fatal error raised before) does not raise again: that
        error is the one to report.
        """
        live, self._live = self._live, None
        if live is None:
            return
        broken = self._broken
        if self.transactional_id is not None and broken is None:
            self._broken = SinkError(f"producer {self.transactional_id!r} is closed")
        try:
            live.flush(self._timeout)
        except (KafkaException, SystemError) as exc:
            # confluent-kafka can surface a fatal error met in a delivery callback during the
            # flush as a SystemError caused by it: the KafkaException is its cause
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__
            if not isinstance(cause, KafkaException):
                raise
            if cause.args[0].code() in _FENCED and broken is None:
                raise self._fence("closing the producer") from None
            if broken is None:
                raise SinkError(f"closing the producer failed: {cause.args[0].str()}") from None
