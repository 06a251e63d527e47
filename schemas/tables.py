"""Declared table schemas: a source table's columns (an Avro record schema) and its key.

A source may declare its table's schema in the config (``sources[].table_schema``: inline, or a
path to an ``.avsc`` file) with ``primary_key``. Spark-free: the Avro encoders derive their
key and envelope schemas from it, and CDC queries (``select``/``where``) type the row's
columns with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
from fastavro.schema import SchemaParseException


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
