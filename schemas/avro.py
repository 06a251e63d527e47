"""The Avro schemas of a changefeed's output, derived from a declared table schema.

For a table ``orders`` with primary key ``(region, order_id)``:

* **key**: record ``orders_key`` of the key columns, in key order, with their declared types;
* **value**: record ``orders_envelope`` with ``after`` and (under ``diff``) ``before`` of
  record ``orders`` (every column a nullable union with a null default), then ``key``
  (``key_in_value``), ``topic`` (``topic_in_value``), ``updated`` and ``mvcc_timestamp`` as
  nullable strings, all with null defaults;
* **enriched value** (``envelope: enriched``, CockroachDB's): ``orders_envelope`` with
  ``before`` (``diff``: record ``orders_before``), ``after``, ``source`` (record ``source``),
  ``key``, ``ts_ns`` and ``op``, each nullable with a null default (:func:`enriched_schema`);
* **resolved marker**: a record of the *same name* ``orders_envelope`` with one field,
  ``resolved`` (a nullable string, null default), as CockroachDB does.

Every top-level field and every column being optional with a null default makes adjacent
versions (a column added, a marker, a row) backward and forward compatible, so they live
under one subject ``<topic>-value``. Consumers tell a marker by its null key and its
non-null ``resolved``.

Spark-free: the encoders and the driver (registration) both use it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastavro.schema import fingerprint, to_parsing_canonical_form

from . import source_block
from .errors import SchemaError
from .tables import TableSchema

Schema = dict[str, Any]

# The first bytes of an Avro record in each framing (contract §4): the encoders write them, the
# consumer tells the framing by them. Confluent's wire format: this byte, then the registry's
# schema id (4 bytes, big-endian). Single-object encoding: these two, then the fingerprint.
CONFLUENT_MAGIC = b"\x00"
SINGLE_OBJECT_MAGIC = b"\xc3\x01"


def _nullable(avro_type: Any) -> Any:
    if isinstance(avro_type, list):
        rest = [t for t in avro_type if t != "null"]
        return ["null", *rest]
    return ["null", avro_type]


def row_schema(table: TableSchema) -> Schema:
    """The row record: every column nullable with a null default."""
    record = copy.deepcopy(dict(table.record))
    record["name"] = table.name
    record["fields"] = [
        {**f, "type": _nullable(f["type"]), "default": None} for f in record["fields"]
    ]
    return record


def key_schema(table: TableSchema, key_column: str | None = None) -> Schema:
    """The key record: the key columns, in key order, as declared (``key_column``: it alone)."""
    fields = {f["name"]: f for f in table.record["fields"]}
    names = table.primary_key if key_column is None else (key_column,)
    if key_column is not None and key_column not in fields:
        raise SchemaError(f"key_column {key_column!r} is not a column of table {table.name!r}")
    return {
        "type": "record",
        "name": f"{table.name}_key",
        "fields": [{k: v for k, v in fields[name].items() if k != "default"} for name in names],
    }


def envelope_schema(table: TableSchema, options: Any) -> Schema:
    """The value record ``<table>_envelope`` for these envelope options."""
    row = row_schema(table)
    fields: list[dict[str, Any]] = [{"name": "after", "type": ["null", row], "default": None}]
    if options.diff:
        fields.append({"name": "before", "type": ["null", table.name], "default": None})
    if options.key_in_value:
        fields.append({"name": "key", "type": ["null", key_schema(table)], "default": None})
    for flag, name in (
        ("topic_in_value", "topic"),
        ("updated", "updated"),
        ("mvcc_timestamp", "mvcc_timestamp"),
    ):
        if getattr(options, flag):
            fields.append({"name": name, "type": ["null", "string"], "default": None})
    return {"type": "record", "name": f"{table.name}_envelope", "fields": fields}


# The enriched envelope's source block, as CockroachDB's Avro has it: every field a nullable
# union, null where the options or the source do not give it.
SOURCE_FIELDS: tuple[tuple[str, Any], ...] = source_block.avro_fields()


def _optional(name: str, avro_type: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None}


def _referred(avro_type: Any, defined: set[str]) -> Any:
    """``avro_type`` with each named type defined earlier (``defined``) referred to by name.

    Avro allows a name one definition: the second copy of a row record (enriched's
    ``before`` and ``after``) names the enums, fixed and records of its columns instead.
    """
    if isinstance(avro_type, list):
        return [_referred(t, defined) for t in avro_type]
    if not isinstance(avro_type, dict):
        return avro_type
    kind = avro_type.get("type")
    if kind in {"record", "enum", "fixed"}:
        name = avro_type["name"]
        if "namespace" in avro_type and "." not in name:
            name = f"{avro_type['namespace']}.{name}"
        if name in defined:
            return name
        defined.add(name)
    if kind == "record":
        fields = [{**f, "type": _referred(f["type"], defined)} for f in avro_type["fields"]]
        return {**avro_type, "fields": fields}
    if kind in {"array", "map"}:
        member = "items" if kind == "array" else "values"
        return {**avro_type, member: _referred(avro_type[member], defined)}
    return avro_type


def enriched_schema(table: TableSchema, options: Any) -> Schema:
    """CockroachDB's ``enriched`` value record ``<table>_envelope``, in its field order.

    ``before`` (``diff``: record ``<table>_before``), ``after`` (record ``<table>``),
    ``source`` (``enriched_properties: [source]``: record ``source``), ``key``
    (``key_in_value``), ``ts_ns`` (long) and ``op`` (string): each nullable, null default.
    """
    row, defined = row_schema(table), set[str]()
    fields: list[dict[str, Any]] = []
    if options.diff:
        before = _referred({**row, "name": f"{table.name}_before"}, defined)
        fields.append(_optional("before", before))
    fields.append(_optional("after", _referred(row, defined)))
    if "source" in options.enriched_properties:
        source = [_optional(name, kind) for name, kind in SOURCE_FIELDS]
        fields.append(_optional("source", {"type": "record", "name": "source", "fields": source}))
    if options.key_in_value:
        fields.append(_optional("key", _referred(key_schema(table), defined)))
    fields += [_optional("ts_ns", "long"), _optional("op", "string")]
    return {"type": "record", "name": f"{table.name}_envelope", "fields": fields}


def value_schema(table: TableSchema, options: Any) -> Schema:
    """The value record of the options' envelope (``enriched``, or Highwater's wrapped)."""
    if getattr(options, "envelope", "wrapped") == "enriched":
        return enriched_schema(table, options)
    return envelope_schema(table, options)


def resolved_schema(table: TableSchema) -> Schema:
    """The resolved marker: ``<table>_envelope`` with one field, ``resolved``."""
    return marker_schema(table.name)


def marker_schema(name: str, namespace: str | None = None) -> Schema:
    """The resolved marker of table ``name``: all it needs of the table is the name."""
    return in_namespace(
        {
            "type": "record",
            "name": f"{name}_envelope",
            "fields": [{"name": "resolved", "type": ["null", "string"], "default": None}],
        },
        namespace,
    )


def in_namespace(schema: Schema, namespace: str | None) -> Schema:
    """``schema`` with its top record in ``namespace`` (``avro_schema_prefix``; None: none).

    The records defined inside it take the same namespace (Avro's rule for a name without
    dots), so the short names that refer to them still resolve.
    """
    if namespace is None:
        return schema
    return {"type": schema["type"], "name": schema["name"], "namespace": namespace} | schema


def single_object_fingerprint(schema: Mapping[str, Any]) -> bytes:
    """The 8-byte CRC-64-AVRO fingerprint of the schema's canonical form (little-endian)."""
    return bytes.fromhex(fingerprint(to_parsing_canonical_form(dict(schema)), "CRC-64-AVRO"))


@dataclass(frozen=True)
class OutputSchemas:
    """The three schemas of one output topic."""

    key: Schema
    value: Schema
    resolved: Schema
    # the primary key's record, where the records are keyed by another column (``key_column``):
    # the value's ``key`` (``key_in_value``) is still this one
    primary: Schema | None = None

    @classmethod
    def of(cls, table: TableSchema, options: Any) -> OutputSchemas:
        """Derive them from the declared table, in ``options.avro_schema_prefix``'s namespace.

        Under ``options.key_column`` the key record is that column's; under
        ``options.headers_json_column_name`` that column is not in the row record.
        """
        namespace = getattr(options, "avro_schema_prefix", None)
        key_column = getattr(options, "key_column", None)
        headers = getattr(options, "headers_json_column_name", None)
        if headers is not None:  # the column whose object is the headers: not in the value
            table = table.without(headers)
        return cls(
            in_namespace(key_schema(table, key_column), namespace),
            in_namespace(value_schema(table, options), namespace),
            in_namespace(resolved_schema(table), namespace),
            None if key_column is None else in_namespace(key_schema(table), namespace),
        )
