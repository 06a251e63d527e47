"""`key_column` with `unordered` on the real broker and Spark, exactly once.

The generated orders (updates and deletes, with their before images) keyed by their
``customer_id``: every record's key is ``[customer_id]`` of its new version (a delete: of its
old one), on the partition Kafka's default partitioner picks for that key, each change once
(``key_in_value`` still the primary key); markers on every partition; the consumer library
reads the windows, and an applier refuses the output (it upserts by the records' keys). Both
ways a batch is written: the JVM walk (the envelope of the source's own members) and the
Python loop (``key_in_value`` is the loop's alone).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from highwater_consumer import ChangefeedConsumer, Output
from highwater_consumer.decoding import ConsumerError
from pipeline.dev.generator import GeneratorSpec, write
from schemas.hlc import Hlc
from sinks.partitioning import default_partition
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.kafka import consume_all
from tests.support.walk import counted_walks


@pytest.mark.parametrize("key_in_value", [False, True], ids=["walk", "python_loop"])
def test_records_are_keyed_and_partitioned_by_the_key_column(
    kafka_bootstrap: str, unique_name: Any, spark: Any, monkeypatch: Any, key_in_value: bool
) -> None:
    source = unique_name("src")
    write(
        GeneratorSpec(topic=source, rows=300, partitions=2, resolved_every=100, seed=61),
        {"bootstrap.servers": kafka_bootstrap},
    )
    changes = {
        (json.dumps(json.loads(m.key)), json.loads(m.value)["updated"])
        for m in consume_all(kafka_bootstrap, source)
        if m.key is not None
    }
    name = unique_name("keyed")
    encoder = {
        "updated": True,
        "diff": True,
        "key_in_value": key_in_value,
        "key_column": "customer_id",
        "unordered": True,
    }
    config = changefeed_config(kafka_bootstrap, name, [(source, "orders")], encoder=encoder)
    walks = counted_walks(monkeypatch)
    run_to_end(config, spark)
    assert bool(walks) is not key_in_value, walks

    records = consume_all(kafka_bootstrap, config.output_topic(config.sources[0]))
    rows = [m for m in records if m.key is not None]
    assert {m.partition for m in records if m.key is None} == {0, 1, 2}, "markers everywhere"
    assert len(rows) == len(changes)  # each change once (exactly once, the default)
    deletes = 0
    for m in rows:
        value = json.loads(m.value or b"")
        image = value["after"] if value["after"] is not None else value["before"]
        deletes += value["after"] is None
        assert json.loads(m.key or b"") == [image["customer_id"]]
        assert m.partition == default_partition(m.key or b"", 3)
        primary = [image["region"], image["order_id"]]
        assert (json.dumps(primary), value["updated"]) in changes
        if key_in_value:
            assert value["key"] == primary
    assert deletes, "deletes keyed by their before image"

    output = Output.of_changefeed(kafka_bootstrap, name)
    assert output.key_column == "customer_id"
    with ChangefeedConsumer(output, unique_name("reader")) as consumer:
        until = max(
            Hlc.parse(json.loads(m.value or b"")["resolved"]) for m in records if m.key is None
        )
        read = sum(len(w.rows) for w in consumer.windows(until=until, idle=30))
    assert read == len(rows)
    with pytest.raises(ConsumerError, match="key_column"):
        output.keyed_by_rows()  # what highwater apply checks first
