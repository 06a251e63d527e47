"""The Spark engine's parts that need no Spark session: the catalog, the rows, the statement.

``apply --engine spark`` end to end (a real broker, changefeed, REST catalog and Spark) is
tests/integration/test_consumer_apply_iceberg_spark.py.
"""

from __future__ import annotations

import datetime
import io
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BooleanType,
    DecimalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from highwater_consumer.cli import main as consumer_main
from highwater_consumer.decoding import ApplyError, AvroDecoder
from highwater_consumer.iceberg import UnwritableRecord, iceberg_schema
from highwater_consumer.output import Output
from pipeline.cli import main as highwater
from pipeline.iceberg.engine import catalog_down, column_seen
from pipeline.iceberg.merge import merge_sql
from pipeline.iceberg.ranges import Marker, frontier
from pipeline.iceberg.rows import (
    DELETED,
    OFFSET,
    TIME,
    ColumnSeen,
    Converter,
    MarkerReader,
    row_schema,
)
from pipeline.iceberg.session import SparkTarget
from pipeline.runtime import jars
from schemas.errors import JarsError, RecordRef
from schemas.hlc import Hlc
from schemas.tables import TableSchema

SCHEMA = TableSchema.of(
    {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "amount",
                "type": [
                    "null",
                    {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
                ],
            },
            {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
            {"name": "note", "type": ["null", "string"]},
            {"name": "paid", "type": ["null", "boolean"]},
        ],
    },
    ["id"],
)
SPARK_TABLE = StructType(
    [
        StructField("id", LongType(), nullable=False),
        StructField("amount", DecimalType(10, 2)),
        StructField("at", TimestampType()),
        StructField("note", StringType()),
        StructField("paid", BooleanType()),
    ]
)


def records(*rows: tuple[bytes | None, bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(
        [
            {"key": k, "value": v, "topic": "out", "partition": 1, "offset": 40 + n}
            for n, (k, v) in enumerate(rows)
        ]
    )


JSON_OUTPUT = Output("127.0.0.1:9", {"out": "orders"})  # never reached: JSON needs no lookup


def converter() -> Converter:
    schema = iceberg_schema(SCHEMA).model_dump_json()
    return Converter("orders", schema, ("id",), row_schema(SPARK_TABLE).json(), JSON_OUTPUT)


def confluent(schema_id: int, schema: dict[str, Any], datum: dict[str, Any]) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), datum)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


ROW = {
    "type": "record",
    "name": "row",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "amount",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            ],
        },
        {"name": "note", "type": ["null", "string"]},
    ],
}
ENVELOPE = {
    "type": "record",
    "name": "envelope",
    "fields": [
        {"name": "after", "type": ["null", ROW]},
        {"name": "before", "type": ["null", "row"]},
        {"name": "updated", "type": "string"},
    ],
}
KEY = {"type": "record", "name": "key", "fields": [{"name": "id", "type": "long"}]}
RESOLVED = {
    "type": "record",
    "name": "resolved",
    "fields": [{"name": "resolved", "type": "string"}],
}
AVRO_SCHEMAS = {1: ENVELOPE, 2: KEY, 3: RESOLVED}


def avro_reader() -> AvroDecoder:
    return AvroDecoder(lambda header: AVRO_SCHEMAS.get(struct.unpack(">I", header[1:5])[0]))


def test_avro_records_become_rows_and_avro_markers_are_markers() -> None:
    """Avro output (Confluent's wire format): the key record, decimals, a delete, a marker."""
    after = {"id": 7, "amount": Decimal("12.50"), "note": "é"}
    batch = records(
        (
            confluent(2, KEY, {"id": 7}),
            confluent(1, ENVELOPE, {"after": after, "before": None, "updated": "5.0000000003"}),
        ),
        (
            confluent(2, KEY, {"id": 8}),
            confluent(1, ENVELOPE, {"after": None, "before": None, "updated": "6.0000000000"}),
        ),
    )
    made = converter()
    made._reader = avro_reader()  # what output.decoder() makes on an executor, registry aside
    rows = next(iter(made([batch]))).to_pylist()
    assert [(r["id"], r["amount"], r["note"], r[DELETED]) for r in rows] == [
        (7, Decimal("12.50"), "é", False),
        (8, None, None, True),
    ]
    assert rows[0][TIME] == Decimal(Hlc(5, 3).packed())
    marker = MarkerReader(JSON_OUTPUT)
    marker._reader = avro_reader()
    keyless = pa.RecordBatch.from_pylist(
        [
            {
                "value": confluent(3, RESOLVED, {"resolved": "6.0000000007"}),
                "topic": "out",
                "partition": 2,
                "offset": 9,
            }
        ]
    )
    [found] = next(iter(marker([keyless]))).to_pylist()
    assert found == {
        "topic": "out",
        "partition": 2,
        "offset": 9,
        "packed": Decimal(Hlc(6, 7).packed()),
        "text": "6.0000000007",
    }


def test_a_keyless_record_that_is_no_marker_is_named() -> None:
    """The marker job's reader: a JSON marker is read; a keyless row change stops the step."""

    def keyless(value: bytes) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist(
            [{"value": value, "topic": "out", "partition": 0, "offset": 3}]
        )

    [found] = next(
        iter(MarkerReader(JSON_OUTPUT)([keyless(b'{"resolved":"4.0000000000"}')]))
    ).to_pylist()
    assert (found["packed"], found["text"]) == (Decimal(Hlc(4).packed()), "4.0000000000")
    with pytest.raises(ApplyError, match=r"out/0@3: .*a row change without a key"):
        list(MarkerReader(JSON_OUTPUT)([keyless(b'{"after": null, "updated": "4.0000000000"}')]))
    with pytest.raises(ApplyError, match=r"out/0@3: a record without a key: "):
        list(MarkerReader(JSON_OUTPUT)([keyless(b"not json")]))


def test_records_become_rows_exactly_and_markers_are_left_out() -> None:
    value = (
        b'{"after": {"id": 7, "amount": 12.50, "at": "2024-02-29T23:59:59.123456+05:30", '
        b'"note": {"a": [1E+2, "\xc3\xa9"]}, "paid": true}, "updated": "5.0000000003"}'
    )
    batch = records(
        (b"[7]", value),
        (None, b'{"resolved": "6.0000000000"}'),
        (b"[8]", b'{"after": null, "updated": "6.0000000000"}'),
    )
    [out] = list(converter()([batch]))
    rows = out.to_pylist()
    assert [r["id"] for r in rows] == [7, 8]
    assert rows[0]["amount"] == Decimal("12.50")
    assert rows[0]["at"] == datetime.datetime(2024, 2, 29, 18, 29, 59, 123456, datetime.UTC)
    assert rows[0]["note"] == '{"a":[1E+2,"é"]}'  # the JSON text, the number as written
    assert rows[0][TIME] == Decimal(Hlc(5, 3).packed())
    assert rows[0][OFFSET] == 40
    assert [r[DELETED] for r in rows] == [False, True]
    assert rows[1]["amount"] is None
    assert out.schema == pa.RecordBatch.from_pylist(rows, schema=out.schema).schema


def test_a_value_its_column_cannot_hold_names_the_record_and_is_never_rounded() -> None:
    value = b'{"after": {"id": 7, "amount": 12.505}, "updated": "5.0000000000"}'
    with pytest.raises(UnwritableRecord) as caught:
        list(
            converter()([records((b"[1]", b'{"after": null, "updated": "1.0"}'), (b"[7]", value))])
        )
    assert str(caught.value).startswith("out/1@41: cannot be written to Iceberg table orders")
    assert "'amount'" in str(caught.value)
    assert "without rounding" in str(caught.value)


def test_a_column_the_table_lacks_names_its_record_for_the_driver() -> None:
    """The converter's signal of a schema change, read by the driver from a worker's error.

    A Python worker's error reaches the driver as text; another error is not taken for it.
    """
    value = b'{"after": {"id": 7, "vip": 1}, "updated": "5.0000000000"}'
    with pytest.raises(ColumnSeen) as caught:
        list(converter()([records((b"[7]", value))]))
    assert caught.value.record == RecordRef("out", 1, 40)
    module = type(caught.value).__module__
    worker = f"PythonException: Traceback …\n{module}.ColumnSeen: {caught.value}\n"
    assert column_seen(RuntimeError(worker)) == RecordRef("out", 1, 40)
    assert column_seen(RuntimeError("UnwritableRecord: out/0@40: cannot be written")) is None


def test_a_record_that_is_no_row_change_is_named() -> None:
    with pytest.raises(ApplyError, match=r"out/1@40: .*updated"):
        list(converter()([records((b"[7]", b'{"after": {"id": 7}}'))]))


def test_the_merge_removes_deletes_replaces_and_inserts_by_the_key() -> None:
    sql = merge_sql("target.`shop`.`orders`", ["region", "id", "note"], ["region", "id"])
    assert sql == (
        "MERGE INTO target.`shop`.`orders` t USING highwater_window s "
        "ON t.`region` = s.`region` AND t.`id` = s.`id` "
        "WHEN MATCHED AND s._hw_deleted THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET t.`note` = s.`note` "
        "WHEN NOT MATCHED AND NOT s._hw_deleted THEN INSERT (`region`, `id`, `note`) "
        "VALUES (s.`region`, s.`id`, s.`note`)"
    )


def test_the_frontier_is_the_lowest_latest_marker_once_every_partition_has_one() -> None:
    parts = [("a", 0), ("a", 1)]
    high, low = (
        Marker(Hlc(9, 0).packed(), "9.0000000000", 5),
        Marker(Hlc(3, 2).packed(), "3.0000000002", 8),
    )
    assert frontier({parts[0]: high}, parts) is None
    assert frontier({parts[0]: high, parts[1]: low}, parts) == low


def test_spark_reaches_a_rest_catalog_and_refuses_the_embedded_one() -> None:
    target = SparkTarget.of({"type": "rest", "uri": "http://h:1", "token": "t"}, "local[2]")
    conf = target.conf()
    assert conf["spark.sql.catalog.target"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.target.uri"] == "http://h:1"
    assert conf["spark.sql.catalog.target.token"] == "t"
    assert "spark.pyspark.python" not in conf  # local mode: the driver's interpreter
    for embedded in ({"warehouse": "/tmp/w"}, {"type": "sql", "uri": "sqlite:///x.db"}):
        with pytest.raises(ApplyError, match="--catalog type=rest"):
            SparkTarget.of(embedded, "local[2]")
    cluster = SparkTarget.of({"type": "rest", "uri": "http://h:1"}, "spark://h:7077").conf()
    assert (
        cluster["spark.pyspark.python"].endswith("python")
        or "python" in cluster["spark.pyspark.python"]
    )


def test_the_engine_is_chosen_by_the_highwater_command_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["apply", "cf", "--topic", "t=orders", "--catalog", "warehouse=w", "--engine", "spark"]
    assert consumer_main(args) == 1  # the consumer library has no Spark engine
    assert "the spark engine is Highwater's own `highwater apply`" in capsys.readouterr().err
    assert highwater([*args[:4], "--dsn", "postgresql://x", "--engine", "spark"]) != 0
    assert "--engine is Iceberg's" in capsys.readouterr().err
    rest = ["--catalog", "type=rest", "--catalog", "uri=http://127.0.0.1:1"]
    local_only = ["--on-error", "dlq", "--spill", "10"]
    assert highwater([*args[:4], *rest, "--engine", "spark", *local_only]) != 0  # before Spark
    assert "--on-error dlq, --spill: the local engine's" in capsys.readouterr().err


def test_the_iceberg_runtime_says_how_to_fetch_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIGHWATER_JARS_DIR", str(tmp_path))
    with pytest.raises(JarsError, match="highwater fetch-jars --iceberg"):
        jars.iceberg_spark_jars()
    artifact = jars.iceberg_spark_set().artifact
    assert artifact == "org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:1.10.0:jar"
    assert json.dumps(artifact)  # one artifact: the shaded jar carries its dependencies


def test_the_executors_of_the_spark_engine_get_the_consumer_library_a_changefeeds_do_not(
    tmp_path: Path,
) -> None:
    import zipfile  # noqa: PLC0415

    from pipeline.runtime.submit import package_zip  # noqa: PLC0415

    with zipfile.ZipFile(package_zip(tmp_path / "apply", consumer=True)) as archive:
        tops = {n.split("/")[0] for n in archive.namelist()}
    assert "highwater_consumer/iceberg/columns.py" in archive.namelist()
    with zipfile.ZipFile(package_zip(tmp_path / "run")) as archive:
        assert "highwater_consumer" not in {n.split("/")[0] for n in archive.namelist()}
    assert tops == {"pipeline", "encoders", "sinks", "schemas", "highwater_consumer"}


class _Captured(Exception):
    """What PySpark raises for a failed Java call (its module is PySpark's)."""


_Captured.__module__ = "pyspark.errors.exceptions.captured"


@pytest.mark.parametrize(
    ("raised", "down"),
    [
        (ConnectionRefusedError(111, "Connection refused"), True),  # pyiceberg, on the driver
        (_Captured("org.apache.iceberg.exceptions.RESTException: ... ConnectException"), True),
        (_Captured("ServiceUnavailableException: 503"), True),
        (_Captured("CommitStateUnknownException: the commit's outcome is unknown"), True),
        (ApplyError("orders: 3 commits of window 5.0000000000 failed"), False),
        (_Captured("CommitFailedException: the table changed (another writer)"), False),
        (ValueError("Connection refused"), False),  # not Spark's nor an OSError
    ],
)
def test_a_catalog_that_does_not_answer_is_told_from_other_failures(
    raised: Exception, down: bool
) -> None:
    """What the Spark engine waits out (back-off) and what stops it, through the cause chain."""
    assert catalog_down(raised) is down
    wrapped = ApplyError("orders: 3 commits of window 5.0000000000 failed")
    wrapped.__cause__ = raised
    assert catalog_down(wrapped) is down
