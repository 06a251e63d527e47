"""The consumer library's constructors touch nothing: the network is reached by open/start.

Each object is made against an address where nothing listens: making it (and closing it
unopened) must be instant and silent. (The consumer's ``open`` against a broker:
tests/integration/test_consumer*.py, each ``with`` block.)
"""

from __future__ import annotations

import time

import psycopg
import pytest

from highwater_consumer import ChangefeedConsumer, Output
from highwater_consumer.postgres import ApplyError, PostgresApplier

NOWHERE = "127.0.0.1:9"  # the discard port: refused at once on loopback


def test_a_consumer_is_made_and_closed_without_reaching_the_broker() -> None:
    # Avro by a schema topic: its decoder reads the topic, which must wait for open() too
    output = Output(NOWHERE, {"t": "orders"}, format="avro", schema_topic="schemas")
    started = time.monotonic()
    consumer = ChangefeedConsumer(output, "group")
    consumer.close()  # never opened: nothing to close
    assert time.monotonic() - started < 0.5
    assert consumer.after is None  # the committed R is read when it opens


def test_an_applier_is_made_and_closed_without_connecting() -> None:
    dsn = "host=127.0.0.1 port=9 dbname=app connect_timeout=2"
    started = time.monotonic()
    applier = PostgresApplier(dsn, "orders-feed")
    applier.close()  # never started: nothing to close
    assert time.monotonic() - started < 0.5
    with pytest.raises(ApplyError, match="not started"):
        applier.connection  # noqa: B018 - the property refuses
    with pytest.raises(psycopg.OperationalError):
        applier.start()  # connecting is start's
