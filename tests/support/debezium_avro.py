"""Debezium's events as its AvroConverter writes them (Confluent's wire format), for tests.

The Connect schema in Avro: semantic types in ``connect.name``/``connect.parameters``,
Connect's Decimal and Timestamp with Avro logical types too, ``Value`` defined in ``before``
and named again in ``after``; the columns are those of the JSON tests' table
(``tests/unit/test_sources_debezium.py``).
"""

from __future__ import annotations

from typing import Any


def avro_column(name: str, kind: Any, semantic: str | None = None, **extra: Any) -> Any:
    spec: dict[str, Any] = {"type": kind, **extra}
    if semantic is not None:
        spec["connect.name"] = semantic
    return {"name": name, "type": ["null", spec], "default": None}


AVRO_COLUMNS = [
    {"name": "id", "type": ["null", "int"], "default": None},
    avro_column(
        "amount",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        logicalType="decimal",
        precision=10,
        scale=2,
        **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}},
    ),
    {
        "name": "ratio",
        "type": [
            "null",
            {
                "type": "record",
                "name": "VariableScaleDecimal",
                "namespace": "io.debezium.data",
                "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
                "connect.name": "io.debezium.data.VariableScaleDecimal",
            },
        ],
        "default": None,
    },
    avro_column("day", "int", "io.debezium.time.Date"),
    avro_column("at", "long", "io.debezium.time.MicroTimestamp"),
    avro_column(
        "at_ms", "long", "org.apache.kafka.connect.data.Timestamp", logicalType="timestamp-millis"
    ),
    avro_column("clock", "long", "io.debezium.time.MicroTime"),
    avro_column("zoned", "string", "io.debezium.time.ZonedTimestamp"),
    {"name": "note", "type": ["null", "string"], "default": None},
]


def avro_envelope(columns: list[Any], namespace: str = "pg.public.orders") -> dict[str, Any]:
    """A change event's value schema, its row images of ``columns``."""
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": namespace,
        "fields": [
            {
                "name": "before",
                "type": ["null", {"type": "record", "name": "Value", "fields": columns}],
                "default": None,
            },
            {"name": "after", "type": ["null", "Value"], "default": None},
            {
                "name": "source",
                "type": {
                    "type": "record",
                    "name": "Source",
                    "namespace": "io.debezium.connector.postgresql",
                    "fields": [
                        {"name": "connector", "type": "string"},
                        {"name": "ts_ms", "type": "long"},
                        {"name": "ts_us", "type": ["null", "long"], "default": None},
                        {"name": "ts_ns", "type": ["null", "long"], "default": None},
                        {"name": "lsn", "type": ["null", "long"], "default": None},
                        {"name": "sequence", "type": ["null", "string"], "default": None},
                    ],
                },
            },
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {
                "name": "transaction",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "block",
                        "namespace": "event",
                        "fields": [
                            {"name": "id", "type": "string"},
                            {"name": "total_order", "type": "long"},
                            {"name": "data_collection_order", "type": "long"},
                        ],
                    },
                ],
                "default": None,
            },
        ],
    }


AVRO_VALUE = avro_envelope(AVRO_COLUMNS)
AVRO_KEY = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}


TRANSACTION_EVENT = {  # Debezium's transaction metadata value, as AvroConverter writes it
    "type": "record",
    "name": "TransactionMetadataValue",
    "namespace": "io.debezium.connector.common",
    "fields": [
        {"name": "status", "type": "string"},
        {"name": "id", "type": "string"},
        {"name": "event_count", "type": ["null", "long"], "default": None},
        {
            "name": "data_collections",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "ConnectDefault",
                        "namespace": "io.confluent.connect.avro",
                        "fields": [
                            {"name": "data_collection", "type": "string"},
                            {"name": "event_count", "type": "long"},
                        ],
                    },
                },
            ],
            "default": None,
        },
        {"name": "ts_ms", "type": "long"},
    ],
}
