"""Reading a changefeed's output records: a row change or a resolved marker, or a bad record.

The output's forms (contract §4): JSON (``{"after": …, "before": …, "updated": "<hlc>"}``,
markers ``{"resolved": "<hlc>"}`` with a null key), Avro in Confluent's wire format (``00`` and
the registry's schema id) or single-object encoding (``C3 01`` and the schema's CRC-64-AVRO
fingerprint, the schema published to a compacted schema topic). Windows need each row's
commit time: the envelope must be ``wrapped`` with ``updated`` (a tombstone of the other
envelopes has none).

JSON numbers keep their text (:class:`schemas.jsontext.Number`): a value reaches the
application exactly as the changefeed wrote it. Avro values are fastavro's (decimals as
``Decimal``, timestamps as ``datetime``).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro

from schemas.errors import HighwaterError, RecordRef
from schemas.hlc import Hlc
from schemas.jsontext import loads_exact

CONFLUENT_MAGIC = b"\x00"
SINGLE_OBJECT_MAGIC = b"\xc3\x01"


class ConsumerError(HighwaterError):
    """The consumer library cannot go on: its output, its target or its arguments."""


class BadRecord(ConsumerError):
    """An output record that is not Highwater's envelope; ``record`` says which one."""

    def __init__(self, record: RecordRef, reason: str) -> None:
        self.record = record
        self.reason = reason
        super().__init__(f"{record}: {reason}")


@dataclass(frozen=True)
class Marker:
    """A resolved marker: nothing at or below ``resolved`` not yet seen follows."""

    resolved: Hlc


@dataclass(frozen=True)
class Change:
    """A row change: the key's values, the row after (None: deleted) and before, its time."""

    updated: Hlc
    key: Any  # JSON: the array of key values; Avro: the key record
    after: Mapping[str, Any] | None
    before: Mapping[str, Any] | None


Decoded = Marker | Change
SchemaLookup = Callable[[bytes], Mapping[str, Any] | None]  # a schema by its header


def _time(value: Any, what: str) -> Hlc:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not an HLC text")
    return Hlc.parse(value)


def _change(key: Any, value: Mapping[str, Any]) -> Decoded:
    if set(value) == {"resolved"}:
        return Marker(_time(value["resolved"], "resolved"))
    if "updated" not in value or value["updated"] is None:
        raise ValueError(
            "no 'updated' in the envelope: consuming windows needs the changefeed's "
            "envelope: wrapped with updated: true"
        )
    if "after" not in value:
        raise ValueError("no 'after' in the envelope: not Highwater's wrapped envelope")
    after, before = value["after"], value.get("before")
    for name, image in (("after", after), ("before", before)):
        if image is not None and not isinstance(image, Mapping):
            raise ValueError(f"'{name}' is neither an object nor null")
    return Change(_time(value["updated"], "updated"), key, after, before)


class JsonDecoder:
    """The JSON envelope, numbers exact."""

    def decode(self, key: bytes | None, value: bytes | None) -> Decoded:
        """A record's meaning; ``ValueError`` says why it is not Highwater's."""
        if value is None:
            raise ValueError(
                "a tombstone: the envelope must be wrapped (a delete has 'after': null)"
            )
        parsed = loads_exact(value)
        if not isinstance(parsed, dict):
            raise ValueError("the value is not a JSON object")
        if set(parsed) == {"resolved"}:
            return _change(None, parsed)
        if key is None:
            raise ValueError("a row change without a key")
        key_values = loads_exact(key)
        if not isinstance(key_values, list):
            raise ValueError("the key is not a JSON array")
        return _change(key_values, parsed)


class AvroDecoder:
    """Avro by the writer's schema, named in each record's header (registry id or fingerprint)."""

    def __init__(self, lookup: SchemaLookup) -> None:
        self.lookup = lookup
        self.parsed: dict[bytes, Any] = {}

    def _read(self, data: bytes) -> Any:
        if data[:1] == CONFLUENT_MAGIC and len(data) >= 5:
            header = data[:5]
        elif data[:2] == SINGLE_OBJECT_MAGIC and len(data) >= 10:
            header = data[:10]
        else:
            raise ValueError("neither Confluent's wire format nor Avro single-object encoding")
        schema = self.parsed.get(header)
        if schema is None:
            found = self.lookup(header)
            if found is None:
                raise ValueError(f"no schema for the header {header.hex()}")
            schema = self.parsed[header] = fastavro.parse_schema(dict(found))
        body = io.BytesIO(data)
        body.seek(len(header))
        datum = fastavro.schemaless_reader(body, schema, None)
        if body.tell() != len(data):
            raise ValueError(f"{len(data) - body.tell()} bytes left over after the Avro datum")
        return datum

    def decode(self, key: bytes | None, value: bytes | None) -> Decoded:
        """A record's meaning; ``ValueError`` (or an Avro error) says why it is not ours."""
        if value is None:
            raise ValueError(
                "a tombstone: the envelope must be wrapped (a delete has 'after': null)"
            )
        datum = self._read(value)
        if not isinstance(datum, dict):
            raise ValueError("the value is not an Avro record")
        if set(datum) == {"resolved"}:
            return _change(None, datum)
        if key is None:
            raise ValueError("a row change without a key")
        return _change(self._read(key), datum)


class Decoder:
    """One output's decoder: names every bad record by topic, partition and offset."""

    def __init__(self, reader: JsonDecoder | AvroDecoder) -> None:
        self.reader = reader

    def __call__(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> Decoded:
        """The record's meaning, or :class:`BadRecord`."""
        try:
            return self.reader.decode(key, value)
        except (ValueError, TypeError, EOFError, RecursionError, struct.error) as exc:
            raise BadRecord(
                RecordRef(topic, partition, offset), str(exc) or type(exc).__name__
            ) from exc
        except Exception as exc:  # fastavro raises whatever a corrupt datum makes it raise
            raise BadRecord(
                RecordRef(topic, partition, offset), f"{type(exc).__name__}: {exc}"
            ) from exc


def registry_lookup(config: Mapping[str, Any]) -> SchemaLookup:
    """Schemas by Confluent header from a registry (confluent-kafka's client, cached)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415

    client = SchemaRegistryClient(dict(config))

    def lookup(header: bytes) -> Mapping[str, Any] | None:
        if header[:1] != CONFLUENT_MAGIC:
            return None
        (schema_id,) = struct.unpack(">I", header[1:5])
        try:
            text = client.get_schema(schema_id).schema_str
        except Exception:  # the registry client's errors are many; None says it
            return None
        return json.loads(text) if text else None

    return lookup


def fingerprint_lookup(
    schemas: Mapping[str, str], refresh: Callable[[], Mapping[str, str]]
) -> SchemaLookup:
    """Schemas by single-object header from a schema topic's records (fingerprint hex -> text).

    A fingerprint not known yet reads the topic again (``refresh``): a schema is published
    before the first record that uses it.
    """
    known = dict(schemas)

    def lookup(header: bytes) -> Mapping[str, Any] | None:
        if header[:2] != SINGLE_OBJECT_MAGIC:
            return None
        name = header[2:].hex()
        if name not in known:
            known.update(refresh())
        text = known.get(name)
        return None if text is None else json.loads(text)

    return lookup
