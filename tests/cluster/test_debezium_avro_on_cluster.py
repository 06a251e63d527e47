"""Debezium's Avro events (Confluent's wire format) through the JVM walk on a Spark cluster.

``make cluster-test`` runs it. ``AvroConverter``'s events of the bench's table (decimals,
timestamps, JSON text, non-ASCII notes; ``pipeline/dev/debezium_feed.py``), their schemas in
the registry, read by ``highwater run`` on the standalone master with an executor on each
worker, written as JSON with before and updated, exactly once, the driver SIGKILLed after a
batch's commits and before its checkpoint, then run to the end. Read back by a read_committed
confluent-kafka consumer: each change once (its images' plain columns as the source wrote
them), every change the walk's, no aborted transaction and no lost task after the restart. At
least once (the negative control) the same kill leaves that batch's rows twice.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pipeline.dev.cluster import KafkaCluster
from pipeline.dev.debezium_feed import DebeziumAvroFeed, DebeziumFeed, write_feed
from pipeline.dev.spark_cluster import SparkCluster
from tests.cluster.runs import assert_no_churn, on_workers, run_after_kill
from tests.cluster.test_replicated import pytestmark  # noqa: F401 - make cluster-test's
from tests.cluster.test_walk_columns_on_cluster import KILLED
from tests.support.kafka import consume_all

CHANGES = 3_000
PLAIN = ("region", "order_id", "customer", "note", "status", "items", "vip")


def plain(image: dict[str, Any] | None) -> tuple[Any, ...] | None:
    """An image's columns that read back as the source wrote them (not decimals or times)."""
    return None if image is None else tuple(image[c] for c in PLAIN)


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_debezium_avro_through_the_walk_on_the_cluster_with_the_driver_killed(
    cluster: KafkaCluster,
    workers: SparkCluster,
    tmp_path: Path,
    schema_registry_url: str,
    delivery: str,
) -> None:
    workers.start()
    bootstrap = cluster.start().bootstrap_servers
    name = f"dbz-avro-{delivery.replace('_', '-')}"
    source = f"{name}.src"
    feed = DebeziumAvroFeed(schema_registry_url, partitions=6, keys=500)
    write_feed(feed, source, CHANGES, {"bootstrap.servers": bootstrap})
    raw = {
        "changefeed_id": name,
        "kafka": {"bootstrap_servers": bootstrap},
        # no transaction topic: the rows alone, no marker promised (as the bench reads them)
        "sources": [
            {
                "topic": source,
                "table": "orders",
                "format": "debezium",
                "schema_registry": {"url": schema_registry_url},
            }
        ],
        "cursor": "0.0000000000",
        "delivery": delivery,
        "sink": {"topic_prefix": f"{name}."},
        "encoder": {"updated": True, "diff": True},
        "spark": on_workers(workers),
    }
    text = run_after_kill(tmp_path, raw, KILLED)  # the log of the run after the kill

    rows = [m for m in consume_all(bootstrap, f"{name}.orders") if m.key is not None]
    if delivery == "at_least_once":  # the kill's batch written again: the checks below fail
        assert len(rows) > CHANGES, "the kill left no duplicate: the control shows nothing"
        return
    written = DebeziumFeed(feed.table, feed.partitions, feed.keys, feed.seed).changes(CHANGES)
    expected = Counter((plain(p["after"]), plain(p["before"])) for _, p in written)
    values = [json.loads(m.value) for m in rows]
    assert len(rows) == CHANGES, "every change once"
    assert Counter((plain(v["after"]), plain(v["before"])) for v in values) == expected
    assert len({(m.key, v["updated"]) for m, v in zip(rows, values, strict=True)}) == CHANGES
    assert "the JVM walk left" not in text  # every change the walk's (WalkWriter's log line)
    assert_no_churn(text, batches=3)  # the restart resumes at the killed batch
