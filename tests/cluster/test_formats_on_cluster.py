"""Protobuf output and the enriched envelope on a Spark cluster, exactly once, the driver killed.

``make cluster-test`` runs it. Both are written by the Python loop on the executors (the JVM
walk writes neither), through the same transactions as every output: ``highwater run`` on the
standalone master with an executor on each worker, the driver SIGKILLed after a batch's
commits and before its checkpoint, then run to the end. Read back by a read_committed
confluent-kafka consumer: protobuf through the registry with ``ProtobufDeserializer``, enriched
JSON by its source block; each change once (its source record named once, its commit time
once), markers on every partition, no aborted transaction and no lost task after the restart.
At least once (the negative control) the same kill leaves the batch's rows twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from pipeline.dev.cluster import KafkaCluster
from pipeline.dev.spark_cluster import SparkCluster
from schemas import highwater_changefeed_pb2 as pb
from schemas.protobuf import columns
from sinks.admin import ensure_topics
from tests.cluster.runs import assert_no_churn, on_workers, run_after_kill
from tests.cluster.test_replicated import pytestmark  # noqa: F401 - make cluster-test's
from tests.cluster.test_walk_columns_on_cluster import (
    KILLED,
    ORDERS,
    PARTITIONS,
    SCHEMA,
    T0,
    changes,
)
from tests.integration.test_exactly_once import produce
from tests.support.kafka import Message, consume_all


def read_protobuf(topic: str, rows: list[Message]) -> set[tuple[str, int, bool]]:
    """(commit time, order, deleted) of each row, read as a user reads protobuf."""
    conf = {"use.deprecated.format": False}
    value_of = ProtobufDeserializer(pb.Message, conf)
    key_of = ProtobufDeserializer(pb.Key, conf)
    seen = set()
    for m in rows:
        value = value_of(m.value, SerializationContext(topic, MessageField.VALUE)).wrapped
        key = columns(key_of(m.key, SerializationContext(topic, MessageField.KEY)).key)
        image = value.after if value.HasField("after") else value.before
        assert columns(image.values)["order_id"] == key["order_id"]
        seen.add((value.updated, key["order_id"], not value.HasField("after")))
    return seen


def read_enriched(rows: list[Message], source: str) -> set[tuple[str, int, bool]]:
    """(commit time, order, deleted) of each row; each source record named once."""
    places = []
    seen = set()
    for m in rows:
        value = json.loads(m.value or b"")
        block = value["source"]
        assert block["source_topic"] == source
        places.append((block["source_partition"], block["source_offset"]))
        key = json.loads(m.key or b"")
        assert value["op"] in {"c", "u", "d"}
        seen.add((block["ts_hlc"], key["order_id"], value["op"] == "d"))
    assert len(places) == len(set(places)), "a source record written twice"
    return seen


@pytest.mark.parametrize(
    ("output", "delivery"),
    [
        ("protobuf", "exactly_once"),
        ("enriched", "exactly_once"),
        ("protobuf", "at_least_once"),  # the negative control: the kill duplicates
    ],
    ids=["protobuf", "enriched", "protobuf-at-least-once"],
)
def test_protobuf_and_enriched_on_the_cluster_with_the_driver_killed(  # noqa: PLR0917
    cluster: KafkaCluster,
    workers: SparkCluster,
    tmp_path: Path,
    schema_registry_url: str,
    output: str,
    delivery: str,
) -> None:
    workers.start()
    bootstrap = cluster.start().bootstrap_servers
    name = f"fmt-{output}-{delivery.replace('_', '-')}"
    source = f"{name}.src"
    ensure_topics({"bootstrap.servers": bootstrap}, {source: PARTITIONS})
    marker = json.dumps({"resolved": f"{T0 + ORDERS + 1}.0000000000"}).encode()
    produce(
        bootstrap,
        source,
        [(p, key, value) for p, key, value, _ in changes()]
        + [(p, None, marker) for p in range(PARTITIONS)],
    )
    encoding: dict[str, Any] = (
        {"format": "protobuf", "schema_registry": {"url": schema_registry_url}}
        if output == "protobuf"
        else {"envelope": "enriched", "enriched_properties": ["source"]}
    )
    raw = {
        "changefeed_id": name,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [
            {
                "topic": source,
                "table": "orders",
                "table_schema": SCHEMA,
                "primary_key": ["order_id"],
            }
        ],
        "cursor": "0.0000000000",
        "delivery": delivery,
        "sink": {"topic_prefix": f"{name}."},
        "encoder": {"updated": True, "diff": True, **encoding},
        "spark": on_workers(workers),
    }
    text = run_after_kill(tmp_path, raw, KILLED)  # the log of the run after the kill

    topic = f"{name}.orders"
    records = consume_all(bootstrap, topic)  # read_committed
    rows = [m for m in records if m.key is not None]
    assert {m.partition for m in records if m.key is None} >= {0, 1, 2}, "markers everywhere"
    if delivery == "at_least_once":
        assert len(rows) > ORDERS, "the kill left no duplicate: the control shows nothing"
        return
    assert len(rows) == ORDERS, "every change once"
    seen = read_protobuf(topic, rows) if output == "protobuf" else read_enriched(rows, source)
    assert len(seen) == ORDERS
    assert {t for t, _, _ in seen} == {f"{T0 + n + 1}.0000000000" for n in range(ORDERS)}
    assert_no_churn(text, batches=3)
