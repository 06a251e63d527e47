"""The acknowledged producer's errors are ours, whatever the client refuses."""

import pytest
from confluent_kafka import KafkaError, KafkaException

from schemas.errors import FencedError, SinkError
from sinks.producer import AcknowledgedProducer, Record

pytestmark = pytest.mark.unit


def test_a_record_the_client_refuses_is_a_sink_error_naming_the_write() -> None:
    # no broker needed: the client refuses a record above message.max.bytes before sending
    producer = AcknowledgedProducer(
        {"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": 1000}, timeout=1
    )
    with pytest.raises(SinkError, match=r"writing 'k' to 't' failed: .*too large"):
        producer.send([Record("t", b"x" * 5000, b"k")], "writing 'k' to 't'")


class _Transactional:
    """A stand-in for the client: each transactional call raises what it is given."""

    def __init__(self, commit: KafkaError | None, abort: KafkaError | None) -> None:
        self.commit, self.abort = commit, abort
        self.produced: list[bytes | None] = []

    def begin_transaction(self) -> None:
        pass

    def produce(self, _topic: str, value: bytes | None, **_kw: object) -> None:
        self.produced.append(value)

    def commit_transaction(self, _timeout: float) -> None:
        if self.commit is not None:
            raise KafkaException(self.commit)

    def abort_transaction(self, _timeout: float) -> None:
        if self.abort is not None:
            raise KafkaException(self.abort)

    def flush(self, _timeout: float) -> int:
        if self.abort is not None and self.abort.fatal():
            raise KafkaException(self.abort)
        return 0


def _with(client: _Transactional) -> AcknowledgedProducer:
    producer = AcknowledgedProducer({}, timeout=1, transactional_id="hw-cf")
    producer._live = client  # type: ignore[assignment]
    return producer


def test_a_commit_cut_short_by_a_takeover_is_a_fence_even_when_the_broker_says_unknown() -> None:
    # seen in CI: EndTxn failed with "Unknown broker error" and only the abort said "fenced"
    fenced = KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True)
    producer = _with(_Transactional(commit=KafkaError(KafkaError.UNKNOWN), abort=fenced))
    with pytest.raises(FencedError, match=r"sending marker: another instance .* 'hw-cf'"):
        producer.send([Record("t", b"m", partition=0)], "sending marker")
    with pytest.raises(FencedError):  # and stays so: it never opens another producer
        producer.send([Record("t", b"m", partition=0)], "sending marker")
    producer.close()  # the fence is the error to report, closing does not raise another


def test_a_failed_commit_that_aborts_cleanly_is_a_sink_error_and_the_next_send_goes() -> None:
    client = _Transactional(commit=KafkaError(KafkaError.REQUEST_TIMED_OUT), abort=None)
    producer = _with(client)
    with pytest.raises(SinkError, match="writing checkpoint failed: ") as raised:
        producer.send([Record("t", b"1")], "writing checkpoint")
    assert not isinstance(raised.value, FencedError)
    client.commit = None
    producer.send([Record("t", b"2")], "writing checkpoint")
    assert client.produced == [b"1", b"2"]
