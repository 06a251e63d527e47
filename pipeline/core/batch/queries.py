"""CDC queries: ``select`` and ``where`` as Spark SQL expressions over a table's row.

Like CockroachDB's CDC queries, a query works on one table, whose columns are declared
(``sources[0].table_schema``). When one is configured, a projection runs in Spark before the
changefeed's per-record loop (``pipeline/core/batch/loop.py``), over every source format alike:

* each change is read as a native envelope (``rows.py``: a Debezium event, each row of a
  canal-json event), parsed with the declared column types, and the row's columns are put at the
  top level, once for ``after`` and once for ``before``, so expressions name columns plainly
  (``amount > 100``, ``order_id``, ``amount * 2 AS doubled``);
* ``where`` keeps a change when it holds for the new version (``after``); a delete is judged
  by the version it deletes (``before``) when the source sends it, and kept otherwise (also
  when ``where`` is unknown there: Debezium's delete of a table without ``REPLICA IDENTITY
  FULL`` sends only the key's columns), so a consumer never misses the delete of a row it may
  hold. Over Debezium nothing is dropped in Spark: the loop counts a change it does not emit
  for its transaction (``keep``), or the markers would wait for it forever;
* ``select`` replaces ``after`` and ``before`` by the selected expressions (the key stays the
  primary key);
* a value that does not fit the declared types is marked, and the loop treats it as an
  undecodable record (``on_error``), naming topic, partition and offset.

Spark reads a declared decimal rounded to its scale and prints what it selects its own way,
so the per-record loop finishes the query exactly (:class:`RowShape`): every declared decimal
of the source row must fit its type (one that does not is a bad record, never rounded), and a
``select`` item that names a column takes the source's value as written; computed items are
Spark's (exact decimals, as Spark prints them).

Markers and records that are not rows pass through untouched, in order: the projection is
narrow, so nothing is reordered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.errors import ConfigError, SchemaChange
from schemas.tables import TableSchema

from ..sources import BadRecord, Change, NativeAdapter, adapter
from .rows import with_rows

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import Column, DataFrame, SparkSession

    from pipeline.config import EncoderConfig

_NATIVE = NativeAdapter()  # reads the projections: native envelopes
_PRIMITIVES = {
    "null": "string",
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "float",
    "double": "double",
    "string": "string",
    "bytes": "string",
}
_LOGICAL = {
    "date": "date",
    "timestamp-millis": "timestamp",
    "timestamp-micros": "timestamp",
    "local-timestamp-millis": "timestamp_ntz",
    "local-timestamp-micros": "timestamp_ntz",
}


def spark_type(avro: Any) -> str:
    """The Spark SQL type (DDL) that reads a JSON value of Avro type ``avro``."""
    if isinstance(avro, str):
        return _PRIMITIVES.get(avro, "string")  # named types (enums, fixed) read as text
    if isinstance(avro, list):
        rest = [t for t in avro if t != "null"]
        return spark_type(rest[0]) if len(rest) == 1 else "string"  # a real union: JSON text
    logical, kind = avro.get("logicalType"), avro.get("type")
    complex_types = {
        "array": lambda: f"array<{spark_type(avro['items'])}>",
        "map": lambda: f"map<string,{spark_type(avro['values'])}>",
        "record": lambda: row_type(avro["fields"]),
    }
    if logical == "decimal":
        found = f"decimal({avro['precision']},{avro.get('scale', 0)})"
    elif logical in _LOGICAL:
        found = _LOGICAL[logical]
    elif kind in complex_types:
        found = complex_types[kind]()
    else:
        found = spark_type(kind) if isinstance(kind, str | list) else "string"
    return found


def row_type(fields: list[dict[str, Any]]) -> str:
    """``struct<…>`` of Avro record fields."""
    inner = ", ".join(f"`{f['name']}`: {spark_type(f['type'])}" for f in fields)
    return f"struct<{inner}>"


_PASSED = ("key", "value", "topic", "partition", "offset", "headers", "row", "group")


def apply_query(
    raw: DataFrame,
    table: str,
    schema: TableSchema,
    encoder: EncoderConfig,
    *,
    source_format: str = "native",
    registry: Mapping[str, str] | None = None,
    mark_only: bool = False,
) -> DataFrame:
    """The source records with ``where`` applied and ``select`` projected.

    The records are first split into one Spark row per change (``rows.py``: a query reads
    every format as the native envelope). Columns out: ``key, value, topic, partition,
    offset, headers, row, group, error``, and with ``select`` ``projected`` (the envelope of
    the selected values, null where the record is not a row that fits); ``value`` stays the
    source's. With ``mark_only``, ``where`` drops nothing and adds a ``keep`` column instead:
    the initial scan must see every version to know which one is the latest before it judges
    it, and a source whose markers come from counting its changes (Debezium's transactions)
    must have every change counted, kept or not.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark stays out of the import path

    mark_only = mark_only or not adapter(source_format).in_band_markers
    frame = _parsed(with_rows(raw, source_format, registry), schema, encoder)
    p = F.col("__hw_p")
    is_change = F.col("__hw_change")
    is_row = is_change & p.isNotNull() & p["updated"].isNotNull()
    fits = p["_corrupt"].isNull()
    columns = {name: F.col(f"__hw_r.{name}") for name in _PASSED}
    columns |= {
        "error": F.when(
            is_change & ~fits,
            F.lit(f"value does not fit the declared schema of table {table!r}"),
        ),
    }
    if encoder.select is not None:
        envelope = F.struct(
            F.when(p["after"].isNotNull(), F.col("__hw_sel_after")).alias("after"),
            F.when(p["before"].isNotNull(), F.col("__hw_sel_before")).alias("before"),
            p["updated"].alias("updated"),
        )
        projected = F.to_json(envelope, {"ignoreNullFields": "false"}).cast("binary")
        columns["projected"] = F.when(is_row & fits, projected)
    out = frame.select(*(column.alias(name) for name, column in columns.items()))
    if encoder.where is None:
        return out
    keep = (
        F.when(~(is_row & fits), F.lit(True))
        .when(p["after"].isNotNull(), F.coalesce(F.col("__hw_keep_after"), F.lit(False)))
        # a delete whose old version the query cannot judge (a partial before image) is kept
        .when(p["before"].isNotNull(), F.coalesce(F.col("__hw_keep_before"), F.lit(True)))
        .otherwise(F.lit(True))
    )
    if mark_only:
        columns["keep"] = keep
        return frame.select(*(column.alias(name) for name, column in columns.items()))
    return frame.where(keep).select(*(column.alias(name) for name, column in columns.items()))


def _parsed(rows: DataFrame, schema: TableSchema, encoder: EncoderConfig) -> DataFrame:
    """One row per change with the query evaluated over both of its images.

    Its record's columns (``__hw_r``), whether it is a change (``__hw_change``), its envelope
    parsed by the declared schema (``__hw_p``), and ``_evaluate``'s columns.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark stays out of the import path

    record = row_type(list(schema.record["fields"]))
    parsed = F.from_json(
        F.col("envelope").cast("string"),
        f"after {record}, before {record}, updated string, _corrupt string",
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"},
    )
    frame = rows.select(
        F.struct(*_PASSED).alias("__hw_r"),
        F.col("envelope").isNotNull().alias("__hw_change"),
        parsed.alias("__hw_p"),
    )
    for image in ("after", "before"):
        frame = _evaluate(frame, image, encoder)
    return frame


def _evaluate(frame: DataFrame, image: str, encoder: EncoderConfig) -> DataFrame:
    """Evaluate the query over one image (``after`` or ``before``) with its columns on top."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark stays out of the import path

    computed: list[Column] = []
    if encoder.where is not None:
        computed.append(F.expr(encoder.where).cast("boolean").alias(f"__hw_keep_{image}"))
    if encoder.select is not None:  # ``*``: the row's columns (not the query's own)
        items = [f"__hw_p.{image}.*" if e.strip() == "*" else e for e in encoder.select]
        computed.append(F.struct(*(F.expr(e) for e in items)).alias(f"__hw_sel_{image}"))
    keep = [c for c in frame.columns if c.startswith("__hw_")]
    return frame.select("*", f"__hw_p.{image}.*").select(*keep, *computed)


def check_query(
    spark: SparkSession, table: str, schema: TableSchema, encoder: EncoderConfig
) -> None:
    """Analyse the query against the declared columns; a bad expression is a config error."""
    from pyspark.errors import AnalysisException, ParseException  # noqa: PLC0415 - Spark stays out of the import path

    empty = spark.createDataFrame(
        [],
        "key binary, value binary, topic string, partition int, offset bigint, "
        "headers array<struct<key: string, value: binary>>",
    )
    for option in ("where", "select"):
        if getattr(encoder, option) is None:
            continue
        only = encoder.model_copy(
            update={"where": None, "select": None, option: getattr(encoder, option)}
        )
        try:
            apply_query(empty, table, schema, only).schema  # noqa: B018 - forces analysis
        except (AnalysisException, ParseException) as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError([(f"encoder.{option}", first)]) from None


# A select item that names a column, optionally renamed: ``price``, ``price AS p``, `` `p` ``.
_NAME = r"(`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_NAMED = re.compile(rf"\s*{_NAME}(?:\s+(?:[Aa][Ss]\s+)?{_NAME})?\s*")


@dataclass(frozen=True)
class RowShape:
    """The executors' part of a CDC query: what Spark's projection cannot do exactly."""

    schema: TableSchema
    selects: bool  # the records carry ``projected``: the selected values
    named: tuple[tuple[str, str], ...] = ()  # (output field, source column) of plain items
    every: bool = False  # ``*`` is selected: every column, so a new one must not vanish

    @classmethod
    def of(cls, schema: TableSchema, encoder: EncoderConfig) -> RowShape:
        """The shape of ``encoder``'s query over ``schema``'s table."""
        columns = {f["name"] for f in schema.record["fields"]}
        named = []
        for item in encoder.select or ():
            found = _NAMED.fullmatch(item)
            if found is not None and found[1].strip("`") in columns:
                column = found[1].strip("`")
                named.append(((found[2] or column).strip("`"), column))
        every = any(item.strip() == "*" for item in encoder.select or ())
        return cls(schema, encoder.select is not None, tuple(named), every)

    def stretch(self, run: pa.RecordBatch) -> Callable[[int, Change], Change]:
        """For a stretch of records: record ``i``'s source change → the query's change.

        The projection is a native envelope whatever the source's format (``rows.py``).

        Raises :class:`BadRecord` for what Spark marked (``error``) and a decimal that does
        not fit its declared type; :class:`SchemaChange` for a row with a column the
        declared table lacks where ``*`` is selected (Spark's ``*`` is the declared columns:
        the new one would vanish), which ``schema_change_policy`` decides.
        """
        errors = run.column("error").to_pylist()
        texts: list[bytes | None] = []
        exact: list[bool] = []
        if self.selects:
            projected = run.column("projected")
            texts, exact = projected.to_pylist(), _NATIVE.exact(projected, projected)
        misfit, named = self.schema.misfit, self.named
        declared = frozenset(self.schema.columns) if self.every else None

        def shape(i: int, change: Change) -> Change:
            if errors[i] is not None:
                raise BadRecord(errors[i])
            for image in (change.after, change.before):
                reason = None if image is None else misfit(image)
                if reason is not None:
                    raise BadRecord(reason)
                if declared is not None and image is not None and not declared.issuperset(image):
                    raise SchemaChange(self.schema.name, set(image) - declared)
            if not self.selects:
                return change
            selected = _NATIVE.change(change.key, texts[i], exact[i])
            if selected is None:
                raise BadRecord("the query's projection of the change is empty")
            for image, values in ((selected.after, change.after), (selected.before, change.before)):
                if image is not None and values is not None:
                    image.update((field, values[col]) for field, col in named if col in values)
            return change._replace(after=selected.after, before=selected.before, text=None)

        return shape
