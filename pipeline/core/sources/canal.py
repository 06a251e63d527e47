"""Format ``canal-json``: TiCDC's Canal-JSON with ``enable-tidb-extension=true``.

One record is one event, its Kafka key unused (TiCDC sends none)::

    {"id": 0, "database": "shop", "table": "orders", "pkNames": ["id"], "isDdl": false,
     "type": "UPDATE", "es": 1639633141221, "ts": 1639633142920, "sql": "",
     "sqlType": {…}, "mysqlType": {"id": "int", "amount": "decimal(12,2)", …},
     "data": [{"id": "1", "amount": "10.50", …}], "old": [{"amount": "9.99"}],
     "_tidb": {"commitTs": 429918007904698368}}

* ``data`` holds one row per entry (Canal batches several rows of a statement): one change
  each, in order, all at the event's commit time. ``INSERT``: ``after`` = the row;
  ``UPDATE``: ``after`` = the row, ``before`` = the row with ``old``'s columns over it (Canal
  lists only the changed columns there, TiCDC all of them: both read the same); ``DELETE``:
  ``before`` = the row, ``after`` null.
* the key is the ``pkNames`` columns' values, in that order;
* values are text in Canal-JSON; ``mysqlType`` types them: integers, ``decimal``, ``float``,
  ``double`` and ``bit`` become JSON numbers with exactly the text TiCDC wrote, the rest
  (strings, temporal types, ``json``, binary as TiCDC writes it) stay text; null stays null;
* the commit time is ``_tidb.commitTs``, a TSO (milliseconds << 18 | logical), as the HLC
  ``<milliseconds * 1000000>.<logical>``: the order of TSOs is kept;
* ``TIDB_WATERMARK`` events (``_tidb.watermarkTs``, sent to every partition) are the markers;
* DDL events (``isDdl``) carry no row: skipped (their SQL is in the source topic);
* ``mysqlType`` also gives the output's column types where no ``table_schema`` is declared,
  and where a column is added (``schema_change_policy: evolve``): :func:`connect_type`.
"""

from __future__ import annotations

import re
from typing import Any

from schemas.connect import DECIMAL
from schemas.hlc import Hlc

from .base import (
    BadRecord,
    Change,
    Marker,
    Op,
    Rows,
    SourceShape,
    exact_flags,
    exact_number,
    json_object,
    no_times,
)

WATERMARK = "TIDB_WATERMARK"
_OPS: dict[str, Op] = {"INSERT": "insert", "UPDATE": "update", "DELETE": "delete"}
_LOGICAL_BITS = 18
_NUMERIC = re.compile(
    r"(?:tinyint|smallint|mediumint|int|integer|bigint|decimal|numeric|float|double|real|bit|year)\b"
)
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def tso_time(tso: Any, field: str) -> Hlc:
    """A TiDB TSO as an HLC: its physical milliseconds in nanoseconds, its logical part."""
    if type(tso) is not int or tso < 0:
        raise BadRecord(f"{field!r} is not a TSO (a non-negative integer)")
    return Hlc((tso >> _LOGICAL_BITS) * 1_000_000, tso & ((1 << _LOGICAL_BITS) - 1))


class CanalJsonAdapter:
    """Format ``canal-json`` (see the module's description)."""

    in_band_markers = True

    times = staticmethod(no_times)
    exact = staticmethod(exact_flags)

    def decode(
        self, key: bytes | None, value: bytes | None, exact: bool | None = None
    ) -> Change | Marker | Rows | None:
        """One event: its rows, a marker (a watermark), or None (DDL)."""
        event = json_object(value, exact)
        kind = event.get("type")
        tidb = event.get("_tidb")
        if type(tidb) is not dict:
            raise BadRecord(
                "no '_tidb' object: TiCDC's enable-tidb-extension=true gives the commit "
                "times and watermarks Highwater needs"
            )
        if kind == WATERMARK:
            return Marker(tso_time(tidb.get("watermarkTs"), "_tidb.watermarkTs"))
        if event.get("isDdl") is True:
            return None
        op = _OPS.get(kind)  # type: ignore[arg-type]
        if op is None:
            raise BadRecord(f"'type' {kind!r} is not INSERT, UPDATE, DELETE or {WATERMARK}")
        ts = tso_time(tidb.get("commitTs"), "_tidb.commitTs")
        rows, old = event.get("data"), event.get("old")
        if type(rows) is not list or not rows:
            raise BadRecord("'data' is not a non-empty array of rows")
        if op == "update" and (type(old) is not list or len(old) != len(rows)):
            raise BadRecord("an UPDATE's 'old' is not an array beside 'data'")
        pk = event.get("pkNames")
        if type(pk) is not list or not pk:
            raise BadRecord("no 'pkNames': the table needs a primary key to be keyed")
        typed = _typer(event.get("mysqlType"))
        changes = []
        for i, raw in enumerate(rows):
            row = typed(raw, "data")
            if op == "update":
                before = {**row, **typed(old[i], "old")}  # type: ignore[index]
                after: dict[str, Any] | None = row
            elif op == "delete":
                before, after = row, None
            else:
                before, after = None, row
            try:
                key_values = [row[name] for name in pk]
            except (KeyError, TypeError):
                raise BadRecord(f"a row lacks its primary key columns {pk}") from None
            changes.append(Change(key_values, after, before, op, ts))
        return changes[0] if len(changes) == 1 else tuple(changes)

    def key(self, key: bytes, exact: bool | None = None) -> list[Any]:
        """Not used: canal-json records are keyed by their values."""
        raise BadRecord("canal-json keys rows by their values (pkNames), not the record key")

    def change(
        self,
        key_values: list[Any],
        value: bytes | None,
        exact: bool | None = None,
        key: bytes | None = None,
    ) -> Change | None:
        """Not used: see :meth:`key`."""
        raise BadRecord("canal-json keys rows by their values (pkNames), not the record key")

    def marker(self, value: bytes | None) -> Marker | None:
        """A record read for its marker: a watermark, or None."""
        item = self.decode(None, value)
        return item if isinstance(item, Marker) else None

    def key_names(self, key: bytes | None, value: bytes | None) -> tuple[str, ...] | None:
        """An event's ``pkNames``."""
        pk = json_object(value).get("pkNames")
        return tuple(pk) if type(pk) is list and pk and all(type(n) is str for n in pk) else None

    def shape(self, key: bytes | None, value: bytes | None) -> SourceShape | None:
        """A row event's columns, ``mysqlType`` as Connect types, keyed by ``pkNames``.

        None for a watermark or a DDL event.
        """
        event = json_object(value)
        types, pk = event.get("mysqlType"), event.get("pkNames")
        if event.get("isDdl") is True or event.get("type") not in _OPS:
            return None
        if type(types) is not dict or type(pk) is not list or not pk:
            raise BadRecord("no 'mysqlType' and 'pkNames': the columns' types are needed")
        columns = {
            name: {**connect_type(str(kind)), "field": name, "optional": name not in pk}
            for name, kind in types.items()
        }
        return SourceShape(columns, tuple(pk))


def _typer(mysql_types: Any) -> Any:
    """A function typing one row's text values by ``mysqlType``."""
    if type(mysql_types) is not dict:
        raise BadRecord("no 'mysqlType' object: the columns' types are needed")
    numeric = {name for name, kind in mysql_types.items() if _is_numeric(kind)}

    def typed(row: Any, field: str) -> dict[str, Any]:
        if type(row) is not dict:
            raise BadRecord(f"a row of {field!r} is not an object")
        out = {}
        for name, text in row.items():
            if text is None or name not in numeric:
                out[name] = text
            elif type(text) is str and _JSON_NUMBER.fullmatch(text):
                out[name] = exact_number(text)
            else:
                raise BadRecord(f"column {name!r} of type {mysql_types[name]!r}: {text!r}")
        return out

    return typed


_DECIMAL_TYPE = re.compile(r"(?:decimal|numeric)(?:\((\d+)(?:,\s*(\d+))?\))?")
_CONNECT = {  # a MySQL type's first word -> the Connect type of the values read from it
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "year"), "int32"),
    **dict.fromkeys(("bigint", "bit"), "int64"),
    "float": "float32",
    **dict.fromkeys(("double", "real"), "float64"),
}


def connect_type(kind: str) -> dict[str, Any]:
    """A ``mysqlType`` as a Kafka Connect column type (``schemas/connect.py`` maps those).

    Integers by size (``unsigned`` ones one size up; ``bigint unsigned`` a decimal of 20
    digits), ``decimal(p,s)`` (MySQL's default ``decimal(10,0)``), ``float``, ``double``,
    ``date``; everything else is the text TiCDC wrote (``datetime``, ``time``, ``json``,
    ``char``, ``enum``, binary columns).
    """
    lowered = kind.lower().strip()
    word = re.split(r"[\s(]", lowered, maxsplit=1)[0]
    unsigned = "unsigned" in lowered
    decimal = _DECIMAL_TYPE.match(lowered)
    if decimal is not None or (word == "bigint" and unsigned):
        precision = "20" if decimal is None else decimal.group(1) or "10"
        scale = "0" if decimal is None else decimal.group(2) or "0"
        parameters = {"scale": scale, "connect.decimal.precision": precision}
        return {"type": "bytes", "name": DECIMAL, "parameters": parameters}
    if word == "date":
        return {"type": "int32", "name": "io.debezium.time.Date"}
    connect = _CONNECT.get(word, "string")
    if unsigned and connect == "int32" and word in ("int", "integer"):
        connect = "int64"
    return {"type": connect}


def _is_numeric(kind: Any) -> bool:
    return type(kind) is str and _NUMERIC.match(kind.lower()) is not None
