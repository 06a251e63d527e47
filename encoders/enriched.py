"""CockroachDB's ``enriched`` envelope, in JSON and Avro (issue 55; contract §4).

The JSON value, its members in CockroachDB's (alphabetical) order::

    {"after": {…}|null, "before": {…}|null, "key": {…}, "op": "c"|"u"|"d",
     "source": {…}, "ts_ns": <int>}

with ``before`` only under ``diff``, ``key`` under ``key_in_value``, ``source`` under
``enriched_properties: [source]``. ``op`` is ``c`` for a new row, ``u`` for a new version of
one, ``d`` for a delete: as the source said (Debezium's ``op``, Canal-JSON's ``type``; an
initial scan's rows are ``c``); a source that says only "this row now" (a native changefeed's
upsert) gives ``u`` when it carries the version before, else ``c``. ``ts_ns`` is when the
changefeed wrote the record (CockroachDB's meaning: not an order; the commit time is the
source block's ``ts_hlc``). The key is an object of the key's columns (``key_column``: that
column alone); a resolved marker is ``{"resolved": "<hlc>"}``, as under ``wrapped``.

The source block (members in order)::

    {"changefeed_sink": "kafka", "db_position": [...]|null, "job_id": "<changefeed_id>",
     "mvcc_timestamp": "<hlc>", "origin": "highwater", "primary_keys": [...],
     "source_offset": <int>|null, "source_partition": <int>|null, "source_topic": "…"|null,
     "table_name": "…", "transaction_id": "…"|null, "ts_hlc": "<hlc>", "ts_ns": <int>}

CockroachDB's names where the meaning is the same (``mvcc_timestamp`` under that option,
``ts_hlc`` and ``ts_ns``, the commit time, under ``updated``); Highwater's own for where the
change was read: the source record (null for an initial scan's row), the database's position
as the changefeed orders a source partition's changes (Debezium: PostgreSQL's commit LSN and
LSN, a binlog's file, position and row), the transaction's id where the source names it.

``enriched_properties: [schema]`` in JSON puts each value and key beside its Kafka Connect
schema (:class:`ConnectSchemas`, from the declared table); in Avro
(:class:`EnrichedAvroEncoder`) the registry holds the schema, and the value is CockroachDB's
record of the same fields.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from schemas.avro import OutputSchemas
from schemas.connect_schema import enriched_schema, key_schema
from schemas.errors import SchemaChange
from schemas.hlc import Hlc
from schemas.tables import TableSchema

from .avro import AvroEncoder, Framing, full_name
from .base import ChangeRow, Context, EnvelopeOptions, Origin, key_column_value, key_names
from .json import dumps

SINK = "kafka"
ORIGIN = "highwater"
_NOWHERE = Origin(None, None, None)
_OPS = {"insert": "c", "update": "u", "delete": "d"}


def op_of(row: ChangeRow) -> str:
    """``c``, ``u`` or ``d``: what the source said, or (an upsert) whether a version preceded."""
    if row.after is None:
        return "d"
    told = _OPS.get(row.op or "")
    if told is not None and told != "d":
        return told
    return "c" if row.before is None else "u"


def source_block(
    row: ChangeRow, changefeed: str, mvcc: bool, updated: bool, key_names: Any = None
) -> dict[str, Any]:
    """The source block of ``row`` (module doc).

    ``mvcc_timestamp`` and the commit time only under their options; ``key_names``: the
    primary key's, where the row's origin lacks them.
    """
    origin = row.origin or _NOWHERE
    names, position = origin.key_names or key_names, origin.position
    block: dict[str, Any] = {
        "changefeed_sink": SINK,
        "db_position": None if position is None else list(position),
        "job_id": changefeed,
    }
    if mvcc:
        block["mvcc_timestamp"] = str(row.mvcc_timestamp)
    block |= {
        "origin": ORIGIN,
        "primary_keys": None if names is None else list(names),
        "source_offset": origin.offset,
        "source_partition": origin.partition,
        "source_topic": origin.topic,
        "table_name": row.table,
        "transaction_id": origin.transaction,
    }
    if updated:
        block["ts_hlc"] = str(row.updated)
        block["ts_ns"] = row.updated.wall
    return block


class ConnectSchemas(NamedTuple):
    """``enriched_properties: [schema]`` in JSON: each key and value beside its schema.

    ``key`` and ``value`` are the bytes that follow a payload (``,"schema":{…}}``), written
    once per table; ``columns`` the declared table's, which a row's images must stay within
    (a column the schema lacks is a schema change, as in Avro: never a column undescribed).
    """

    key: bytes
    value: bytes
    columns: frozenset[str]

    @classmethod
    def of(cls, table: TableSchema, options: EnvelopeOptions) -> ConnectSchemas:
        """The declared ``table``'s (``headers_json_column_name``'s column not in the value)."""
        headers = options.headers_json_column_name
        if headers is not None:
            table = table.without(headers)
        column = options.key_column
        key = key_schema(table, table.primary_key if column is None else (column,))

        def tail(schema: dict[str, Any]) -> bytes:
            return b',"schema":' + dumps(schema) + b"}"

        names = frozenset(f["name"] for f in table.record["fields"])
        return cls(tail(key), tail(enriched_schema(table, options)), names)

    def wrap(self, payload: bytes, row: ChangeRow) -> bytes:
        """The value's payload beside its schema; a column the schema lacks: SchemaChange."""
        for image in (row.after, row.before):
            if image is not None and not image.keys() <= self.columns:
                raise SchemaChange(row.table, image.keys() - self.columns)
        return b'{"payload":' + payload + self.value


class EnrichedJsonEncoder:
    """The ``enriched`` envelope in JSON, one row at a time."""

    verbatim: tuple[str, ...] | None = None  # every value is written anew
    walk: Mapping[str, Any] | None = None  # the Python loop's alone
    scan_walk: Mapping[str, Any] | None = None
    wants_origin = True  # the loop and the scan give each row its op and Origin

    def __init__(
        self, options: EnvelopeOptions, changefeed: str, table: TableSchema | None = None
    ) -> None:
        """``table``: the declared table, whose schema ``enriched_properties: [schema]`` adds."""
        self.options = options
        self.changefeed = changefeed
        self._diff, self._key = options.diff, options.key_in_value
        self._updated, self._mvcc = options.updated, options.mvcc_timestamp
        self._source = "source" in options.enriched_properties
        self._key_column = options.key_column
        self._schemas: ConnectSchemas | None = None
        if "schema" in options.enriched_properties:
            if table is None:
                raise ValueError("enriched_properties [schema] in JSON needs the declared table")
            self._schemas = ConnectSchemas.of(table, options)
            self._primary: tuple[str, ...] | None = table.primary_key
        else:
            self._primary = None

    def _key_object(self, row: ChangeRow) -> dict[str, Any]:
        names = key_names(row, self._primary, "envelope enriched")
        return dict(zip(names, row.key, strict=True))

    def key(self, row: ChangeRow, ctx: Context) -> bytes:
        """The key's columns as an object (``key_column``: that column's value alone)."""
        column = self._key_column
        if column is not None:
            key = dumps({column: key_column_value(row, column)}, "key")
        else:
            key = dumps(self._key_object(row), "key")
        schemas = self._schemas
        return key if schemas is None else b'{"payload":' + key + schemas.key

    def value(self, row: ChangeRow, ctx: Context) -> bytes:
        """The enriched envelope (module doc)."""
        value: dict[str, Any] = {"after": row.after}
        if self._diff:
            value["before"] = row.before
        if self._key:
            value["key"] = self._key_object(row)
        value["op"] = op_of(row)
        if self._source:
            block = source_block(row, self.changefeed, self._mvcc, self._updated, self._primary)
            value["source"] = block
        value["ts_ns"] = time.time_ns()
        schemas = self._schemas
        return dumps(value) if schemas is None else schemas.wrap(dumps(value), row)

    def resolved(self, ts: Hlc, ctx: Context) -> bytes:
        """``{"resolved": "<hlc>"}``, as under ``wrapped``."""
        return dumps({"resolved": str(ts)})


class EnrichedAvroEncoder(AvroEncoder):
    """The ``enriched`` envelope in Avro (``schemas.avro.enriched_schema``).

    As CockroachDB's: the value record holds ``before`` (``diff``), ``after``, ``source``,
    ``key`` (``key_in_value``), ``ts_ns`` and ``op``, each nullable; the source record has
    every field, null where the options or the source give none; the key and the resolved
    marker are the wrapped envelope's. ``enriched_properties: [schema]`` adds nothing: the
    registry holds the schema.
    """

    wants_origin = True

    def __init__(
        self,
        schemas: OutputSchemas,
        framing: Framing,
        options: EnvelopeOptions,
        table: str,
        changefeed: str,
    ) -> None:
        super().__init__(schemas, framing, options, table)
        self.changefeed = changefeed
        self._source = "source" in options.enriched_properties
        namespace = schemas.value.get("namespace")
        self._before_name = full_name(f"{self.row_schema['name']}_before", namespace)
        self._source_name = full_name("source", namespace)

    def value(self, row: ChangeRow, ctx: Context) -> bytes | None:
        """The enriched value record after its header."""
        write = self._schemas()[1]  # first: it decides whether branches are named
        datum: dict[str, Any] = {}
        if self._diff:
            datum["before"] = self._image(row.before, self._before_name)
        datum["after"] = self._image(row.after)
        if self._source:
            block = source_block(row, self.changefeed, self._mvcc, self._updated, self.key_columns)
            datum["source"] = (self._source_name, block) if self._tuples else block
        if self._key:
            key = dict(zip(self.key_columns, row.key, strict=True))
            datum["key"] = self._branch(self._key_name, key)
        datum["ts_ns"] = time.time_ns()
        datum["op"] = op_of(row)
        return self._write("value", self.framing.value, write, datum)
