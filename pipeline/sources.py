"""Source adapters: raw Kafka records to Highwater's internal row shape, as Spark columns.

Every adapter produces the same columns, so everything after decoding is format-blind:

=============  ===============================================================
``kind``       ``row``, ``marker`` or ``bad``
``table``      the table the source topic carries
``key``        the record key as it came (bytes; a JSON array for ``native``)
``after``      the row's columns as JSON text, null for a delete
``before``     the previous version as JSON text, when the source sends it
``op``         ``insert``, ``update``, ``delete`` (``upsert`` without ``before``)
``ts``         the change's HLC time as ``struct<wall: bigint, logical: bigint>``
``ts_text``    the same, as sent
``resolved``   a marker's HLC time (struct), null for rows
``error``      why a ``bad`` record could not be decoded
``src_topic``, ``src_partition``, ``src_offset``, ``value``, ``headers``: where it came
from, and the raw value and headers for the dead-letter topic
=============  ===============================================================

All of it is Spark SQL expressions evaluated on the executors; no Python runs per record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

HLC_PATTERN = r"^([0-9]{1,19})(\.([0-9]{1,10}))?$"
_NATIVE_SCHEMA = "after STRING, before STRING, updated STRING, resolved STRING, _corrupt STRING"
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}


def hlc_struct(text: Column) -> Column:
    """Parse an HLC string column into ``struct<wall, logical>`` (null if it is not one)."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    valid = text.rlike(HLC_PATTERN)
    wall = F.regexp_extract(text, HLC_PATTERN, 1).cast("bigint")
    logical = F.coalesce(
        F.nullif(F.regexp_extract(text, HLC_PATTERN, 3), F.lit("")).cast("bigint"), F.lit(0)
    ).cast("bigint")
    return F.when(valid, F.struct(wall.alias("wall"), logical.alias("logical")))


def hlc_text(ts: Column) -> Column:
    """Format a ``struct<wall, logical>`` back to the wire form ``<wall>.<10 digits>``."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    return F.concat(
        ts["wall"].cast("string"), F.lit("."), F.lpad(ts["logical"].cast("string"), 10, "0")
    )


def _object_or_null(text: Column) -> Column:
    return text.isNull() | text.startswith("{")


def decode_native(raw: DataFrame, tables: Mapping[str, str]) -> DataFrame:
    """Decode CockroachDB-style wrapped JSON records (format ``native``).

    ``tables`` maps each source topic to its table name.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    text = F.col("value").cast("string")
    parsed = F.from_json(text, _NATIVE_SCHEMA, _JSON_OPTIONS)
    key_text = F.col("key").cast("string")
    key_array = F.from_json(key_text, "array<string>")
    ts = hlc_struct(F.col("_p.updated"))
    resolved = hlc_struct(F.col("_p.resolved"))

    table = F.lit(None).cast("string")
    for topic, name in tables.items():
        table = F.when(F.col("topic") == topic, F.lit(name)).otherwise(table)

    error = (
        F.when(F.col("value").isNull(), F.lit("null value"))
        .when(
            F.col("_p").isNull() | F.col("_p._corrupt").isNotNull(),
            F.lit("value is not a JSON object"),
        )
        .when(
            F.col("key").isNull(),
            F.when(F.col("_p.resolved").isNull(), F.lit("null key but no 'resolved' field")).when(
                resolved.isNull(), F.lit("'resolved' is not an HLC timestamp")
            ),
        )
        .when(key_array.isNull(), F.lit("key is not a JSON array"))
        .when(F.col("_p.updated").isNull(), F.lit("no 'updated' field"))
        .when(ts.isNull(), F.lit("'updated' is not an HLC timestamp"))
        .when(~_object_or_null(F.col("_p.after")), F.lit("'after' is not an object or null"))
        .when(~_object_or_null(F.col("_p.before")), F.lit("'before' is not an object or null"))
    )
    kind = (
        F.when(error.isNotNull(), F.lit("bad"))
        .when(F.col("key").isNull(), F.lit("marker"))
        .otherwise(F.lit("row"))
    )
    op = (
        F.when(F.col("_p.after").isNull(), F.lit("delete"))
        .when(F.col("_p.before").isNotNull(), F.lit("update"))
        .otherwise(F.lit("upsert"))
    )
    return raw.withColumn("_p", parsed).select(
        kind.alias("kind"),
        table.alias("table"),
        F.col("key"),
        F.col("_p.after").alias("after"),
        F.col("_p.before").alias("before"),
        op.alias("op"),
        ts.alias("ts"),
        F.col("_p.updated").alias("ts_text"),
        resolved.alias("resolved"),
        error.alias("error"),
        F.col("topic").alias("src_topic"),
        F.col("partition").alias("src_partition"),
        F.col("offset").alias("src_offset"),
        F.col("value"),
        F.col("headers"),
    )
