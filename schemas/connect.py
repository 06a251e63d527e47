"""Kafka Connect column schemas as the Avro types of Highwater's output (Spark-free).

A Debezium source with schemas (``JsonConverter`` with ``schemas.enable``, or ``AvroConverter``
read as ``pipeline/core/sources/wire.py`` reads it) says each column's type in its record:
``{"type": "int64", "optional": true, "field": "vip", "name": <semantic type>,
"parameters": {…}}``. :func:`avro_type` maps one column to the Avro type that holds the
values the Debezium adapter reads from it, exactly, or says why none does (the column's
values would have to be approximated or reshaped): the schema-change policy ``evolve`` adds
columns so (``pipeline/core/evolution/evolution.py``).

=================================================  =============================================
Connect                                             Avro
=================================================  =============================================
``int8``, ``int16``, ``int32``                      ``int``
``int64``                                           ``long``
``float32``, ``float64``, ``boolean``, ``string``   ``float``, ``double``, ``boolean``, ``string``
``Decimal`` (scale, ``connect.decimal.precision``)  ``bytes`` ``decimal(precision, scale)``
``Date`` (Debezium's, Connect's)                    ``int`` ``date``
``Timestamp`` (milliseconds)                        ``long`` ``timestamp-millis``
``MicroTimestamp``                                  ``long`` ``timestamp-micros``
``ZonedTimestamp``, ``Json``, ``Uuid``, ``Enum``…   ``string`` (a semantic type over a string)
=================================================  =============================================

Refused: a ``Decimal`` without its precision, ``VariableScaleDecimal`` (no fixed scale),
nanosecond timestamps and times of day (read as text no Avro logical type holds as such),
``bytes``, structs, arrays and maps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .tables import TableSchema

_PLAIN = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float32": "float",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
}
_LOGICAL = {
    "io.debezium.time.Date": ("int", "date"),
    "org.apache.kafka.connect.data.Date": ("int", "date"),
    "io.debezium.time.Timestamp": ("long", "timestamp-millis"),
    "org.apache.kafka.connect.data.Timestamp": ("long", "timestamp-millis"),
    "io.debezium.time.MicroTimestamp": ("long", "timestamp-micros"),
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


class NoAvroType(ValueError):
    """A column whose values no Avro type holds exactly, as Highwater reads them."""


def avro_type(column: Mapping[str, Any]) -> Any:
    """The Avro type of a Connect column schema (see the module's table).

    Raises :class:`NoAvroType` naming the column and why.
    """
    name, kind, semantic = column.get("field"), column.get("type"), column.get("name")
    if semantic == DECIMAL:
        parameters = column.get("parameters") or {}
        precision = parameters.get("connect.decimal.precision")
        if precision is None:
            raise NoAvroType(f"column {name!r}: a decimal without a declared precision")
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": int(precision),
            "scale": int(parameters.get("scale", 0)),
        }
    if semantic in _LOGICAL:
        base, logical = _LOGICAL[semantic]
        return {"type": base, "logicalType": logical}
    if kind == "string":  # text, whatever it means (zoned timestamps, JSON, UUIDs, enums)
        return "string"
    if semantic is None and isinstance(kind, str) and kind in _PLAIN:
        return _PLAIN[kind]
    what = semantic or kind
    raise NoAvroType(f"column {name!r}: no Avro type holds {what} values exactly as read")


def column_fields(
    columns: Mapping[str, Mapping[str, Any]], names: list[str]
) -> list[dict[str, Any]]:
    """Avro record fields of the named Connect columns, in the order the source lists them.

    Raises :class:`NoAvroType` for a column named but not described, or not mappable.
    """
    missing = [n for n in names if n not in columns]
    if missing:
        raise NoAvroType(f"the source's schema does not describe column(s) {', '.join(missing)}")
    wanted = set(names)
    return [{"name": n, "type": avro_type(c)} for n, c in columns.items() if n in wanted]


def derived_table(
    name: str, columns: Mapping[str, Mapping[str, Any]], key: Sequence[str]
) -> TableSchema:
    """A table's schema from its source's: every column (optional ones nullable), its key.

    Raises :class:`NoAvroType` naming a column no Avro type holds, or why the record is not
    a valid Avro schema (a column name Avro does not allow, say).
    """
    fields = []
    for field in column_fields(columns, list(columns)):
        optional = bool(columns[field["name"]].get("optional"))
        fields.append({**field, "type": ["null", field["type"]]} if optional else field)
    try:
        return TableSchema.of({"type": "record", "name": name, "fields": fields}, list(key))
    except ValueError as exc:
        raise NoAvroType(f"table {name!r}: {exc}") from None


def type_changes(record: Mapping[str, Any], columns: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The columns of Avro ``record`` whose source type maps to another Avro type than theirs.

    Each as ``"amount: decimal(30,6) at the source, decimal(24,4) in the output"``. A column
    the source does not describe, or whose type maps to none, says nothing here.
    """
    out = []
    for field in record["fields"]:
        column = columns.get(field["name"])
        if column is None:
            continue
        try:
            source = avro_type(column)
        except NoAvroType:
            continue
        declared = non_null(field["type"])
        if _shown(source) != _shown(declared):
            out.append(
                f"{field['name']}: {_shown(source)} at the source, {_shown(declared)} in the output"
            )
    return out


def key_change(declared: Sequence[str], source: Sequence[str]) -> str | None:
    """How a table's key at the source differs from its output's (None: it does not).

    A source that names no key columns (a keyless table) says nothing here.
    """
    if not source or tuple(source) == tuple(declared):
        return None
    return f"key ({', '.join(source)}) at the source, ({', '.join(declared)}) in the output"


def non_null(avro: Any) -> Any:
    """The non-null branch of an optional Avro type (the type itself if it is not one)."""
    if isinstance(avro, list):
        rest = [t for t in avro if t != "null"]
        return rest[0] if len(rest) == 1 else avro
    return avro


def _shown(avro: Any) -> str:
    """An Avro type as a person reads it: ``long``, ``decimal(24,4)``, ``timestamp-micros``."""
    if isinstance(avro, Mapping):
        logical = avro.get("logicalType")
        if logical == "decimal":
            return f"decimal({avro.get('precision')},{avro.get('scale', 0)})"
        return str(logical or _shown(avro.get("type")))
    if isinstance(avro, list):
        return " | ".join(_shown(t) for t in avro)
    return str(avro)
