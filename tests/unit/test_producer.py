"""The acknowledged producer's errors are ours, whatever the client refuses."""

import pytest

from schemas.errors import SinkError
from sinks.producer import AcknowledgedProducer, Record

pytestmark = pytest.mark.unit


def test_a_record_the_client_refuses_is_a_sink_error_naming_the_write() -> None:
    # no broker needed: the client refuses a record above message.max.bytes before sending
    producer = AcknowledgedProducer(
        {"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": 1000}, timeout=1
    )
    with pytest.raises(SinkError, match=r"writing 'k' to 't' failed: .*too large"):
        producer.send([Record("t", b"x" * 5000, b"k")], "writing 'k' to 't'")
