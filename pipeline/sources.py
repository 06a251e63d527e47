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

_NATIVE_SCHEMA = "after STRING, before STRING, updated STRING, resolved STRING, _corrupt STRING"
_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}


def hlc_struct(text: Column) -> Column:
    """Parse an HLC string column into ``struct<wall, logical>`` (null if it is not one).

    Plain string functions and ``try_cast`` rather than a regular expression: this runs for
    every record and a regex costs several times more.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    wall = F.substring_index(text, ".", 1).try_cast("bigint")
    has_dot = F.instr(text, ".") > 0
    fraction = F.substring_index(text, ".", -1)
    logical = F.when(has_dot, fraction.try_cast("bigint")).otherwise(F.lit(0).cast("bigint"))
    valid = (
        wall.isNotNull()
        & (wall >= 0)
        & logical.isNotNull()
        & (logical >= 0)
        & (~has_dot | (F.length(fraction).between(1, 10)))
    )
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

    ``tables`` maps each source topic to its table name. Two projections: the first parses
    (one ``from_json`` per record), the second classifies from the parsed columns, so no
    parse is evaluated twice.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    key_text = F.col("key").cast("string")
    parsed = raw.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        F.from_json(F.col("value").cast("string"), _NATIVE_SCHEMA, _JSON_OPTIONS).alias("_p"),
    ).select(
        "*",
        hlc_struct(F.col("_p.updated")).alias("ts"),
        hlc_struct(F.col("_p.resolved")).alias("resolved"),
    )
    table = F.lit(None).cast("string")
    for topic, name in tables.items():
        table = F.when(F.col("topic") == topic, F.lit(name)).otherwise(table)
    key_is_array = F.trim(key_text).startswith("[") & F.trim(key_text).endswith("]")
    error = (
        F.when(F.col("value").isNull(), F.lit("null value"))
        .when(
            F.col("_p").isNull() | F.col("_p._corrupt").isNotNull(),
            F.lit("value is not a JSON object"),
        )
        .when(
            F.col("key").isNull(),
            F.when(F.col("_p.resolved").isNull(), F.lit("null key but no 'resolved' field")).when(
                F.col("resolved").isNull(), F.lit("'resolved' is not an HLC timestamp")
            ),
        )
        .when(~key_is_array, F.lit("key is not a JSON array"))
        .when(F.col("_p.updated").isNull(), F.lit("no 'updated' field"))
        .when(F.col("ts").isNull(), F.lit("'updated' is not an HLC timestamp"))
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
    return parsed.select(
        kind.alias("kind"),
        table.alias("table"),
        F.col("key"),
        F.col("_p.after").alias("after"),
        F.col("_p.before").alias("before"),
        op.alias("op"),
        F.col("ts"),
        F.col("_p.updated").alias("ts_text"),
        F.col("resolved"),
        error.alias("error"),
        F.col("topic").alias("src_topic"),
        F.col("partition").alias("src_partition"),
        F.col("offset").alias("src_offset"),
        F.col("value"),
        F.col("headers"),
    )
