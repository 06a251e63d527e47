"""`key_column` and `headers_json_column_name` in Avro on the real broker, Spark and registry.

Exactly once, read back by confluent-kafka's ``AvroDeserializer``: each record's key is the
record of its ``customer_id`` (a delete's from its old version; null where the row holds
null), on the partition Kafka's default partitioner picks for those bytes, the value's
``key`` still the primary key's; each record's headers are its ``meta`` object's members,
and ``meta`` is in neither version; a ``meta`` that is no object is a dead letter; markers on
every partition. The JVM walk writes the rows up to the first whose ``meta`` holds its JSON
text, the Python loop the rest (``Avro.java`` against the loop, as users see it).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from sinks.admin import ensure_topics
from sinks.partitioning import default_partition
from tests.integration.test_avro import consume_avro
from tests.integration.test_exactly_once import produce
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.kafka import consume_all
from tests.support.walk import counted_walks, walked_rests

T0 = 1_700_000_000_000_000_000
SCHEMA = {
    "type": "record",
    "name": "orders",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer_id", "type": ["null", "long"], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "meta", "type": ["null", "string"], "default": None},  # the headers' column
    ],
}
ROWS: list[tuple[int, int | None, Any, bool]] = [  # order, customer, meta, a delete
    (1, 10, {"trace": "ü ✓ \u2028", "n": -0.0, "big": 12345678901234567890, "x": None}, False),
    (2, 20, None, False),
    (3, None, {"deep": {"a": [1, {"b": None}]}}, False),  # keyed by null
    (1, 10, {"trace": "gone"}, True),  # a delete: keyed and headed by its old version
    (4, 40, '{"trace": "as text"}', False),  # its JSON text: the Python loop's from here
    (5, 50, [1, 2], False),  # no object: a dead letter
    (6, 60, {"t": "last"}, False),
]


def change(t: int, order_id: int, customer: int | None, meta: Any, delete: bool) -> bytes:
    image = {"order_id": order_id, "customer_id": customer, "note": f"n{order_id} ü", "meta": meta}
    value = {"after": None if delete else image, "before": image if delete else None}
    value["updated"] = f"{T0 + t}.0000000000"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def test_avro_records_are_keyed_by_one_column_and_headed_by_another(  # noqa: PLR0917
    kafka_bootstrap: str,
    schema_registry_url: str,
    unique_name: Any,
    spark: Any,
    monkeypatch: Any,
    caplog: Any,
) -> None:
    source = unique_name("src")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 2})
    records = [
        (0, json.dumps([o]).encode(), change(t, o, c, meta, delete))
        for t, (o, c, meta, delete) in enumerate(ROWS, start=1)
    ]
    marker = json.dumps({"resolved": f"{T0 + 9}.0000000000"}).encode()
    produce(kafka_bootstrap, source, [*records, *((p, None, marker) for p in (0, 1))])
    name = unique_name("avrocols")
    table = {"topic": source, "table": "orders", "table_schema": SCHEMA}
    config = changefeed_config(
        kafka_bootstrap,
        name,
        [table | {"primary_key": ["order_id"]}],
        encoder={
            "format": "avro",
            "schema_registry": {"url": schema_registry_url},
            "updated": True,
            "diff": True,
            "key_in_value": True,
            "key_column": "customer_id",
            "unordered": True,
            "headers_json_column_name": "meta",
        },
        on_error="dlq",
    )
    walks, rests = counted_walks(monkeypatch), walked_rests(monkeypatch)
    caplog.set_level(logging.INFO, logger="pipeline.core.batch.writer")
    run_to_end(config, spark)
    assert walks, "the JVM walk wrote the batch"
    assert [(r.partition.partition, r.start) for r in rests] == [(0, 4)]
    assert "the JVM walk left 4 record(s) to the Python loop, from " in caplog.text

    topic = config.output_topic(config.sources[0])
    raw = consume_all(kafka_bootstrap, topic)
    assert {m.partition for m in raw if m.key is None} == {0, 1, 2}, "markers everywhere"
    assert all(m.partition == default_partition(m.key, 3) for m in raw if m.key is not None)
    messages = [m for m in consume_avro(kafka_bootstrap, topic, schema_registry_url) if m.key()]
    assert len(messages) == 6  # each change once, but the dead letter's
    by_order = {}
    for m in messages:
        value = m.value()
        image = value["after"] or value["before"]
        assert "meta" not in image
        assert m.key() == {"customer_id": image["customer_id"]}
        assert value["key"] == {"order_id": image["order_id"]}
        by_order.setdefault(image["order_id"], []).append((m.headers() or [], value))
    assert sorted(by_order) == [1, 2, 3, 4, 6]
    (created, _), (deleted, gone) = by_order[1]
    assert created == [
        ("trace", "ü ✓ \u2028".encode()),
        ("n", b"-0.0"),
        ("big", b"12345678901234567890"),
    ]
    assert (deleted, gone["after"], gone["before"]["note"]) == ([("trace", b"gone")], None, "n1 ü")
    assert by_order[2][0][0] == []
    assert by_order[3][0][0] == [("deep", b'{"a":[1,{"b":null}]}')]
    assert by_order[4][0][0] == [("trace", b"as text")]
    assert by_order[6][0][0] == [("t", b"last")]
    (dead,) = consume_all(kafka_bootstrap, config.effective_dlq_topic)
    assert json.loads(dead.key or b"") == [5]
    assert b"not a JSON object" in dict(dead.headers)["highwater.error"]
