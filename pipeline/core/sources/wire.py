"""Confluent's wire format, read as Kafka Connect's JSON would have said it.

A record in the wire format is byte ``0``, the writer schema's registry id (4 bytes,
big-endian) and the Avro binary. Debezium's ``AvroConverter`` writes its events so: the
writer schema is the Connect schema in Avro, each column's semantic type in
``connect.name``/``connect.parameters``. :class:`WireReader` reads such a record into what
``JsonConverter`` with ``schemas.enable=true`` would have written: the payload with bytes as
base64 text and Avro's logical types left raw (a ``Decimal`` as its unscaled bytes, a
``Timestamp`` as its milliseconds), and a Connect-style schema of its fields, so the Debezium
adapter reads both encodings with one set of rules, exactly.

Writer schemas come from the registry (confluent-kafka's ``SchemaRegistryClient``, which
speaks Apicurio's Confluent-compatible API too), once per id and process.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from schemas.connect import non_null

from .base import BadRecord, SourceUnavailable

MAGIC = b"\x00"
_SCHEMAS: dict[tuple[str, int], tuple[Any, dict[str, Any]]] = {}  # per process
_LOCK = threading.Lock()


def registry_fetch(config: Mapping[str, str]) -> Callable[[int], str]:
    """The schema text of a registry id, from the registry ``config`` names."""
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415

    client = SchemaRegistryClient(dict(config))
    return lambda schema_id: client.get_schema(schema_id).schema_str or ""


class WireReader:
    """Reads wire-format records of one registry (see the module)."""

    def __init__(self, name: str, fetch: Callable[[int], str]) -> None:
        self.name = name  # the registry's URL: the cache's key
        self.fetch = fetch

    @classmethod
    def of(cls, registry: Mapping[str, str]) -> WireReader:
        """The reader of a registry, by its client configuration (``url``, auth)."""
        return cls(registry["url"], registry_fetch(registry))

    def read(self, data: bytes) -> tuple[Any, dict[str, Any]]:
        """``(payload, Connect-style schema)`` of a wire-format record."""
        if len(data) < 5 or data[:1] != MAGIC:
            raise BadRecord("not in Confluent's wire format (byte 0, schema id, Avro)")
        schema_id = int.from_bytes(data[1:5], "big")
        parsed, connect = self._schema(schema_id)
        import fastavro  # noqa: PLC0415 - executors only

        try:
            value = fastavro.schemaless_reader(io.BytesIO(data[5:]), parsed, None)
        except Exception as exc:
            raise BadRecord(f"Avro of schema id {schema_id} cannot be read: {exc}") from None
        return _json_like(value), connect

    def _schema(self, schema_id: int) -> tuple[Any, dict[str, Any]]:
        key = (self.name, schema_id)
        found = _SCHEMAS.get(key)
        if found is not None:
            return found
        import fastavro  # noqa: PLC0415

        try:
            text = self.fetch(schema_id)
        except Exception as exc:
            if getattr(exc, "http_status_code", None) == 404:
                raise BadRecord(f"schema id {schema_id} is not in the registry") from None
            raise SourceUnavailable(
                f"the schema registry {self.name} did not answer for schema id {schema_id}: {exc}"
            ) from exc
        writer = json.loads(text)
        parsed = fastavro.parse_schema(without_logical_types(writer))
        with _LOCK:
            _SCHEMAS[key] = parsed, connect_schema(writer)
        return _SCHEMAS[key]


def without_logical_types(schema: Any) -> Any:
    """``schema`` without Avro logical types: values read (or written) as they are stored."""
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    if isinstance(schema, dict):
        return {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def _json_like(value: Any) -> Any:
    """Bytes as base64 text (as ``JsonConverter`` writes them), the rest as it is."""
    if isinstance(value, dict):
        return {k: _json_like(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_like(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def connect_schema(writer: Any) -> dict[str, Any]:
    """The Connect-style schema of an envelope: each record field's columns, named by type.

    A record defined once and named again (Debezium's ``after`` names ``before``'s ``Value``)
    is looked up by its name.
    """
    named: dict[str, Any] = {}
    _collect(writer, None, named)
    fields = []
    for field in non_null(writer).get("fields") or ():
        inner = non_null(field["type"])
        inner = named.get(inner, inner) if isinstance(inner, str) else inner
        entry: dict[str, Any] = {"field": field["name"]}
        if isinstance(inner, dict) and inner.get("type") == "record":
            entry["fields"] = [_column(c, named) for c in inner.get("fields") or ()]
        fields.append(entry)
    return {"fields": fields}


def _collect(schema: Any, namespace: str | None, named: dict[str, Any]) -> None:
    """Every named type in ``schema`` by its name and its full name."""
    if isinstance(schema, list):
        for branch in schema:
            _collect(branch, namespace, named)
        return
    if not isinstance(schema, dict):
        return
    if "name" in schema and schema.get("type") in ("record", "enum", "fixed"):
        name = schema["name"]
        namespace = schema.get("namespace", namespace)
        named[name] = schema
        if namespace and "." not in name:
            named[f"{namespace}.{name}"] = schema
    for field in schema.get("fields") or ():
        _collect(field.get("type"), namespace, named)
    for key in ("items", "values"):
        if key in schema:
            _collect(schema[key], namespace, named)


def _column(column: dict[str, Any], named: Mapping[str, Any]) -> dict[str, Any]:
    kind = non_null(column["type"])
    kind = named.get(kind, kind) if isinstance(kind, str) else kind
    out: dict[str, Any] = {"field": column["name"]}
    if isinstance(kind, dict) and "connect.name" in kind:
        out["name"] = kind["connect.name"]
        out["parameters"] = kind.get("connect.parameters") or {}
    return out
