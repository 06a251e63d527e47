"""One Spark row per change: how a CDC query and the initial scan read every source format.

A CDC query (``queries.py``) is Spark SQL over the native envelope's ``after``/``before``,
and the initial scan (``scan.py``) groups a partition's records by row key. A ``native``
record is both already: one change, its key in the record key, its value the envelope. Other
formats are not: a Debezium value nests its images in its own envelope, and a canal-json
event carries several rows, keyed by their values, with no record key. :func:`with_rows`
gives every format the same three columns beside the source record's own:

==============  ==========================================================================
``row``         which change of its record this Spark row is (null: the record's only one)
``group``       the change's key as native JSON (``["eu", 7]``): what the scan groups by
``envelope``    the change as a native envelope (``{"after", "before", "updated"}``), its
                numbers written as the source wrote them: what a query reads
==============  ==========================================================================

A record that holds no change (a marker, a Debezium tombstone, a DDL event) or cannot be
decoded is one Spark row with the three null; the per-record loops decode it again and treat
it as they always do (``on_error`` names it). A record of several changes becomes several
Spark rows, each its source record's copy, in the record's order; the loops decode the record
once and take change ``row`` (:func:`pick_row`). The source columns are untouched, so a
dead-letter record is the source's, and a Debezium change still counts for its transaction.

For ``native`` the columns are Spark expressions (no Python pass); the other formats go
through :func:`split_rows`, one ``mapInArrow`` pass on the executors in the same stage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from schemas.jsontext import dumps

from ..sources import Change, Marker, Rows, SourceUnavailable, adapter

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

ROW_COLUMNS = ("row", "group", "envelope")
_SOURCE = ("key", "value", "topic", "partition", "offset", "headers")
_SOURCE_TYPES = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "headers array<struct<key: string, value: binary>>"
)


def with_rows(
    frame: DataFrame,
    source_format: str,
    registry: Mapping[str, str] | None = None,
    *,
    envelopes: bool = True,
) -> DataFrame:
    """Kafka source records of one format, as Spark rows of one change each (see above).

    ``registry``: the source's schema registry (Debezium's Avro). ``envelopes``: False when
    no query reads them (the scan's grouping alone): ``envelope`` stays null, unwritten.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark stays out of the import path

    frame = frame.select(*_SOURCE)
    if source_format == "native":
        return frame.select(
            "*",
            F.lit(None).cast("int").alias("row"),
            F.col("key").alias("group"),
            F.when(F.col("key").isNotNull(), F.col("value")).alias("envelope"),
        )
    schema = f"{_SOURCE_TYPES}, row int, group binary, envelope binary"
    return frame.mapInArrow(partial(split_rows, source_format, registry, envelopes), schema)


def split_rows(
    source_format: str,
    registry: Mapping[str, str] | None,
    envelopes_wanted: bool,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """The task body (``mapInArrow``): each record's changes as rows of their own."""
    import pyarrow as pa  # noqa: PLC0415 - pyarrow loads on the executors only

    source = adapter(source_format, registry)
    for batch in batches:
        keys, values = batch.column("key"), batch.column("value")
        flags = source.exact(keys, values)
        take: list[int] = []
        rows: list[int | None] = []
        groups: list[bytes | None] = []
        envelopes: list[bytes | None] = []
        for i, (key, value) in enumerate(zip(keys.to_pylist(), values.to_pylist(), strict=True)):
            try:
                item = source.decode(key, value, flags[i])
            except SourceUnavailable:
                raise
            except Exception:
                item = None
            changes = _changes(item)
            if not changes:
                take.append(i)
                rows.append(None)
                groups.append(None)
                envelopes.append(None)
                continue
            for j, change in enumerate(changes):
                take.append(i)
                rows.append(None if isinstance(item, Change) else j)
                groups.append(dumps(change.key))
                envelopes.append(envelope(change) if envelopes_wanted else None)
        out = batch.take(pa.array(take, pa.int64()))
        yield pa.RecordBatch.from_arrays(
            [
                *out.columns,
                pa.array(rows, pa.int32()),
                pa.array(groups, pa.binary()),
                pa.array(envelopes, pa.binary()),
            ],
            names=[*out.schema.names, *ROW_COLUMNS],
        )


def _changes(item: Change | Marker | Rows | None) -> Rows:
    if isinstance(item, Change):
        return (item,)
    if item is None or isinstance(item, Marker):
        return ()
    return item


def envelope(change: Change) -> bytes:
    """A change as the native envelope a CDC query reads (numbers as the source wrote them)."""
    return dumps({"after": change.after, "before": change.before, "updated": str(change.ts)})


def pick_row(
    decode: Callable[[int, bytes | None, bytes | None], Change | Marker | Rows | None],
    offsets: list[int],
    rows: list[int | None],
) -> Callable[[int, bytes | None, bytes | None], Change | Marker | Rows | None]:
    """``decode`` for Spark rows of :func:`with_rows`: a record decoded once, its change ``row``.

    The Spark rows of one record follow each other (same offset); each is its own change.
    """
    last: list[Any] = [None, None]  # offset, item

    def read(i: int, key: bytes | None, value: bytes | None) -> Change | Marker | Rows | None:
        row = rows[i]
        if row is None:
            return decode(i, key, value)
        if last[0] != offsets[i]:
            last[1] = decode(i, key, value)
            last[0] = offsets[i]
        item: Change | Marker | Rows | None = last[1]
        if isinstance(item, tuple) and not isinstance(item, Change | Marker):
            return item[row]
        return item

    return read
