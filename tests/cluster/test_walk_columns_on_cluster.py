"""``key_column`` and ``headers_json_column_name`` through the JVM walk on a Spark cluster.

``make cluster-test`` runs it. A source written compact (so every change is the walk's), read
by ``highwater run`` on the standalone master with an executor on each worker, exactly once:
read back by a read_committed confluent-kafka consumer, every change once, keyed by its
``customer``, its ``meta`` object's members its headers (then the fixed ``extra_headers``) and
gone from its value; markers on every partition; the runs' log shows no record left to the
Python loop, no aborted transaction and no lost task. In JSON, and in Avro through the
registry (read back by confluent-kafka's ``AvroDeserializer``); in Avro also with the driver
SIGKILLed after a batch's commits, before its checkpoint: the next run writes each change once
and churns no transaction, while at least once (the negative control) the same kill leaves
that batch's rows twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from pipeline.dev.cluster import KafkaCluster
from pipeline.dev.spark_cluster import SparkCluster
from sinks.admin import ensure_topics
from tests.cluster.runs import assert_no_churn, on_workers, run_after_kill
from tests.cluster.test_replicated import pytestmark  # noqa: F401 - make cluster-test's
from tests.integration.test_exactly_once import produce
from tests.support.kafka import consume_all

T0 = 1_700_000_000_000_000_000
PARTITIONS = 6
ORDERS = 3_000
SCHEMA = {  # Avro out: the declared table (meta's type is moot: it leaves the row record)
    "type": "record",
    "name": "orders",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": ["null", "long"], "default": None},
        {"name": "meta", "type": ["null", "string"], "default": None},
    ],
}


def changes() -> list[tuple[int, bytes, bytes, dict[str, object]]]:
    """(partition, key, value, image) of each change: an order, then every tenth deleted."""
    out = []
    for n in range(ORDERS):
        order = n if n % 10 else n - 1  # every tenth change deletes the order before it
        image = {"order_id": order, "customer": order % 40, "meta": {"trace": f"t{order}"}}
        delete = n % 10 == 0 and n > 0
        value = {"after": None if delete else image, "before": image if delete else None}
        value["updated"] = f"{T0 + n + 1}.0000000000"
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        out.append((order % PARTITIONS, json.dumps([order]).encode(), text, image))
    return out


KILLED = "after_write:2"  # the driver, after the second batch's commits, before its checkpoint


@pytest.mark.parametrize(
    ("output", "delivery", "kill"),
    [
        ("json", "exactly_once", None),
        ("avro", "exactly_once", None),
        ("avro", "exactly_once", KILLED),
        ("avro", "at_least_once", KILLED),  # the negative control: the kill duplicates
    ],
    ids=["json", "avro", "avro-killed", "avro-killed-at-least-once"],
)
def test_key_column_and_headers_through_the_walk_on_the_cluster_exactly_once(  # noqa: PLR0917
    cluster: KafkaCluster,
    workers: SparkCluster,
    tmp_path: Path,
    schema_registry_url: str,
    output: str,
    delivery: str,
    kill: str | None,
) -> None:
    workers.start()
    bootstrap = cluster.start().bootstrap_servers
    name = f"cols-{output}-{delivery.replace('_', '-')}{'-killed' if kill else ''}"
    source = f"{name}.src"
    ensure_topics({"bootstrap.servers": bootstrap}, {source: PARTITIONS})
    written = changes()
    marker = json.dumps({"resolved": f"{T0 + ORDERS + 1}.0000000000"}).encode()
    produce(
        bootstrap,
        source,
        [(p, key, value) for p, key, value, _ in written]
        + [(p, None, marker) for p in range(PARTITIONS)],
    )
    table: dict[str, Any] = {"topic": source, "table": "orders"}
    encoding: dict[str, Any] = {}
    if output == "avro":
        table |= {"table_schema": SCHEMA, "primary_key": ["order_id"]}
        encoding = {"format": "avro", "schema_registry": {"url": schema_registry_url}}
    raw = {
        "changefeed_id": name,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [table],
        "cursor": "0.0000000000",
        "delivery": delivery,
        "sink": {"topic_prefix": f"{name}.", "extra_headers": {"zone": "eu"}},
        "encoder": {
            "updated": True,
            "diff": True,
            "key_column": "customer",
            "unordered": True,
            "headers_json_column_name": "meta",
            **encoding,
        },
        "spark": on_workers(workers),
    }

    def apps(worker: int) -> set[Path]:
        return set((workers.directory / f"spark-worker-{worker}" / "work").glob("app-*"))

    before = {i: apps(i) for i in (1, 2)}
    text = run_after_kill(tmp_path, raw, kill)  # the log of the run after any kill
    assert [i for i in (1, 2) if apps(i) - before[i]] == [1, 2], "an executor on each worker"

    topic = f"{name}.orders"
    records = consume_all(bootstrap, topic)  # read_committed
    rows = [m for m in records if m.key is not None]
    assert {m.partition for m in records if m.key is None} >= {0, 1, 2}, "markers everywhere"
    if delivery == "at_least_once":  # the kill's batch written again: the check below fails
        assert len(rows) > ORDERS, "the kill left no duplicate: the control shows nothing"
        return
    assert len(rows) == ORDERS, "every change once"
    read = reader(topic, schema_registry_url if output == "avro" else None)
    seen = set()
    for m in rows:
        key, value = read(m.key, MessageField.KEY), read(m.value, MessageField.VALUE)
        image = value["after"] or value["before"]
        assert "meta" not in image
        assert m.headers == (("trace", f"t{image['order_id']}".encode()), ("zone", b"eu"))
        assert key == ([image["customer"]] if output == "json" else {"customer": image["customer"]})
        seen.add((value["updated"], image["order_id"], value["after"] is None))
    assert len(seen) == ORDERS
    assert "the JVM walk left" not in text  # every change the walk's (WalkWriter's log line)
    assert_no_churn(text, batches=3 if kill else 5)  # a restart resumes at its batch


def reader(topic: str, registry: str | None) -> Any:
    """How a user reads a record's key or value: JSON, or Avro through the registry."""
    if registry is None:
        return lambda data, _field: json.loads(data or b"")
    deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry}))
    return lambda data, field: deserializer(data, SerializationContext(topic, field))
