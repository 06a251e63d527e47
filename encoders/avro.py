"""Avro change envelopes (contract §4), in two framings.

* **Confluent wire format** (a schema registry is configured): byte ``0``, the schema id as a
  4-byte big-endian integer, the Avro binary body. Ids come from registering the schemas of
  ``schemas/avro.py`` under ``<topic>-key`` / ``<topic>-value`` at start.
* **Single-object encoding** (no registry): ``C3 01``, the schema's 8-byte CRC-64-AVRO
  fingerprint, the body. The schemas are published to a compacted topic keyed by
  fingerprint, so any consumer can find them.

The ``wrapped`` and ``key_only`` envelopes are written here, ``enriched`` by its subclass in
``encoders/enriched.py``. The encoder is built on the
driver (with ids or fingerprints) and pickled to the executors, where it runs once per row.
A value that does not fit the declared types raises :class:`EncodingError` naming the table;
a row with a column the schema lacks (the table changed shape upstream) raises
:class:`SchemaChange`, so no column's values vanish silently.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fastavro import parse_schema, schemaless_writer

from schemas.avro import (
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_MAGIC,
    OutputSchemas,
    single_object_fingerprint,
)
from schemas.errors import EncodingError, SchemaChange
from schemas.hlc import Hlc
from schemas.jsontext import Number

from .avro_writer import NotCompiled, Write, compile_writer
from .base import ChangeRow, Context, EnvelopeOptions, key_column_value


@dataclass(frozen=True)
class Framing:
    """The header before each body: one per schema (key, value, resolved)."""

    key: bytes
    value: bytes
    resolved: bytes

    @classmethod
    def confluent(cls, key_id: int, value_id: int, resolved_id: int) -> Framing:
        """Byte 0 and the registry's schema id, big-endian."""

        def header(schema_id: int) -> bytes:
            return CONFLUENT_MAGIC + struct.pack(">I", schema_id)

        return cls(header(key_id), header(value_id), header(resolved_id))

    @classmethod
    def single_object(cls, schemas: OutputSchemas) -> Framing:
        """``C3 01`` and the schema's fingerprint."""

        def header(schema: dict[str, Any]) -> bytes:
            return SINGLE_OBJECT_MAGIC + single_object_fingerprint(schema)

        return cls(header(schemas.key), header(schemas.value), header(schemas.resolved))


_WIDE = decimal.Context(prec=1000)  # exact arithmetic for any decimal a column holds


def _decimal(scale: int) -> Callable[[Any], decimal.Decimal]:
    """A JSON number as a decimal of ``scale`` fraction digits where it is one exactly.

    ``1.2300`` in ``decimal(10,2)`` is ``1.23``: trailing zeros say nothing of the value (a
    Debezium NUMERIC(12,4) sends them); a value with more digits stays as it is, and the
    writer refuses it (it would have to be rounded).
    """
    quantum = decimal.Decimal(1).scaleb(-scale)

    def convert(value: Any) -> decimal.Decimal:
        number = value.decimal() if type(value) is Number else decimal.Decimal(str(value))
        exponent = number.as_tuple().exponent
        if isinstance(exponent, int) and exponent < -scale:
            scaled = number.quantize(quantum, context=_WIDE)
            if scaled == number:
                return scaled
        return number

    return convert


def _from_json(branch: Mapping[str, Any]) -> Callable[[Any], Any] | None:
    """How a JSON value becomes the Python value fastavro wants for a logical type."""
    logical = branch.get("logicalType")
    if logical == "decimal":
        return _decimal(int(branch.get("scale", 0)))
    converters: dict[str, Callable[[Any], Any]] = {
        "uuid": lambda v: uuid.UUID(str(v)),
        "date": lambda v: dt.date.fromisoformat(v) if isinstance(v, str) else v,
        "timestamp-millis": _timestamp,
        "timestamp-micros": _timestamp,
    }
    return converters.get(logical) if isinstance(logical, str) else None


def _fastavro_writer(schema: dict[str, Any]) -> Write:
    parsed = parse_schema(schema)

    def write(out: bytearray, datum: Any) -> None:
        buffer = io.BytesIO()
        schemaless_writer(buffer, parsed, datum)
        out += buffer.getvalue()

    return write


def _timestamp(value: Any) -> Any:
    if isinstance(value, str):
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


def _converters(row_schema: dict[str, Any]) -> dict[str, Callable[[Any], Any]]:
    """Per column, a converter for columns whose Avro type has a logical type."""
    out = {}
    for field in row_schema["fields"]:
        for branch in field["type"] if isinstance(field["type"], list) else [field["type"]]:
            convert = _from_json(branch) if isinstance(branch, dict) else None
            if convert is not None:
                out[field["name"]] = convert
    return out


# The types the JVM walk writes (pipeline/jvm/walk/.../Avro.java) as the compiled writer does.
_WALK_TYPES = frozenset({"string", "long", "int", "double", "float", "boolean"})


def _walk_field(field: Mapping[str, Any]) -> list[Any] | None:
    """``[name, type, nullable]`` of a field of a primitive or ``[null, primitive]`` type."""
    kind = field["type"]
    nullable = isinstance(kind, list) and len(kind) == 2 and kind[0] == "null"
    inner = kind[1] if nullable else kind
    if isinstance(inner, dict) and "logicalType" not in inner:
        inner = inner.get("type")
    if isinstance(inner, str) and inner in _WALK_TYPES:
        return [field["name"], inner, nullable]
    return None


def _walk(
    schemas: OutputSchemas, row: Mapping[str, Any], framing: Framing, options: EnvelopeOptions
) -> dict[str, Any] | None:
    """What the JVM walk needs to write these schemas (``row``: the row record), or None.

    ``key`` is the primary key's fields (the source's key, the value's ``key``); under
    ``key_column`` the key record is that column's (``key_column``: its place in the row
    record and its field); under ``headers_json_column_name`` the column the headers come from
    (``headers_column``, not in the row record).
    """
    columns = [_walk_field(f) for f in row["fields"]]
    key = [_walk_field(f) for f in (schemas.primary or schemas.key)["fields"]]
    if None in columns or None in key or options.envelope not in {"wrapped", "key_only"}:
        return None
    walk: dict[str, Any] = {
        "kind": "avro",
        "columns": columns,
        "key": key,
        "key_header": framing.key.hex(),
        "value_header": None if options.envelope == "key_only" else framing.value.hex(),
        "diff": options.diff,
        "key_in_value": options.key_in_value,
        "topic_in_value": options.topic_in_value,
        "updated": options.updated,
        "mvcc_timestamp": options.mvcc_timestamp,
    }
    if options.key_column is not None:
        field = _walk_field(schemas.key["fields"][0])
        if field is None:
            return None
        names = [f["name"] for f in row["fields"]]
        walk["key_column"] = {"column": names.index(options.key_column), "field": field}
    if options.headers_json_column_name is not None:
        walk["headers_column"] = options.headers_json_column_name
    return walk


def full_name(name: str, namespace: str | None) -> str:
    """A record's full name: ``name`` in the enclosing ``namespace`` (Avro's rule)."""
    return name if namespace is None or "." in name else f"{namespace}.{name}"


class AvroEncoder:
    """Avro envelopes for one output topic's table."""

    wants_origin = False  # what the source said of a change: enriched's (encoders/enriched.py)

    def __init__(
        self, schemas: OutputSchemas, framing: Framing, options: EnvelopeOptions, table: str
    ) -> None:
        self.schemas = schemas
        self.framing = framing
        self.table = table
        self.verbatim: tuple[str, ...] | None = None  # Avro writes every record itself
        self._key_only = options.envelope == "key_only"
        self._diff, self._key = options.diff, options.key_in_value
        self._topic, self._updated = options.topic_in_value, options.updated
        self._mvcc = options.mvcc_timestamp
        self._key_column = options.key_column  # the records' key: this column's value
        self._key_names = [f["name"] for f in (schemas.primary or schemas.key)["fields"]]
        self.key_columns = tuple(self._key_names)  # the primary key's, in key order
        after = next(f for f in schemas.value["fields"] if f["name"] == "after")["type"][1]
        self.row_schema: Mapping[str, Any] = after  # the row record: each column optional
        self._columns = frozenset(f["name"] for f in after["fields"])  # each optional
        self._convert = _converters(after)
        # the records' full names (fastavro's tuple notation names a branch by its full name)
        namespace = schemas.value.get("namespace")
        self._row_name = full_name(after["name"], namespace)
        self._key_name = full_name(schemas.key["name"], namespace)
        self.walk: Mapping[str, Any] | None = _walk(schemas, after, framing, options)
        self.scan_walk: Mapping[str, Any] | None = None
        self._writers: tuple[Write, Write, Write] | None = None
        # With fastavro, tuple notation names a union's branch: without it, fastavro validates
        # a row against the record branch to choose it, which costs more than writing it.
        self._tuples = False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its writers (generated functions); the executors make their own."""
        return {**self.__dict__, "_writers": None, "_tuples": False}

    def _schemas(self) -> tuple[Write, Write, Write]:
        """The three writers, made on first use (the encoder travels pickled)."""
        if self._writers is None:
            writers = []
            for schema in (self.schemas.key, self.schemas.value, self.schemas.resolved):
                try:
                    writers.append(compile_writer(schema))
                except NotCompiled:  # logical types and the like: fastavro writes them
                    writers.append(_fastavro_writer(schema))
                    self._tuples = True
            self._writers = (writers[0], writers[1], writers[2])
        return self._writers

    def _misfit(self, side: str, exc: Exception) -> EncodingError:
        return EncodingError(
            side, f"{side} does not fit the declared schema of table {self.table!r}: {exc}"
        )

    def _write(self, side: str, header: bytes, write: Write, datum: dict[str, Any]) -> bytes:
        out = bytearray(header)
        try:
            write(out, datum)
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            ArithmeticError,
            struct.error,
        ) as exc:
            raise self._misfit(side, exc) from None
        return bytes(out)

    def _row(self, side: str, values: dict[str, Any] | None) -> dict[str, Any] | None:
        if values is None:
            return values
        exact = any(type(v) is Number for v in values.values())  # numbers kept as their text
        if not (self._convert or exact):
            return values
        convert = self._convert
        try:
            return {
                k: convert[k](v)
                if k in convert and v is not None
                else (v.plain() if type(v) is Number else v)
                for k, v in values.items()
            }
        except (ValueError, TypeError, ArithmeticError) as exc:
            raise self._misfit(side, exc) from None

    def _image(self, values: dict[str, Any] | None, name: str | None = None) -> Any:
        """A row image (after, before) in its branch: a column the schema lacks is a change.

        (One it has and the row lacks is null: every column of the row record is optional.)
        ``name``: the record's full name where it is not the row record's (enriched's before).
        """
        if values is not None and not values.keys() <= self._columns:
            raise SchemaChange(self.table, values.keys() - self._columns)
        return self._branch(name or self._row_name, values)

    def _branch(self, name: str, values: dict[str, Any] | None) -> Any:
        row = self._row("value", values)
        return (name, row) if self._tuples and row is not None else row

    def key(self, row: ChangeRow, ctx: Context) -> bytes:
        """The key record (the key columns; ``key_column``'s alone) after its header."""
        column = self._key_column
        if column is not None:
            keyed = self._row("key", {column: key_column_value(row, column)})
            return self._write("key", self.framing.key, self._schemas()[0], keyed or {})
        if len(row.key) != len(self._key_names):
            raise EncodingError(
                "key",
                f"key {row.key!r} does not match the primary key {self._key_names} of table "
                f"{self.table!r}",
            )
        datum = self._row("key", dict(zip(self._key_names, row.key, strict=True)))
        return self._write("key", self.framing.key, self._schemas()[0], datum or {})

    def value(self, row: ChangeRow, ctx: Context) -> bytes | None:
        """The envelope after its header; None (a tombstone) under ``key_only``."""
        if self._key_only:
            return None
        write = self._schemas()[1]  # first: it decides whether branches are named
        datum: dict[str, Any] = {"after": self._image(row.after)}
        if self._diff:
            datum["before"] = self._image(row.before)
        if self._key:
            key = dict(zip(self._key_names, row.key, strict=True))
            datum["key"] = self._branch(self._key_name, key)
        if self._topic:
            datum["topic"] = ctx.topic
        if self._updated:
            datum["updated"] = str(row.updated)
        if self._mvcc:
            datum["mvcc_timestamp"] = str(row.mvcc_timestamp)
        return self._write("value", self.framing.value, write, datum)

    def resolved(self, ts: Hlc, ctx: Context) -> bytes:
        """The resolved record after its header."""
        return self._write(
            "value", self.framing.resolved, self._schemas()[2], {"resolved": str(ts)}
        )


class AvroPending:
    """The encoder of a table whose output schema is not known yet.

    A table whose schema is derived from its source (no ``table_schema``) and whose topic
    held no change to derive it from at the start: every row is a schema change (the first
    evolves the schema: ``pipeline/core/evolution/evolution.py``); resolved markers, whose
    record does not depend on the columns, are written as for any table.
    """

    verbatim: tuple[str, ...] | None = None
    walk: Mapping[str, Any] | None = None
    scan_walk: Mapping[str, Any] | None = None
    wants_origin = False

    def __init__(self, table: str, resolved_schema: dict[str, Any], header: bytes) -> None:
        self.table = table
        self.resolved_schema = resolved_schema
        self.header = header
        self._write: Write | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without its writer (a generated function)."""
        return {**self.__dict__, "_write": None}

    def key(self, row: ChangeRow, ctx: Context) -> bytes:
        """Never: the table has no output schema yet."""
        raise SchemaChange(self.table, (row.after or row.before or {}).keys())

    def value(self, row: ChangeRow, ctx: Context) -> bytes | None:
        """Never: the table has no output schema yet."""
        raise SchemaChange(self.table, (row.after or row.before or {}).keys())

    def resolved(self, ts: Hlc, ctx: Context) -> bytes:
        """The resolved record after its header."""
        if self._write is None:
            self._write = compile_writer(self.resolved_schema)
        out = bytearray(self.header)
        self._write(out, {"resolved": str(ts)})
        return bytes(out)
