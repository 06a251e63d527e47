"""A column added upstream, through a real changefeed, into an Iceberg table that has rows.

TiDB's ``ALTER TABLE orders ADD COLUMN vip tinyint(1)`` as TiCDC's canal-json (hand-built,
as in test_sources.py): the changefeed, under ``schema_change_policy: evolve`` and Avro output
with the session's schema registry, registers a new writer schema version with ``vip`` and
goes on. The applier had made the table from the declared schema and applied the rows before
the change; reading each record by its writer schema, it adds ``vip`` to the table in the
window's commit, the other columns' field ids kept. Read back with pyiceberg at the cuts:
before the change the table as it was, after it every row, ``vip`` null where a row predates
it. The negative control: ``highwater apply --schema-changes stop`` on the same output stops
at the first record with ``vip``, naming the table, the column and the record, with the cut
before it complete and nothing of the change's window committed.

The Spark engine (``highwater apply --engine spark``, into the REST catalog) on a table the
local engine applied up to the change: it adds ``vip`` as well (the field ids kept) and the
table at the last cut holds the same rows; its control, ``--schema-changes stop``, names the
record, the table and the column as the local engine does.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from highwater_consumer import ChangefeedConsumer, Output
from highwater_consumer.iceberg import IcebergApplier, apply, cut, load
from pipeline.config import parse_config
from pipeline.core.sources.canal import tso_time
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from tests.support.canal import canal, tso, watermark
from tests.support.changefeed import run_to_end
from tests.support.iceberg import cli, exactly_once_problems
from tests.support.process import ROOT

pytestmark = pytest.mark.integration

T = 1_700_000_000_000  # ms
NAMESPACE = "shop"
WIDE = {"mysqlType": {"id": "int", "amount": "decimal(30,10)", "note": "text", "vip": "tinyint(1)"}}
DECLARED = {
    "type": "record",
    "name": "orders",
    "fields": [
        {"name": "id", "type": "int"},
        {
            "name": "amount",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 10},
            ],
        },
        {"name": "note", "type": ["null", "string"]},
    ],
}


def insert(ms: int, id_: int, note: str, **vip: Any) -> bytes:
    row = {"id": str(id_), "amount": f"{id_}.5", "note": note, **vip}
    return canal("INSERT", tso(T + ms), [row], **(WIDE if vip else {}))


def at(ms: int) -> Hlc:
    return tso_time(tso(T + ms), "t")


BEFORE = [  # the table as it was: then a marker on both partitions
    (0, insert(1, 1, "one")),
    (1, insert(2, 2, "two")),
    (0, watermark(tso(T + 3))),
    (1, watermark(tso(T + 3))),
]
AFTER = [  # the column added, rows with it (and one the old way), a marker
    (0, canal("ALTER", tso(T + 4), None, isDdl=True, sql="alter table orders add vip …")),
    (1, insert(5, 3, "three", vip="1")),
    (0, insert(6, 4, "four", vip=None)),
    (
        1,
        canal(
            "UPDATE",
            tso(T + 7),
            [{"id": "2", "amount": "2.5", "note": "two again", "vip": "0"}],
            old=[{"note": "two"}],
            **WIDE,
        ),
    ),
    (0, watermark(tso(T + 8))),
    (1, watermark(tso(T + 8))),
]


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, value in records:
        producer.produce(topic, value=value, partition=partition)  # TiCDC sends no key
    assert producer.flush(30) == 0


def applied(
    bootstrap: str,
    changefeed: str,
    warehouse: Path | dict[str, str],
    until: Hlc,
    namespace: str = NAMESPACE,
) -> IcebergApplier:
    """The changefeed's windows up to ``until`` into the embedded catalog in ``warehouse``.

    Or into the catalog of the properties ``warehouse`` gives.
    """
    output = Output.of_changefeed(bootstrap, changefeed)
    properties = warehouse if isinstance(warehouse, dict) else {"warehouse": str(warehouse)}
    applier = IcebergApplier(properties, changefeed, namespace=namespace, schemas=output.schemas)
    after = applier.start(output.topics.values())
    group = f"highwater-apply-{changefeed}-{namespace}"
    with ChangefeedConsumer(output, group, after=after) as consumer:
        apply(consumer, applier, until=until, idle=60)
    return applier


def stop(bootstrap: str, changefeed: str, warehouse: Path, *more: str) -> Any:
    """``highwater apply --schema-changes stop`` into the embedded catalog in ``warehouse``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "highwater_consumer",
            "apply",
            changefeed,
            "--bootstrap-servers",
            bootstrap,
            f"--catalog=warehouse={warehouse}",
            "--namespace",
            NAMESPACE,
            "--schema-changes",
            "stop",
            *more,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def table_at(
    catalog: Any, changefeed: str, resolved: Hlc, namespace: str = NAMESPACE
) -> dict[int, tuple[Any, ...]]:
    rows = cut(catalog, namespace, changefeed, resolved).scan(catalog, "orders").to_arrow()
    return {r["id"]: (r["amount"], r["note"], r.get("vip")) for r in rows.to_pylist()}


BEFORE_CHANGE = {
    1: (Decimal("1.5000000000"), "one", None),
    2: (Decimal("2.5000000000"), "two", None),
}
AFTER_CHANGE = {
    1: (Decimal("1.5000000000"), "one", None),  # from before the column
    2: (Decimal("2.5000000000"), "two again", 0),
    3: (Decimal("3.5000000000"), "three", 1),
    4: (Decimal("4.5000000000"), "four", None),
}


def changefeed_config(bootstrap: str, registry: str, source: str, changefeed: str) -> Any:
    """The canal-json changefeed under ``evolve``, Avro out through the registry."""
    ensure_topics({"bootstrap.servers": bootstrap}, {source: 2})
    return parse_config(
        {
            "changefeed_id": changefeed,
            "kafka": {"bootstrap_servers": bootstrap},
            "sources": [
                {
                    "topic": source,
                    "table": "orders",
                    "format": "canal-json",
                    "table_schema": DECLARED,
                    "primary_key": ["id"],
                }
            ],
            "cursor": "0.0000000000",
            "schema_change_policy": "evolve",
            "sink": {"topic_prefix": f"{changefeed}.", "partitions": 1},
            "encoder": {
                "format": "avro",
                "updated": True,
                "schema_registry": {"url": registry},
            },
            "resolved": {"interval": "0s"},
            "checkpoint": {"min_checkpoint_frequency": "0s"},
            "spark": {"trigger": {"available_now": True}},
        }
    )


def test_a_column_added_upstream_becomes_an_iceberg_column_and_stop_names_it(
    kafka_bootstrap: str, schema_registry_url: str, unique_name: Any, tmp_path: Path, spark: Any
) -> None:
    source, changefeed = unique_name("ticdc"), unique_name("cf")
    config = changefeed_config(kafka_bootstrap, schema_registry_url, source, changefeed)
    warehouse = tmp_path / "lake"
    catalog = load({"warehouse": str(warehouse)})

    # 1. the table as it was, made from the declared schema and applied
    produce(kafka_bootstrap, source, BEFORE)
    run_to_end(config, spark)
    applied(kafka_bootstrap, changefeed, warehouse, at(3))
    other = tmp_path / "stopped"  # the negative control's applier (3.) applies it too
    assert stop(kafka_bootstrap, changefeed, other, "--until", str(at(3))).returncode == 0
    first = cut(catalog, NAMESPACE, changefeed)
    table = catalog.load_table(f"{NAMESPACE}.orders")
    ids = {f.name: f.field_id for f in table.schema().fields}
    assert set(ids) == {"id", "amount", "note"}
    assert table_at(catalog, changefeed, first.resolved) == BEFORE_CHANGE

    # 2. ALTER TABLE … ADD COLUMN vip upstream: the changefeed evolves, the applier follows
    produce(kafka_bootstrap, source, AFTER)
    run_to_end(config, spark)
    applier = applied(kafka_bootstrap, changefeed, warehouse, at(8))
    table = catalog.load_table(f"{NAMESPACE}.orders")
    now = {f.name: f.field_id for f in table.schema().fields}
    assert {k: v for k, v in now.items() if k != "vip"} == ids  # field ids kept
    assert now["vip"] == max(ids.values()) + 1
    assert str(table.schema().find_field("vip").field_type) == "int"  # tinyint(1): Avro int
    last = cut(catalog, NAMESPACE, changefeed)
    assert last.resolved >= at(8)
    assert table_at(catalog, changefeed, last.resolved) == AFTER_CHANGE
    assert table_at(catalog, changefeed, first.resolved)[2][1] == "two"  # the old cut holds
    assert exactly_once_problems(catalog, NAMESPACE, changefeed) == []
    assert applier.schema_changes == "evolve"

    # 3. the negative control: --schema-changes stop on the same output names what it stops at
    stopped = stop(kafka_bootstrap, changefeed, other, "--idle", "30")
    assert stopped.returncode == 1, stopped.stderr[-3000:]
    said = stopped.stderr
    assert f"{changefeed}.orders/0@" in said, said  # the record
    assert f"Iceberg table {NAMESPACE}.orders: column 'vip' (int, from the record's writer " in said
    assert "schema changes stop the applier (schema_changes='stop')" in said
    held = load({"warehouse": str(other)})
    assert cut(held, NAMESPACE, changefeed).resolved == first.resolved  # the cut before it
    assert "vip" not in {f.name for f in held.load_table(f"{NAMESPACE}.orders").schema().fields}


def spark_apply(
    bootstrap: str, changefeed: str, catalog: dict[str, str], namespace: str, *more: str
) -> Any:
    """``highwater apply --engine spark`` in local mode into ``namespace`` of ``catalog``."""
    engine = ["--engine", "spark", "--master", "local[2]", "--idle", "60", *more]
    command = cli(bootstrap, changefeed, catalog, namespace, *engine, entry="pipeline.cli")
    return subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


def test_the_spark_engine_adds_the_column_too_and_stop_names_it(
    kafka_bootstrap: str,
    schema_registry_url: str,
    unique_name: Any,
    iceberg_rest: dict[str, str],
    spark: Any,
) -> None:
    source, changefeed = unique_name("ticdc"), unique_name("cf")
    config = changefeed_config(kafka_bootstrap, schema_registry_url, source, changefeed)
    tag = uuid.uuid4().hex[:6]
    evolving, stopping = f"spark_evolve_{tag}", f"spark_stop_{tag}"
    catalog = load(iceberg_rest)

    # 1. the table as it was, in two namespaces, by the local engine
    produce(kafka_bootstrap, source, BEFORE)
    run_to_end(config, spark)
    for namespace in (evolving, stopping):
        applied(kafka_bootstrap, changefeed, iceberg_rest, at(3), namespace)
    first = cut(catalog, evolving, changefeed)
    ids = {f.name: f.field_id for f in catalog.load_table(f"{evolving}.orders").schema().fields}
    assert set(ids) == {"id", "amount", "note"}

    # 2. the column added upstream; the Spark engine (evolve, the default) adds it
    produce(kafka_bootstrap, source, AFTER)
    run_to_end(config, spark)
    done = spark_apply(kafka_bootstrap, changefeed, iceberg_rest, evolving, "--until", str(at(8)))
    assert done.returncode == 0, done.stderr[-3000:]
    table = catalog.load_table(f"{evolving}.orders")
    now = {f.name: f.field_id for f in table.schema().fields}
    assert {k: v for k, v in now.items() if k != "vip"} == ids  # field ids kept
    assert str(table.schema().find_field("vip").field_type) == "int"
    last = cut(catalog, evolving, changefeed)
    assert last.resolved >= at(8)
    assert table_at(catalog, changefeed, last.resolved, evolving) == AFTER_CHANGE
    assert table_at(catalog, changefeed, first.resolved, evolving) == BEFORE_CHANGE
    assert exactly_once_problems(catalog, evolving, changefeed) == []

    # 3. the control: --schema-changes stop names the record, the table and the column
    stopped = spark_apply(
        kafka_bootstrap, changefeed, iceberg_rest, stopping, "--schema-changes", "stop"
    )
    assert stopped.returncode != 0, stopped.stderr[-3000:]
    said = stopped.stderr
    assert f"{changefeed}.orders/0@" in said, said[-3000:]
    assert f"Iceberg table {stopping}.orders: column 'vip' (int, from the record's writer " in said
    assert "schema changes stop the applier (schema_changes='stop')" in said
    assert cut(catalog, stopping, changefeed).resolved == first.resolved
    assert "vip" not in {f.name for f in catalog.load_table(f"{stopping}.orders").schema().fields}
