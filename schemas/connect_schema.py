"""The Kafka Connect JSON schema of a declared table: enriched's ``schema`` property, in JSON.

CockroachDB's ``enriched_properties = schema`` writes each value as ``{"payload": <the
envelope>, "schema": <its schema>}`` and each key as ``{"payload": <the key object>, "schema":
…}``, the schemas Kafka Connect's ``JsonConverter`` form (Debezium's shape). Here they are
derived once per table from its declared Avro record (``table_schema``), each column's type:

================================================  ===============================================
Avro                                               Connect
================================================  ===============================================
``string``, ``enum``, ``uuid``                     ``string``
``long``, ``int``                                  ``int64``, ``int32``
``double``, ``float``, ``boolean``                 ``double``, ``float``, ``boolean``
``bytes``, ``fixed``                               ``bytes``
``decimal(p, s)``                                  ``double`` named ``decimal``, its precision and
                                                   scale as parameters (CockroachDB's: a number)
``date``, ``time-*``, ``timestamp-*``              ``string`` named ``date``, ``time``,
                                                   ``timestamp``
``array``, ``map``, ``record``                     ``array`` (items), ``map`` (keys, values),
                                                   ``struct`` (fields)
================================================  ===============================================

A column is ``optional`` where its type is a union with ``null``. Each node's members are in
alphabetical order, as CockroachDB prints its JSON. Two departures from CockroachDB, so that
Kafka Connect's own ``JsonConverter`` reads every record (tests/integration/test_enriched.py):
floating types are Connect's ``double`` and ``float`` (CockroachDB writes ``float64``, which
the converter refuses: "Unknown schema type"), and ``after`` is optional (a delete's is null;
CockroachDB marks it not optional).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import source_block
from .errors import SchemaError
from .tables import TableSchema

Node = dict[str, Any]

_PLAIN = {
    "string": "string",
    "enum": "string",
    "long": "int64",
    "int": "int32",
    "double": "double",
    "float": "float",
    "boolean": "boolean",
    "bytes": "bytes",
    "fixed": "bytes",
}
_NAMED_TEXT = {  # logical types written as text, by the name CockroachDB gives them
    "date": "date",
    "time-millis": "time",
    "time-micros": "time",
    "timestamp-millis": "timestamp",
    "timestamp-micros": "timestamp",
    "local-timestamp-millis": "timestamp",
    "local-timestamp-micros": "timestamp",
    "uuid": None,
}
# The enriched source block: each field's type, and whether it may be null.
SOURCE: tuple[tuple[str, Node, bool], ...] = source_block.connect_fields()


def _sorted(node: Node) -> Node:
    return {k: node[k] for k in sorted(node)}


def node(avro: Any, named: dict[str, Any], *, optional: bool = False) -> Node:
    """The Connect schema of an Avro type (``named``: the named types defined so far).

    Connect has no references: a named type used again is written out again.
    """
    if isinstance(avro, list):
        rest = [t for t in avro if t != "null"]
        if len(rest) != 1:
            raise SchemaError(f"a union of {rest} has no Kafka Connect schema")
        return node(rest[0], named, optional=optional or len(rest) < len(avro))
    if isinstance(avro, str):
        avro = named.get(avro, {"type": avro})
    if isinstance(avro.get("type"), (dict, list)):  # {"type": {...}}: the inner type
        return node(avro["type"], named, optional=optional)
    return _sorted({"optional": optional, **_body(avro, named)})


def _body(avro: dict[str, Any], named: dict[str, Any]) -> Node:
    """A type's schema but ``optional``."""
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical == "decimal":
        parameters = {"precision": str(avro.get("precision")), "scale": str(avro.get("scale", 0))}
        return {"name": "decimal", "parameters": parameters, "type": "double"}
    if logical in _NAMED_TEXT:
        name = _NAMED_TEXT[logical]
        return {"type": "string"} if name is None else {"name": name, "type": "string"}
    if kind in {"record", "enum", "fixed"}:
        named[avro["name"]] = avro
    if kind == "record":
        fields = [field(f["name"], f["type"], named) for f in avro["fields"]]
        return {"fields": fields, "name": avro["name"], "type": "struct"}
    if kind == "array":
        return {"items": node(avro["items"], named), "type": "array"}
    if kind == "map":
        keys = {"optional": False, "type": "string"}
        return {"keys": keys, "type": "map", "values": node(avro["values"], named)}
    if kind in _PLAIN:
        return {"type": _PLAIN[kind]}
    raise SchemaError(f"the Avro type {avro!r} has no Kafka Connect schema")


def field(name: str, avro: Any, named: dict[str, Any]) -> Node:
    """A struct's field: its name beside its type's schema."""
    return _sorted({"field": name, **node(avro, named)})


def _struct(name: str, fields: Sequence[Node], *, optional: bool, called: str | None) -> Node:
    out = {"fields": list(fields), "name": name, "optional": optional, "type": "struct"}
    return _sorted(out | ({} if called is None else {"field": called}))


def key_schema(table: TableSchema, names: Sequence[str]) -> Node:
    """The key object's schema: ``<table>.key``, the named columns (the primary key's)."""
    named: dict[str, Any] = {}
    types = {f["name"]: node(f["type"], named) for f in table.record["fields"]}
    fields = [_sorted({"field": name, **types[name]}) for name in names]
    return _struct(f"{table.name}.key", fields, optional=False, called=None)


def enriched_schema(table: TableSchema, options: Any) -> Node:
    """The enriched value's schema, its fields in CockroachDB's order.

    ``before`` (``diff``), ``after``, ``source`` (``enriched_properties: [source]``), ``key``
    (``key_in_value``: the primary key's object), ``ts_ns``, ``op``.
    """
    named: dict[str, Any] = {}
    columns = [field(f["name"], f["type"], named) for f in table.record["fields"]]
    fields = []
    if options.diff:
        fields.append(
            _struct(f"{table.name}.before.value", columns, optional=True, called="before")
        )
    fields.append(_struct(f"{table.name}.after.value", columns, optional=True, called="after"))
    if "source" in options.enriched_properties:
        source = [_sorted({"field": n, **t, "optional": o}) for n, t, o in SOURCE]
        fields.append(_struct("highwater.source", source, optional=True, called="source"))
    if options.key_in_value:
        key = key_schema(table, table.primary_key)
        fields.append(_sorted({**key, "field": "key"}))
    fields += [
        {"field": "ts_ns", "optional": False, "type": "int64"},
        {"field": "op", "optional": False, "type": "string"},
    ]
    return _struct("highwater.envelope", fields, optional=False, called=None)
