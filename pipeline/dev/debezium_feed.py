"""A Debezium PostgreSQL change topic as its connector writes it, for the benchmark.

``JsonConverter`` with ``schemas.enable=true`` and ``decimal.handling.mode=precise`` (a
NUMERIC as base64 two's-complement bytes with its scale in the schema), a composite key, a
``MicroTimestamp``, a ``ZonedTimestamp``, text with escapes and non-ASCII characters, the
``source`` block with ``sequence`` and ``lsn``, and transaction metadata: the shape of the
events ``tests/integration/test_debezium.py`` reads from a real connector, ~3.5 KB each (the
schema is most of it). Generated, not captured, so a million of them take seconds; the
changefeed reads them with the same adapter as a real connector's.
"""

from __future__ import annotations

import base64
import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from pipeline.core.sources.wire import without_logical_types
from sinks.admin import ensure_topics

SERVER = "bench"
# (column, Connect type, semantic name or None, parameters or None, optional)
COLUMNS: tuple[tuple[str, str, str | None, dict[str, str] | None, bool], ...] = (
    ("region", "string", None, None, False),
    ("order_id", "int32", None, None, False),
    ("customer", "string", None, None, True),
    (
        "amount",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        {"scale": "4", "connect.decimal.precision": "24"},
        True,
    ),
    (
        "ratio",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        {"scale": "12", "connect.decimal.precision": "42"},
        True,
    ),
    ("note", "string", None, None, True),
    ("status", "string", None, None, True),
    ("items", "int32", None, None, True),
    ("vip", "boolean", None, None, True),
    ("created_at", "int64", "io.debezium.time.MicroTimestamp", None, True),
    ("updated_at", "string", "io.debezium.time.ZonedTimestamp", None, True),
    ("payload", "string", "io.debezium.data.Json", None, True),
)
KEY = ("region", "order_id")
REGIONS = ("eu-west", "us-east", "ap-south", "sa-east")
NOTES = ("plain", 'a "quoted" note', "tab\there", "naïve café ☕", "line\nbreak", "😀 emoji")


def _field(name: str, kind: str, semantic: str | None, params: Any, optional: bool) -> Any:
    field: dict[str, Any] = {"type": kind, "optional": optional}
    if semantic is not None:
        field["name"] = semantic
        field["version"] = 1
    if params is not None:
        field["parameters"] = params
    field["field"] = name
    return field


def _row_schema(table: str, side: str) -> dict[str, Any]:
    return {
        "type": "struct",
        "fields": [_field(*c) for c in COLUMNS],
        "optional": True,
        "name": f"{SERVER}.public.{table}.Value",
        "field": side,
    }


SOURCE_FIELDS = (
    ("version", "string", False),
    ("connector", "string", False),
    ("name", "string", False),
    ("ts_ms", "int64", False),
    ("snapshot", "string", True),
    ("db", "string", False),
    ("sequence", "string", True),
    ("ts_us", "int64", True),
    ("ts_ns", "int64", True),
    ("schema", "string", False),
    ("table", "string", False),
    ("txId", "int64", True),
    ("lsn", "int64", True),
    ("xmin", "int64", True),
)


def value_schema(table: str) -> dict[str, Any]:
    """The schema of a change event's value, as JsonConverter writes it."""
    source = {
        "type": "struct",
        "fields": [{"type": k, "optional": o, "field": n} for n, k, o in SOURCE_FIELDS],
        "optional": False,
        "name": "io.debezium.connector.postgresql.Source",
        "version": 1,
        "field": "source",
    }
    transaction = {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "id"},
            {"type": "int64", "optional": False, "field": "total_order"},
            {"type": "int64", "optional": False, "field": "data_collection_order"},
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
        "field": "transaction",
    }
    return {
        "type": "struct",
        "fields": [
            _row_schema(table, "before"),
            _row_schema(table, "after"),
            source,
            transaction,
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
            {"type": "int64", "optional": True, "field": "ts_us"},
            {"type": "int64", "optional": True, "field": "ts_ns"},
        ],
        "optional": False,
        "name": f"{SERVER}.public.{table}.Envelope",
        "version": 2,
    }


def key_schema(table: str) -> dict[str, Any]:
    """The schema of a change event's key: the primary key's columns."""
    fields = [_field(*c) for c in COLUMNS if c[0] in KEY]
    return {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": f"{SERVER}.public.{table}.Key",
    }


def _decimal(unscaled: int) -> str:
    """Connect's Decimal bytes: big-endian two's complement, base64."""
    length = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(length, "big", signed=True)).decode()


@dataclass
class DebeziumFeed:
    """Change events of one table over ``partitions`` partitions, keyed as Debezium keys them."""

    table: str = "orders"
    partitions: int = 12
    keys: int = 50_000
    seed: int = 1

    def events(self, count: int) -> Iterator[tuple[int, bytes, bytes]]:
        """``count`` events, in commit order: (partition, key bytes, value bytes)."""
        key_schema_, value_schema_ = key_schema(self.table), value_schema(self.table)
        for key, payload in self.changes(count):
            key_bytes = orjson.dumps({"schema": key_schema_, "payload": key})
            value = orjson.dumps({"schema": value_schema_, "payload": payload})
            yield zlib.crc32(key_bytes) % self.partitions, key_bytes, value

    def changes(self, count: int) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
        """``count`` changes, in commit order: (the key's fields, the event's payload)."""
        rng = random.Random(self.seed)
        lsn, micros, xid = 24_000_000, 1_764_000_000_000_000, 700
        images: dict[tuple[str, int], dict[str, Any]] = {}
        n = 0
        while n < count:
            xid += 1
            commit = lsn
            micros += rng.randint(50, 5_000)
            for order in range(1, rng.randint(1, 4) + 1):
                if n >= count:
                    break
                lsn += rng.randint(40, 400)
                key = (rng.choice(REGIONS), rng.randrange(self.keys))
                before = images.get(key)
                after = self._image(rng, key, micros)
                images[key] = after
                payload = {
                    "before": before,
                    "after": after,
                    "source": self._source(micros, commit, lsn, xid),
                    "transaction": {
                        "id": f"{xid}:{lsn}",
                        "total_order": order,
                        "data_collection_order": order,
                    },
                    "op": "u" if before is not None else "c",
                    "ts_ms": micros // 1000 + 3,
                    "ts_us": micros + 3_000,
                    "ts_ns": (micros + 3_000) * 1000,
                }
                yield dict(zip(KEY, key, strict=True)), payload
                n += 1

    def _image(self, rng: random.Random, key: tuple[str, int], micros: int) -> dict[str, Any]:
        return {
            "region": key[0],
            "order_id": key[1],
            "customer": f"customer-{rng.randrange(10_000)}",
            "amount": _decimal(rng.randrange(-(10**12), 10**14)),
            "ratio": _decimal(rng.randrange(10**20)),
            "note": rng.choice(NOTES),
            "status": rng.choice(("new", "paid", "shipped")),
            "items": rng.randrange(1, 50),
            "vip": rng.random() < 0.1,
            "created_at": micros - rng.randrange(10**9),
            "updated_at": "2025-11-24T16:00:00.123456Z",
            "payload": orjson.dumps({"tags": ["a", "b"], "depth": {"x": [1, 2.5]}}).decode(),
        }

    def _source(self, micros: int, commit: int, lsn: int, xid: int) -> dict[str, Any]:
        return {
            "version": "3.4.0.Final",
            "connector": "postgresql",
            "name": SERVER,
            "ts_ms": micros // 1000,
            "snapshot": "false",
            "db": "bench",
            "sequence": f'["{commit}","{lsn}"]',
            "ts_us": micros,
            "ts_ns": micros * 1000,
            "schema": "public",
            "table": self.table,
            "txId": xid,
            "lsn": lsn,
            "xmin": None,
        }


def avro_schema(
    connect: dict[str, Any], namespace: str | None = None, defined: set[str] | None = None
) -> Any:
    """A Connect schema as ``AvroConverter`` writes it in Avro (semantic types named).

    A struct met again (``after`` is ``before``'s ``Value``) is named, not defined twice.
    """
    defined = set() if defined is None else defined
    kinds = {"string": "string", "int32": "int", "int64": "long", "boolean": "boolean"}
    kinds |= {"bytes": "bytes", "float64": "double", "float32": "float"}
    if connect["type"] == "struct":
        full = connect.get("name") or "ConnectDefault"
        if full in defined:
            return full
        defined.add(full)
        space, _, name = full.rpartition(".")
        fields = [
            {"name": f["field"], **_optional(avro_schema(f, space or namespace, defined), f)}
            for f in connect["fields"]
        ]
        avro: Any = {"type": "record", "name": name, "fields": fields}
        if space:
            avro["namespace"] = space
        return avro
    avro = kinds[connect["type"]]
    semantic = connect.get("name")
    if semantic is not None:
        avro = {"type": avro, "connect.name": semantic, "connect.version": connect.get("version")}
        if "parameters" in connect:
            avro["connect.parameters"] = connect["parameters"]
        if semantic == "org.apache.kafka.connect.data.Decimal":
            scale = int(connect["parameters"]["scale"])
            precision = int(connect["parameters"]["connect.decimal.precision"])
            avro |= {"logicalType": "decimal", "precision": precision, "scale": scale}
    return avro


def _optional(avro: Any, connect: dict[str, Any]) -> dict[str, Any]:
    if connect.get("optional"):
        return {"type": ["null", avro], "default": None}
    return {"type": avro}


@dataclass
class DebeziumAvroFeed:
    """``DebeziumFeed``'s events as ``AvroConverter`` writes them, schemas in ``registry``."""

    registry: str  # its URL
    table: str = "orders"
    partitions: int = 12
    keys: int = 50_000
    seed: int = 1

    def events(self, count: int) -> Iterator[tuple[int, bytes, bytes]]:
        """``count`` events in Confluent's wire format: (partition, key bytes, value bytes)."""
        import io  # noqa: PLC0415

        import fastavro  # noqa: PLC0415
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: PLC0415

        client = SchemaRegistryClient({"url": self.registry})
        topic = f"{SERVER}.public.{self.table}"
        writers = []
        for side, connect in (("key", key_schema(self.table)), ("value", value_schema(self.table))):
            avro = avro_schema(connect)
            schema_id = client.register_schema(
                f"{topic}-{side}", Schema(orjson.dumps(avro).decode(), "AVRO")
            )
            writers.append(
                (
                    b"\x00" + schema_id.to_bytes(4, "big"),
                    fastavro.parse_schema(without_logical_types(avro)),
                )
            )
        (key_id, key_writer), (value_id, value_writer) = writers
        decimals = [c[0] for c in COLUMNS if c[2] == "org.apache.kafka.connect.data.Decimal"]
        feed = DebeziumFeed(self.table, self.partitions, self.keys, self.seed)
        for key, payload in feed.changes(count):
            for side in ("before", "after"):
                image = payload[side]
                if image is not None:
                    payload[side] = image | {c: base64.b64decode(image[c]) for c in decimals}
            out = io.BytesIO()
            fastavro.schemaless_writer(out, key_writer, key)
            key_bytes = key_id + out.getvalue()
            out = io.BytesIO()
            fastavro.schemaless_writer(out, value_writer, payload)
            yield zlib.crc32(key_bytes) % self.partitions, key_bytes, value_id + out.getvalue()


class Feed(Protocol):
    """A generated source topic: its partitions, its records (partition, key, value)."""

    partitions: int

    def events(self, count: int) -> Iterator[tuple[int, bytes | None, bytes]]:
        """``count`` records in commit order: (partition, key or None, value)."""
        ...


def write_feed(feed: Feed, topic: str, count: int, producer_config: dict[str, Any]) -> int:
    """``count`` events of ``feed`` onto ``topic`` (created with the feed's partitions)."""
    from confluent_kafka import Producer  # noqa: PLC0415

    ensure_topics(producer_config, {topic: feed.partitions})
    failures: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        {**producer_config, "linger.ms": 20, "compression.type": "lz4", "on_delivery": delivered}
    )
    size = 0
    for partition, key, value in feed.events(count):
        size += len(key or b"") + len(value)
        while True:
            try:
                producer.produce(topic, value, key, partition=partition)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    producer.flush()
    if failures:
        raise RuntimeError(f"{len(failures)} events not written: {failures[0]}")
    return size
