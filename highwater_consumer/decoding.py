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
from typing import Any, NamedTuple, Protocol

import fastavro
import orjson

from schemas import claims
from schemas.avro import CONFLUENT_MAGIC, SINGLE_OBJECT_MAGIC
from schemas.errors import HighwaterError, RecordRef
from schemas.hlc import Hlc, parse_packed
from schemas.jsontext import loads_exact, lossy


class ConsumerError(HighwaterError):
    """The consumer library cannot go on: its output, its target or its arguments."""

    remedy = (
        "Fix the argument, output or target the message names (`highwater tail` and "
        "`highwater apply` read a changefeed's wrapped envelope with `updated: true`), then "
        "run it again: it resumes after the last acknowledged window."
    )


class ApplyError(ConsumerError):
    """A window could not be applied: a table, column, key or value the target cannot take."""

    remedy = (
        "Make the target able to take what the message names (the table, column, key or "
        "value), or let `--on-error dlq` divert such records; the applier resumes after the "
        "last window it committed."
    )


class BadRecord(ConsumerError):
    """An output record that is not Highwater's envelope; ``record`` says which one."""

    remedy = (
        "Check what writes to the output topic named (only the changefeed should); `highwater "
        "tail` prints such records to stderr and goes on, the library raises unless given "
        "`on_bad`."
    )

    def __init__(self, record: RecordRef, reason: str) -> None:
        self.record = record
        self.reason = reason
        super().__init__(f"{record}: {reason}")


class Marker(NamedTuple):
    """A resolved marker: nothing at or below ``resolved`` not yet seen follows."""

    resolved: Hlc


class Change(NamedTuple):
    """A row change: its time, the key's values, the row after (None: deleted) and before."""

    updated: Hlc
    key: Any  # JSON: the array of key values (enriched: an object); Avro: the key record
    after: dict[str, Any] | None
    before: dict[str, Any] | None


Image = tuple[Any, dict[str, Any] | None]  # a change's key values and after (None: deleted)
Read = Marker | int  # what reading a record tells: a marker, or a row change's time (packed)
SchemaLookup = Callable[[bytes], Mapping[str, Any] | None]  # a schema by its header
TOMBSTONE = "a tombstone: the envelope must be wrapped (a delete has 'after': null)"


def _envelope(key: Any, value: Any) -> Read:
    """A decoded record's marker, or its row change's packed time; ``ValueError`` if neither."""
    if type(value) is not dict:
        raise ValueError("the value is not an object (a record)")
    updated = value.get("updated")
    if updated is None:
        if len(value) == 1 and "resolved" in value:
            return Marker(Hlc.parse(_hlc_text(value["resolved"], "resolved")))
        updated = _enriched_time(value)
    after = value.get("after", _ABSENT)
    if after is _ABSENT:
        raise ValueError("no 'after' in the envelope: not Highwater's wrapped envelope")
    before = value.get("before")
    if (after is not None and type(after) is not dict) or (
        before is not None and type(before) is not dict
    ):
        raise ValueError("'after' or 'before' is neither an object nor null")
    if key is None:
        raise ValueError("a row change without a key")
    return parse_packed(_hlc_text(updated, "updated"))


def payload(data: Any) -> Any:
    """A key or value inside its Kafka Connect schema (enriched's ``schema`` property), bare."""
    if type(data) is dict and len(data) == 2 and "payload" in data and "schema" in data:
        return data["payload"]
    return data


def _enriched_time(value: dict[str, Any]) -> Any:
    """The commit time of an ``enriched`` envelope: its source block's ``ts_hlc``."""
    source = value.get("source")
    if "op" in value and type(source) is dict and source.get("ts_hlc") is not None:
        return source["ts_hlc"]
    raise ValueError(
        "no 'updated' in the envelope: consuming windows needs the changefeed's envelope: "
        "wrapped with updated: true, or enriched with updated: true and "
        "enriched_properties: [source]"
    )


def _time(envelope: dict[str, Any]) -> Hlc:
    """A row change's commit time (a record ``_envelope`` took)."""
    updated = envelope.get("updated")
    return Hlc.parse(updated if updated is not None else envelope["source"]["ts_hlc"])


def _hlc_text(value: Any, what: str) -> str:
    if type(value) is not str:
        raise ValueError(f"{what} is not an HLC text")
    return value


_ABSENT = object()


def _exact(data: bytes) -> Any:
    """JSON with every number as written: orjson where it loses nothing, else the exact reader."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return loads_exact(data)  # numbers beyond a double, lone surrogates: or not JSON
    return loads_exact(data) if lossy(value, data) else value


class JsonDecoder:
    """The JSON envelope.

    Reading validates a record whole (orjson) and keeps only its time; a row's exact values
    are read when asked for (:meth:`change`).
    """

    def read(self, key: bytes | None, value: bytes | None) -> Read:
        """A record's marker or time; ``ValueError`` says why it is not Highwater's."""
        if value is None:
            raise ValueError(TOMBSTONE)
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            parsed = loads_exact(value)
        parsed = payload(parsed)
        read = _envelope(key, parsed)
        if type(read) is int:
            try:
                key_values = orjson.loads(key)  # type: ignore[arg-type]
            except orjson.JSONDecodeError:
                key_values = loads_exact(key)  # type: ignore[arg-type]
            key_values = payload(key_values)
            enriched = type(parsed) is dict and "op" in parsed  # its key is an object
            if type(key_values) is not (dict if enriched else list):
                raise ValueError(f"the key is not a JSON {'object' if enriched else 'array'}")
        return read

    def change(self, key: bytes, value: bytes) -> Change:
        """A row change read whole, numbers exact (a record :meth:`read` took)."""
        envelope = payload(_exact(value))
        key_values = payload(_exact(key))
        return Change(_time(envelope), key_values, envelope["after"], envelope.get("before"))


def avro_header(data: bytes) -> bytes | None:
    """The header naming an Avro record's writer schema (registry id or fingerprint), or None."""
    if data[:1] == CONFLUENT_MAGIC and len(data) >= 5:
        return data[:5]
    if data[:2] == SINGLE_OBJECT_MAGIC and len(data) >= 10:
        return data[:10]
    return None


class AvroDecoder:
    """Avro by the writer's schema, named in each record's header (registry id or fingerprint)."""

    def __init__(self, lookup: SchemaLookup) -> None:
        self.lookup = lookup
        self.parsed: dict[bytes, Any] = {}

    def _read(self, data: bytes) -> Any:
        header = avro_header(data)
        if header is None:
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

    def writer(self, data: bytes) -> Mapping[str, Any] | None:
        """The schema a record was written with, as published (None: none found for it)."""
        header = avro_header(data)
        return None if header is None else self.lookup(header)

    def read(self, key: bytes | None, value: bytes | None) -> Read:
        """A record's marker or time; ``ValueError`` (or an Avro error) if it is not ours."""
        if value is None:
            raise ValueError(TOMBSTONE)
        read = _envelope(key, self._read(value))
        if type(read) is int and type(self._read(key)) is not dict:  # type: ignore[arg-type]
            raise ValueError("the key is not an Avro record")
        return read

    def change(self, key: bytes, value: bytes) -> Change:
        """A row change read whole (a record :meth:`read` took)."""
        envelope = self._read(value)
        return Change(
            _time(envelope),
            self._read(key),
            envelope["after"],
            envelope.get("before"),
        )

    def image(self, key: bytes, value: bytes) -> Image:
        """A row change's key record and ``after``: what an applier writes."""
        return self._read(key), self._read(value)["after"]


class Reader(Protocol):
    """One format's reader (:class:`JsonDecoder`, :class:`AvroDecoder`, protobuf's)."""

    def read(self, key: bytes | None, value: bytes | None) -> Read:
        """A record's marker or row change time (packed); ``ValueError`` if neither."""
        ...

    def change(self, key: bytes, value: bytes) -> Change:
        """A row change read whole."""
        ...


class Decoder:
    """One output's decoder: names every bad record by topic, partition and offset."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.change = reader.change

    def __call__(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> Read:
        """The record's marker or row change time (packed), or :class:`BadRecord`."""
        try:
            return self.reader.read(key, value)
        except Exception as exc:  # fastavro raises whatever a corrupt datum makes it raise
            raise self.bad(topic, partition, offset, exc) from exc

    @staticmethod
    def bad(topic: str, partition: int, offset: int, exc: Exception) -> BadRecord:
        """The bad record a reader's exception says a record is."""
        plain = (ValueError, TypeError, EOFError, RecursionError, struct.error)
        reason = str(exc) or type(exc).__name__
        if not isinstance(exc, plain):
            reason = f"{type(exc).__name__}: {exc}"
        return BadRecord(RecordRef(topic, partition, offset), reason)

    def decode(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None
    ) -> Marker | Change:
        """The record whole: a marker or a row change, or :class:`BadRecord`."""
        read = self(topic, partition, offset, key, value)
        if type(read) is Marker:
            return read
        if key is None or value is None:  # read() refuses both
            raise BadRecord(RecordRef(topic, partition, offset), "a row change without a key")
        return self.change(key, value)


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


def claimed_read(
    read: Callable[[bytes | None, bytes | None], Any],
    key: bytes | None,
    value: bytes | None,
    refused: Exception,
) -> tuple[bytes, Any]:
    """A record ``read`` refused: a claim check's reference, read as the value it names.

    Returns that value and what ``read`` makes of it; any other record raises ``refused`` again.
    """
    found = claims.claimed(value)
    if found is None:
        raise refused
    return found, read(key, found)
