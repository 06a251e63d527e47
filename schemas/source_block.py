"""The enriched envelope's source block (``encoders/enriched.py``): its fields, in order.

One table for every schema that describes the block: Avro's (``avro.py``, where each field
is a nullable union, as CockroachDB's Avro has it) and Kafka Connect's (``connect_schema.py``,
where a field is optional only when the block can hold null there: an initial scan's row has
no source record, a native source no database position).
"""

from __future__ import annotations

from typing import Any

# (name, kind, may be null); kind: string, int, long, or an array of strings or longs
FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("changefeed_sink", "string", False),
    ("db_position", "longs", True),
    ("job_id", "string", False),
    ("mvcc_timestamp", "string", True),
    ("origin", "string", False),
    ("primary_keys", "strings", False),
    ("source_offset", "long", True),
    ("source_partition", "int", True),
    ("source_topic", "string", True),
    ("table_name", "string", False),
    ("transaction_id", "string", True),
    ("ts_hlc", "string", True),
    ("ts_ns", "long", True),
)

_AVRO: dict[str, Any] = {
    "string": "string",
    "int": "int",
    "long": "long",
    "strings": {"type": "array", "items": "string"},
    "longs": {"type": "array", "items": "long"},
}
_CONNECT: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "int": {"type": "int32"},
    "long": {"type": "int64"},
    "strings": {"items": {"optional": False, "type": "string"}, "type": "array"},
    "longs": {"items": {"optional": False, "type": "int64"}, "type": "array"},
}


def avro_fields() -> tuple[tuple[str, Any], ...]:
    """Each field's name and Avro type (the schema makes each a nullable union)."""
    return tuple((name, _AVRO[kind]) for name, kind, _ in FIELDS)


def connect_fields() -> tuple[tuple[str, dict[str, Any], bool], ...]:
    """Each field's name, Kafka Connect type, and whether it is optional."""
    return tuple((name, _CONNECT[kind], null) for name, kind, null in FIELDS)
