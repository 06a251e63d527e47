"""A table's output records as rows of its Iceberg table, on the executors (``mapInArrow``).

The records of the table's topics in the step's offset ranges go through :class:`Converter`
in the executors' Python: each row change read whole by the consumer library's decoder of the
output (JSON with numbers exact, or Avro by its writer schema from the registry or the schema
topic, as ``highwater apply``'s local engine reads them) and each value made what
its column holds by the same converters (:func:`highwater_consumer.iceberg.columns.converters`):
never rounded, a value its column cannot hold is :class:`UnwritableRecord` naming the record
(topic/partition@offset), the table and the column, which stops the step before any commit.
A row with a column the table lacks is :class:`ColumnSeen`, naming the record: the driver
reads that record and alters the table by it as the local engine would, or stops
(:mod:`.engine`).
Markers are read by :class:`MarkerReader` (the records without a key, for :mod:`.ranges`).

Each row carries, beside the table's columns, its commit time (packed, ``decimal(38,0)``:
ordered as the HLC), whether it is a delete, its raw key and where it was read. Spark then
takes a window's rows with SQL (:func:`window_rows`): per key the last version in
``(lo, hi]``, a replay of one (the same key and time, read twice) once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from highwater_consumer.decoding import ApplyError, Marker, Reader
from highwater_consumer.iceberg import UnwritableRecord
from highwater_consumer.iceberg.columns import Convert, Unwritable, converters
from highwater_consumer.output import Output
from schemas.errors import RecordRef

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

TIME = "_hw_time"  # the row's commit time, packed (wall * 10**10 + logical): decimal(38,0)
DELETED = "_hw_deleted"
KEY = "_hw_key"  # the record's key as written: a replay is the same key at the same time
TOPIC, PARTITION, OFFSET = "_hw_topic", "_hw_partition", "_hw_offset"
HIDDEN = (TIME, DELETED, KEY, TOPIC, PARTITION, OFFSET)


class ColumnSeen(ApplyError):
    """A row (on an executor) with a column its table lacks: a schema change, for the driver.

    Its text names the record first (``ColumnSeen: topic/partition@offset: …``), which is
    what reaches the driver of a Python worker's error (:func:`.engine.column_seen`).
    """

    def __init__(self, record: RecordRef, table: str, column: str) -> None:
        self.record = record
        super().__init__(f"{record}: table {table}: column {column!r} is not in the table")


def row_schema(table: StructType) -> StructType:
    """The converted rows' schema: the table's columns (all nullable) and the hidden ones."""
    from pyspark.sql.types import (  # noqa: PLC0415 - Spark only where it runs
        BinaryType,
        BooleanType,
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    fields = [StructField(f.name, f.dataType, nullable=True) for f in table.fields]
    fields += [
        StructField(TIME, DecimalType(38, 0), nullable=False),
        StructField(DELETED, BooleanType(), nullable=False),
        StructField(KEY, BinaryType(), nullable=False),
        StructField(TOPIC, StringType(), nullable=False),
        StructField(PARTITION, IntegerType(), nullable=False),
        StructField(OFFSET, LongType(), nullable=False),
    ]
    return StructType(fields)


class _Reading:
    """What reads an output's records on the executors: its decoder, made there on first use.

    The output (its format, registry or schema topic) travels pickled; the decoder (a
    registry client, the schemas read) is the executor's own.
    """

    def __init__(self, output: Output) -> None:
        self.output = output
        self._reader: Reader | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_reader": None}

    def reader(self) -> Reader:
        if self._reader is None:
            self._reader = self.output.decoder().reader
        return self._reader


MARKER_SCHEMA = "topic string, partition int, offset long, packed decimal(38,0), text string"


class MarkerReader(_Reading):
    """``mapInArrow``'s function: the records without a key in, their markers out (executors).

    A record without a key that is no marker is named (topic/partition@offset, why), as the
    local engine names it: it stops the step.
    """

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each batch of keyless records (value, topic, partition, offset) as markers."""
        import pyarrow as pa  # noqa: PLC0415 - the executors'

        reader = self.reader()
        for batch in batches:
            out: dict[str, list[Any]] = {n: [] for n in ("topic", "partition", "offset")}
            packed, texts = [], []
            places = [batch.column(n).to_pylist() for n in ("topic", "partition", "offset")]
            for value, *place in zip(batch.column("value").to_pylist(), *places, strict=True):
                where = RecordRef(*place)
                try:
                    read = reader.read(None, value)
                except Exception as exc:  # the decoder's own reasons, as the consumer gives them
                    raise ApplyError(f"{where}: a record without a key: {exc}") from exc
                if type(read) is not Marker:
                    raise ApplyError(f"{where}: a row change without a key")
                for name, item in zip(out, place, strict=True):
                    out[name].append(item)
                packed.append(_decimal(read.resolved.packed()))
                texts.append(str(read.resolved))
            yield pa.RecordBatch.from_pydict(
                {**out, "packed": packed, "text": texts},
                schema=pa.schema(
                    [
                        ("topic", pa.string()),
                        ("partition", pa.int32()),
                        ("offset", pa.int64()),
                        ("packed", pa.decimal128(38, 0)),
                        ("text", pa.string()),
                    ]
                ),
            )


class Converter(_Reading):
    """``mapInArrow``'s function: Kafka records of one table in, its rows out (executors).

    Made on the driver from the Iceberg table's schema (pyiceberg's, as JSON: it travels
    pickled), the Spark schema of the rows out and the output (its decoder); the converters
    and the decoder are made on first use.
    """

    def __init__(
        self, table: str, iceberg_schema: str, key: Sequence[str], out: str, output: Output
    ) -> None:
        super().__init__(output)
        self.table = table
        self.iceberg_schema = iceberg_schema
        self.key = tuple(key)
        self.out = out  # the Spark row schema as JSON
        self._convert: Mapping[str, Convert] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_convert": None}

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each batch of records (key, value, topic, partition, offset) as a batch of rows."""
        import pyarrow as pa  # noqa: PLC0415 - the executors'
        from pyspark.sql.pandas.types import to_arrow_schema  # noqa: PLC0415
        from pyspark.sql.types import StructType  # noqa: PLC0415

        schema = to_arrow_schema(StructType.fromJson(_json(self.out)))
        reader = self.reader()
        for batch in batches:
            columns = [batch.column(n).to_pylist() for n in ("key", "value", "topic")]
            places = [batch.column(n).to_pylist() for n in ("partition", "offset")]
            rows = []
            for key, value, topic, partition, offset in zip(*columns, *places, strict=True):
                row = self._row(reader, key, value, RecordRef(topic, partition, offset))
                if row is not None:
                    rows.append(row)
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    def _row(
        self,
        reader: Reader,
        key: bytes | None,
        value: bytes | None,
        where: RecordRef,
    ) -> dict[str, Any] | None:
        """One record's row (None: a marker); a record that is not a row change named."""
        try:
            read = reader.read(key, value)
        except Exception as exc:  # the decoder's own reasons, as the consumer gives them
            raise ApplyError(f"{where}: {exc}") from exc
        if type(read) is not int or key is None or value is None:
            return None  # a marker: the marker job's
        change = reader.change(key, value)
        if change.after is not None:
            unknown = [c for c in change.after if c not in self._converters()]
            if unknown:
                raise ColumnSeen(where, self.table, unknown[0])
        try:
            row = self._values(change.key, change.after)
        except Unwritable as exc:
            raise UnwritableRecord(where, self.table, str(exc)) from None
        row.update(
            {
                TIME: _decimal(read),
                DELETED: change.after is None,
                KEY: key,
                TOPIC: where.topic,
                PARTITION: where.partition,
                OFFSET: where.offset,
            }
        )
        return row

    def _values(self, key_values: Any, after: Mapping[str, Any] | None) -> dict[str, Any]:
        """The row's columns: the key's always, the others from ``after`` (None: a delete)."""
        convert = self._converters()
        row: dict[str, Any] = {}
        if after is not None:
            for column, make in convert.items():
                value = after.get(column)
                row[column] = None if value is None else _converted(make, value, column)
        if self.key:
            if isinstance(key_values, Mapping):  # Avro: the key record, by column
                missing = [c for c in self.key if c not in key_values]
                if missing:
                    raise Unwritable(f"the key {key_values!r} lacks {missing}")
                key_values = [key_values[c] for c in self.key]
            if not isinstance(key_values, list) or len(key_values) != len(self.key):
                raise Unwritable(f"the key {key_values!r} is not one of {list(self.key)}")
            for column, value in zip(self.key, key_values, strict=True):
                if value is None:
                    raise Unwritable(f"key column {column!r} is null")
                row[column] = _converted(convert[column], value, column)
        return row

    def _converters(self) -> Mapping[str, Convert]:
        if self._convert is None:
            from pyiceberg.schema import Schema  # noqa: PLC0415 - the executors'

            self._convert = converters(Schema.model_validate_json(self.iceberg_schema))
        return self._convert


def _converted(convert: Convert, value: Any, column: str) -> Any:
    try:
        return convert(value)
    except Unwritable as exc:
        raise Unwritable(f"column {column!r}: {exc}") from None


def _decimal(packed: int) -> Any:
    from decimal import Decimal  # noqa: PLC0415

    return Decimal(packed)


def _json(text: str) -> dict[str, Any]:
    import json  # noqa: PLC0415

    found: dict[str, Any] = json.loads(text)
    return found


def window_rows(rows: DataFrame, key: Sequence[str], lo: int | None, hi: int) -> DataFrame:
    """The rows of the window ``(lo, hi]`` (packed times; ``lo`` None: from the start).

    With a key: each key's last version (a delete included, the MERGE removes it). Without
    (an append-only table): every version but deletes, a replay of one once.
    """
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as f  # noqa: PLC0415

    inside = f.col(TIME) <= f.lit(str(hi)).cast("decimal(38,0)")
    if lo is not None:
        inside &= f.col(TIME) > f.lit(str(lo)).cast("decimal(38,0)")
    chosen = rows.where(inside)
    if not key:
        return chosen.where(~f.col(DELETED)).dropDuplicates([TIME, KEY])
    latest = Window.partitionBy(*[f.col(c) for c in key]).orderBy(
        f.col(TIME).desc(), f.col(OFFSET).desc()
    )
    ranked = chosen.withColumn("_hw_rank", f.row_number().over(latest))
    return ranked.where(f.col("_hw_rank") == 1).drop("_hw_rank")
