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
# a registry's answers that say "not now" (auth, timeout, throttled): the batch runs again
_RETRIED = frozenset({401, 403, 408, 429})
_SCHEMAS: dict[tuple[str, int], tuple[Any, dict[str, Any]]] = {}  # per process
_LOCK = threading.Lock()


def registry_fetch(config: Mapping[str, str]) -> Callable[[int], str]:
    """The whole schema text of a registry id, from the registry ``config`` names.

    A schema that references others (Apicurio's converter registers an envelope's records,
    ``Value``, ``Source`` and more, as schemas of their own and refers to them by name) comes
    with each written in where it is first used (:func:`whole_schema`).
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415

    client = SchemaRegistryClient(dict(config))

    def referenced(subject: str, version: int) -> tuple[str, list[Any]]:
        found = client.get_version(subject, version).schema
        return found.schema_str or "", list(found.references or ())

    def fetch(schema_id: int) -> str:
        schema = client.get_schema(schema_id)
        if not schema.references:
            return schema.schema_str or ""
        return json.dumps(whole_schema(schema.schema_str or "", schema.references, referenced))

    return fetch


def whole_schema(
    text: str, references: Any, referenced: Callable[[str, int], tuple[str, list[Any]]]
) -> Any:
    """A schema's JSON with the named schemas it references written in at their first use.

    ``references``: the registry's (each a ``name``, the full name the schema uses, and the
    ``subject`` and ``version`` that hold it); ``referenced``: a subject's version -> its text
    and its own references. Avro defines a named type where it first appears and refers to
    it by name after, so the result is one self-contained schema, as Confluent's own
    converter registers them.
    """
    named: dict[str, Any] = {}

    def gather(refs: Any) -> None:
        for ref in refs:
            if ref.name not in named:
                ref_text, ref_refs = referenced(ref.subject, ref.version)
                named[ref.name] = json.loads(ref_text)
                gather(ref_refs)

    gather(references)
    defined: set[str] = set()

    def inline(schema: Any, namespace: str | None) -> Any:
        if isinstance(schema, str):
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            for candidate in (full, schema):
                if candidate in named and candidate not in defined:
                    defined.add(candidate)
                    body = named[candidate]
                    short = isinstance(body, dict) and "." not in str(body.get("name", ""))
                    if short and not body.get("namespace"):
                        body = {**body, "name": candidate}  # its full name, wherever it lands
                    return inline(body, namespace)
            return schema
        if isinstance(schema, list):
            return [inline(branch, namespace) for branch in schema]
        if not isinstance(schema, dict):
            return schema
        name = schema.get("name")
        if schema.get("type") in ("record", "error", "enum", "fixed") and isinstance(name, str):
            own = name.rpartition(".")[0] if "." in name else schema.get("namespace", namespace)
            defined.add(name if "." in name or not own else f"{own}.{name}")
            namespace = own or None
        out = dict(schema)
        if "fields" in schema:
            out["fields"] = [
                {**f, "type": inline(f.get("type"), namespace)} for f in schema["fields"]
            ]
        for key in ("items", "values"):
            if key in schema:
                out[key] = inline(schema[key], namespace)
        if isinstance(schema.get("type"), (dict, list)) or schema.get("type") in named:
            out["type"] = inline(schema["type"], namespace)
        return out

    return inline(json.loads(text), None)


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
            status = getattr(exc, "http_status_code", None)
            if status == 404:
                raise BadRecord(f"schema id {schema_id} is not in the registry") from None
            if isinstance(status, int) and 400 <= status < 500 and status not in _RETRIED:
                # the registry answered that it cannot serve this schema: no retry will change
                # that, and the batch must not wait on it forever (a wedged feed)
                raise BadRecord(
                    f"the schema registry cannot serve schema id {schema_id} (HTTP {status}): {exc}"
                ) from None
            raise SourceUnavailable(
                f"the schema registry {self.name} did not answer for schema id {schema_id}: {exc}"
            ) from exc
        try:
            writer = json.loads(text)
            parsed = fastavro.parse_schema(without_logical_types(writer))
            connect = connect_schema(writer)
        except Exception as exc:  # not Avro the reader can use: its records are bad
            raise BadRecord(f"schema id {schema_id} is not a usable Avro schema: {exc}") from None
        with _LOCK:
            _SCHEMAS[key] = parsed, connect
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
    """The Connect-style schema of an envelope: each record field's columns, typed as Connect's.

    Each column as ``JsonConverter`` would have described it (``type``, ``optional``, the
    semantic ``name`` and ``parameters``: :func:`connect_column`), so an output schema derives
    from an Avro source as from a JSON one (``schemas/connect.py``). A record defined once and
    named again (Debezium's ``after`` names ``before``'s ``Value``) is looked up by its name.
    """
    named: dict[str, Any] = {}
    _collect(writer, None, named)
    fields = []
    for field in non_null(writer).get("fields") or ():
        inner = _named(non_null(field["type"]), named)
        entry: dict[str, Any] = {"field": field["name"]}
        if isinstance(inner, dict) and inner.get("type") == "record":
            entry["fields"] = [
                {**connect_column(c["type"], named), "field": c["name"]}
                for c in inner.get("fields") or ()
            ]
        fields.append(entry)
    return {"fields": fields}


# Avro's primitive types as Connect's (``connect.type`` says int8 and int16 apart)
_CONNECT_TYPES = {
    "int": "int32",
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "fixed": "bytes",
    "enum": "string",
    "record": "struct",
    "array": "array",
    "map": "map",
}
# Connect's own logical types, for a writer that left out ``connect.name``
_CONNECT_LOGICAL = {
    "decimal": "org.apache.kafka.connect.data.Decimal",
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
}


def connect_column(
    avro: Any, named: Mapping[str, Any], within: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The Connect schema of a column written as Avro type ``avro`` by ``AvroConverter``.

    ``["null", T]`` is an optional ``T``; a named type given by its name is looked up in
    ``named``; the semantic type is ``connect.name`` (or Connect's own logical type), its
    ``connect.parameters`` kept. A union of several types is none Connect declares
    (``type`` None), and no Avro output type is derived for it.
    """
    optional = isinstance(avro, list) and "null" in avro
    kind = _named(non_null(avro), named)
    if isinstance(kind, list):  # a union of several types: not one of Connect's
        return {"type": None, "optional": optional}
    spec: dict[str, Any] = kind if isinstance(kind, dict) else {"type": kind}
    base = spec.get("type")
    if isinstance(base, (dict, list)):  # {"type": {"type": "long", ...}}: the inner one
        return {**connect_column(base, named, within), "optional": optional}
    out: dict[str, Any] = {
        "type": spec.get("connect.type") or _CONNECT_TYPES.get(str(base)),
        "optional": optional,
    }
    semantic = spec.get("connect.name")
    logical = spec.get("logicalType")
    if semantic is None and logical in _CONNECT_LOGICAL and base != "record":
        semantic = _CONNECT_LOGICAL[logical]
    if semantic is not None:  # a struct's too (Debezium's VariableScaleDecimal, Geometry)
        out["name"] = semantic
        given = spec.get("connect.parameters") or {}
        parameters = dict(given) if isinstance(given, dict) else given  # (Registry.java's too)
        if logical == "decimal" and isinstance(parameters, dict):
            parameters.setdefault("scale", str(spec.get("scale", 0)))
            if "precision" in spec:
                parameters.setdefault("connect.decimal.precision", str(spec["precision"]))
        out["parameters"] = parameters
    name = spec.get("name")
    if base == "record" and name not in within:
        inside = within | {str(name)}
        out["fields"] = [
            {**connect_column(f["type"], named, inside), "field": f["name"]}
            for f in spec.get("fields") or ()
        ]
    return out


def _named(kind: Any, named: Mapping[str, Any]) -> Any:
    """A named type's definition when ``kind`` is its (short or full) name; else ``kind``."""
    return named.get(kind, kind) if isinstance(kind, str) else kind


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
