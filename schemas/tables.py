"""Declared table schemas: a source table's columns (an Avro record schema) and its key.

A source may declare its table's schema in the config (``sources[].table_schema``: inline, or a
path to an ``.avsc`` file) with ``primary_key``. Spark-free: the Avro encoders derive their
key and envelope schemas from it, and CDC queries (``select``/``where``) type the row's
columns with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cached_property
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException

from .jsontext import Number


@dataclass(frozen=True)
class TableSchema:
    """A table's Avro record schema and primary key, validated."""

    record: Mapping[str, Any]
    primary_key: tuple[str, ...]

    @classmethod
    def of(cls, record: Mapping[str, Any], primary_key: Sequence[str]) -> TableSchema:
        """Validate ``record`` (an Avro record schema) and ``primary_key`` (its column names).

        Raises ``ValueError`` with a message fit for a config error.
        """
        if not isinstance(record, Mapping) or record.get("type") != "record":
            raise ValueError("must be an Avro record schema ({'type': 'record', …})")
        try:
            fastavro.parse_schema(dict(record))
        except (SchemaParseException, ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"is not a valid Avro schema: {type(exc).__name__}: {exc}") from None
        names = [f["name"] for f in record["fields"]]
        if not primary_key:
            raise ValueError("primary_key must name at least one column")
        missing = [k for k in primary_key if k not in names]
        if missing:
            raise ValueError(f"primary_key names columns the schema lacks: {', '.join(missing)}")
        return cls(record, tuple(primary_key))

    @property
    def name(self) -> str:
        """The record's name."""
        return str(self.record["name"])

    @property
    def columns(self) -> tuple[str, ...]:
        """The column names, in the record's order."""
        return tuple(f["name"] for f in self.record["fields"])

    def with_columns(self, fields: Sequence[Mapping[str, Any]]) -> TableSchema:
        """The schema with ``fields`` (Avro record fields) added after its own columns.

        Each becomes optional with a null default in the output (``schemas/avro.py``), so the
        new version reads what the old one wrote and the other way round.
        """
        taken = [f["name"] for f in fields if f["name"] in self.columns]
        if taken:
            raise ValueError(f"column(s) {', '.join(taken)} already in table {self.name!r}")
        record = {**self.record, "fields": [*self.record["fields"], *map(dict, fields)]}
        return TableSchema.of(record, self.primary_key)

    def without(self, column: str) -> TableSchema:
        """The schema without ``column`` (itself if it has none); a key column stays."""
        if column not in self.columns or column in self.primary_key:
            return self
        fields = [f for f in self.record["fields"] if f["name"] != column]
        return TableSchema.of({**self.record, "fields": fields}, self.primary_key)

    @cached_property
    def _decimal_columns(self) -> tuple[tuple[str, Any], ...]:
        """(name, type) of the columns whose type holds a decimal somewhere."""
        return tuple(
            (f["name"], f["type"]) for f in self.record["fields"] if '"decimal"' in json.dumps(f)
        )

    def misfit(self, row: Mapping[str, Any]) -> str | None:
        """Why ``row`` holds a decimal its declared column cannot hold exactly, or None.

        ``row`` is a JSON object, numbers as ``schemas/jsontext.py`` reads them. A decimal fits
        ``decimal(p, s)`` when it needs no more than ``s`` fraction digits and ``p - s``
        integer digits (trailing zeros do not count): what a reader of that type holds
        without rounding. Other types are not judged here.
        """
        for name, avro in self._decimal_columns:
            if name in row:
                reason = _misfit(avro, row[name], name)
                if reason is not None:
                    return reason
        return None


def _misfit(avro: Any, value: Any, path: str) -> str | None:
    """The first decimal in ``value`` that its type ``avro`` cannot hold exactly."""
    if value is None or isinstance(avro, str):
        return None
    if isinstance(avro, dict) and avro.get("logicalType") == "decimal":
        return _decimal_misfit(value, int(avro["precision"]), int(avro.get("scale", 0)), path)
    for inner, item, where in _inside(avro, value, path):
        reason = _misfit(inner, item, where)
        if reason is not None:
            return reason
    return None


def _inside(avro: Any, value: Any, path: str) -> Iterator[tuple[Any, Any, str]]:
    """(type, value, path) of what ``value`` holds, as its type ``avro`` sees it."""
    if isinstance(avro, list):  # a union: each branch that could describe it
        yield from ((branch, value, path) for branch in avro)
        return
    kind = avro.get("type")
    if kind == "record" and type(value) is dict:
        for field in avro["fields"]:
            if field["name"] in value:
                yield field["type"], value[field["name"]], f"{path}.{field['name']}"
    elif kind == "array" and type(value) is list:
        yield from ((avro["items"], item, f"{path}[{i}]") for i, item in enumerate(value))
    elif kind == "map" and type(value) is dict:
        yield from ((avro["values"], item, f"{path}[{k!r}]") for k, item in value.items())
    elif isinstance(kind, list | dict):
        yield kind, value, path


def _decimal_misfit(value: Any, precision: int, scale: int, path: str) -> str | None:
    if type(value) is bool or not isinstance(value, int | float | str | Number):
        return None  # not a number: the reader of the declared type refuses it itself
    text = value.text if type(value) is Number else str(value)  # a float's str is its repr
    try:
        number = Decimal(text)
    except InvalidOperation:
        return None  # not a decimal's text: the same
    if number.is_finite():
        if not number:
            return None  # zero fits every decimal
        _, digits, exponent = number.as_tuple()
        assert isinstance(exponent, int)  # noqa: S101 - finite
        significant = len(digits)
        while digits[significant - 1] == 0:  # trailing zeros say nothing of the value
            significant -= 1
            exponent += 1
        fraction = max(0, -exponent)
        integer = max(0, significant + exponent)
        if fraction <= scale and integer <= precision - scale:
            return None
    return f"column {path!r}: {text} does not fit decimal({precision},{scale}) without rounding"
