"""A column added upstream never vanishes: the Avro changefeed stops at it, and goes on once told.

The table's schema is declared as it was at the start (``table_schema``). Midway, a source
partition starts carrying a column ``vip`` the schema lacks (an ``ALTER TABLE … ADD COLUMN``
upstream). The changefeed writes everything before that row, checkpoints just before it, and
pauses there, naming the table, the column, the record and its commit time; the other
partition goes on to its end. The new schema in the config (``vip`` an optional field: a new
registry version the registry takes as backward compatible; a changefeed the server runs takes
it by ``highwater changefeed update``) and ``resume``, and the next run writes the rest,
``vip`` included, as confluent-kafka's AvroDeserializer reads it through the registry: every
source change once, nothing lost.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from pipeline.cli import main as highwater
from pipeline.config import load_config
from pipeline.control.changefeeds import Changefeeds
from pipeline.control.context import OperatorContext
from sinks.admin import ensure_topics
from tests.integration.test_avro import ORDERS, consume_avro
from tests.support.changefeed import run_to_end
from tests.support.process import write_config

pytestmark = pytest.mark.integration

WITH_VIP = {
    **ORDERS,
    "fields": [*ORDERS["fields"], {"name": "vip", "type": ["null", "boolean"], "default": None}],
}


def change(order_id: int, ts: int, **more: Any) -> tuple[bytes, bytes]:
    after = {"region": "eu", "order_id": order_id, "amount": order_id * 1.5, **more}
    value = {"after": after, "before": None, "updated": f"{ts}.0000000000"}
    return json.dumps(["eu", order_id]).encode(), json.dumps(value).encode()


def marker(ts: int) -> tuple[None, bytes]:
    return None, json.dumps({"resolved": f"{ts}.0000000000"}).encode()


def avro_config(
    folder: Path,
    where: tuple[str, str],
    changefeed_id: str,
    source: str,
    schema: dict[str, Any],
    *,
    initial_scan: str = "no",
) -> Path:
    """The changefeed of ``source`` to registry Avro (``where``: broker, registry URL)."""
    bootstrap, registry_url = where
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [
            {
                "topic": source,
                "table": "orders",
                "table_schema": schema,
                "primary_key": ["region", "order_id"],
            }
        ],
        "initial_scan": initial_scan,
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 1},
        "encoder": {"format": "avro", "schema_registry": {"url": registry_url}, "updated": True},
        "spark": {"trigger": {"available_now": True}},
        "safepoints": {"enabled": False},
    }
    name = "vip" if schema is WITH_VIP else "start"
    return write_config(folder / f"{name}.yaml", raw)


def test_a_column_added_upstream_pauses_the_avro_changefeed_and_resuming_on_a_new_schema_goes_on(
    kafka_bootstrap: str, schema_registry_url: str, unique_name: Any, tmp_path: Path, spark: Any
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 2})
    partitions = {
        0: [
            *(change(1, 10), change(2, 20), marker(25)),
            *(change(3, 30, vip=True), marker(35), change(4, 40, vip=False)),
            *(change(1, 45), marker(50)),
        ],
        1: [change(11, 12), marker(25), change(12, 33), marker(50)],
    }

    def config(schema: dict[str, Any]) -> Path:
        where = (kafka_bootstrap, schema_registry_url)
        return avro_config(tmp_path, where, changefeed_id, source, schema)

    first = config(ORDERS)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition in partitions:
        producer.produce(source, value=marker(5)[1], partition=partition)
    assert producer.flush(30) == 0
    run_to_end(load_config(first), spark)  # created before the changes: it starts at 5
    for partition, records in partitions.items():
        for key, value in records:
            producer.produce(source, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0
    run_to_end(load_config(first), spark)
    feeds = Changefeeds(OperatorContext({"bootstrap.servers": kafka_bootstrap}))
    found = feeds.get(changefeed_id)
    assert found.spec is not None
    assert found.status is not None
    assert (found.spec.desired, found.status.state) == ("paused", "paused")
    error = found.status.error or ""
    assert f"schema change at {source}/0@4 (commit time 30.0000000000)" in error, error
    assert "table 'orders' changed shape: column(s) vip not in its output schema" in error
    output = f"{changefeed_id}.orders"
    before = [m for m in consume_avro(kafka_bootstrap, output, schema_registry_url) if m.key()]
    got = sorted((m.key()["order_id"], m.value()["updated"]) for m in before)
    # partition 0 up to the change; partition 1 to its end
    assert got == [
        (1, "10.0000000000"),
        (2, "20.0000000000"),
        (11, "12.0000000000"),
        (12, "33.0000000000"),
    ]

    registry = SchemaRegistryClient({"url": schema_registry_url})
    versions = len(registry.get_versions(f"{output}-value"))
    second = config(WITH_VIP)
    # a changefeed of `highwater run`: its config file changes (the server's: changefeed update)
    assert highwater(["changefeed", "resume", changefeed_id, "--config", str(second)]) == 0
    run_to_end(load_config(second), spark)
    rows = [m for m in consume_avro(kafka_bootstrap, output, schema_registry_url) if m.key()]
    seen = sorted(
        (m.key()["order_id"], m.value()["updated"], m.value()["after"].get("vip")) for m in rows
    )
    assert seen == [
        (1, "10.0000000000", None),
        (1, "45.0000000000", None),
        (2, "20.0000000000", None),
        (3, "30.0000000000", True),
        (4, "40.0000000000", False),
        (11, "12.0000000000", None),
        (12, "33.0000000000", None),
    ]  # each change once: nothing lost, nothing written twice
    # the registry took the new row record as a new version of the value subject
    latest = registry.get_latest_version(f"{output}-value").schema.schema_str
    assert '"vip"' in latest
    assert len(registry.get_versions(f"{output}-value")) == versions + 1


def test_a_column_added_before_the_initial_scan_pauses_it_and_the_chunk_runs_again_whole(
    kafka_bootstrap: str, schema_registry_url: str, unique_name: Any, tmp_path: Path, spark: Any
) -> None:
    """The scan meets the new column: its chunk writes nothing, and runs again whole once resumed.

    Exactly once, the chunk's transaction is aborted, not committed short of the row; resumed
    with the new schema, each key comes once, ``vip`` included.
    """
    source, changefeed_id = unique_name("src"), unique_name("cf")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 1})
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    records = [change(1, 10), change(2, 20), change(3, 30, vip=True), change(4, 40, vip=False)]
    for key, value in [*records, marker(50)]:
        producer.produce(source, key=key, value=value, partition=0)
    assert producer.flush(30) == 0

    def config(schema: dict[str, Any]) -> Path:
        where = (kafka_bootstrap, schema_registry_url)
        return avro_config(tmp_path, where, changefeed_id, source, schema, initial_scan="yes")

    run_to_end(load_config(config(ORDERS)), spark)
    found = Changefeeds(OperatorContext({"bootstrap.servers": kafka_bootstrap})).get(changefeed_id)
    assert found.status is not None
    assert found.status.state == "paused"
    error = found.status.error or ""
    assert f"schema change at {source}/0@" in error, error  # a row with vip
    assert "column(s) vip not in its output schema" in error, error
    output = f"{changefeed_id}.orders"
    assert [m for m in consume_avro(kafka_bootstrap, output, schema_registry_url) if m.key()] == []

    second = config(WITH_VIP)
    assert highwater(["changefeed", "resume", changefeed_id, "--config", str(second)]) == 0
    run_to_end(load_config(second), spark)
    rows = [m for m in consume_avro(kafka_bootstrap, output, schema_registry_url) if m.key()]
    seen = sorted((m.key()["order_id"], m.value()["after"].get("vip")) for m in rows)
    assert seen == [(1, None), (2, None), (3, True), (4, False)]  # the snapshot, each key once


def test_the_source_s_newest_schema_is_its_newest_change_s_not_its_widest(
    kafka_bootstrap: str, unique_name: Any
) -> None:
    """At start, the source's schema is that of its newest change, by commit time.

    Debezium keys rows to partitions, so each partition's last change can predate the table's
    last ALTER. Partition 0 ends with the newest change (a column dropped since the other's:
    fewer columns); partition 1 with an older one of more columns, written to Kafka later.
    Counting columns took the older one (CI's failure of
    ``test_an_initial_scan_follows_the_schema_change_policy[evolve]``: ``vip`` undeclared).
    """
    from pipeline.config import parse_config  # noqa: PLC0415
    from pipeline.core.evolution.start import newest_shape  # noqa: PLC0415
    from pipeline.core.sources.debezium import DebeziumAdapter  # noqa: PLC0415
    from tests.support.debezium_json import column  # noqa: PLC0415
    from tests.unit.test_evolution import debezium  # noqa: PLC0415

    source = unique_name("dbz-newest")
    client = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(client, {source: 2})
    memo, tier = (column("memo", "string"), "m"), (column("tier", "int32"), 5)
    vip = (column("vip", "boolean"), True)
    newer, older = debezium(2, vip), debezium(1, memo, tier)  # ts_us: base + id
    producer = Producer(client)
    producer.produce(source, value=newer[1], key=newer[0], partition=0)
    producer.flush()
    producer.produce(source, value=older[1], key=older[0], partition=1)
    producer.flush()
    cfg = parse_config(
        {
            "changefeed_id": unique_name("cf"),
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "sources": [{"topic": source, "table": "t", "format": "debezium"}],
            "initial_scan": "no",
        },
        env={},
    )
    shape = newest_shape(cfg, cfg.sources[0], client)
    assert shape is not None
    assert list(shape.columns) == ["id", "note", "vip"]
    # the control: the older change is the wider, so a rule by width would take it
    widths = [len(DebeziumAdapter().shape(*r).columns) for r in (newer, older)]  # type: ignore[union-attr]
    assert widths == [3, 4]
