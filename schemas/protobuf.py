"""Protobuf output (``encoder.format: protobuf``): values, instants and framing (Spark-free).

The messages are ``highwater_changefeed.proto`` (table-independent, wire-compatible with
CockroachDB's protobuf changefeeds): a row is a map of column name to :class:`Value`, whose
kind is chosen per value, so the changefeed (``encoders/protobuf.py``) and the consumer
library (``highwater_consumer/decoding.py``) share this module:

==========================================  ==================================================
a column's value (its declared type)         ``Value``
==========================================  ==================================================
null                                         nothing set (SQL NULL)
``true`` / ``false``                         ``bool_value``
an integer within 64 bits                    ``int64_value``
any other number (``1.5``, ``1.10``,         ``decimal_value``: its text, exactly (so a
``1E+2``, ``-0``, beyond 64 bits)            column's fractions are one kind, however written)
a number declared ``double`` / ``float``     ``double_value``
a number declared ``decimal``                ``decimal_value``
text                                         ``string_value``
text declared ``date``, ``time-*``,          ``date_value``, ``time_value``, ``uuid_value``
``uuid``
text or epoch units declared                 ``timestamp_value`` (``google.protobuf.Timestamp``,
``timestamp-*``                              UTC, to the nanosecond)
an array                                     ``array_value``
an object declared a record                  ``tuple_value``
any other object (JSON)                      ``string_value``: its JSON text
bytes                                        ``bytes_value``
==========================================  ==================================================

In Confluent's wire format (a schema registry configured) each key and value is byte 0, the
registry's id of the schema (4 bytes, big-endian), the message's index in the file (``Key``:
``[1]``, written ``02 02``; ``Message``: ``[0]``, written ``00``), then the message; without a
registry it is the message alone, as CockroachDB writes it.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
import struct
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from . import highwater_changefeed_pb2 as pb
from .jsontext import Number, fragment

PROTO = Path(__file__).with_name("highwater_changefeed.proto")


def proto_text() -> str:
    """The .proto's text, as registered: a resource, so read from a zip too (``--py-files``)."""
    return resources.files(__package__ or "schemas").joinpath(PROTO.name).read_text("utf-8")


CONFLUENT_MAGIC = b"\x00"
KEY_INDEX = b"\x02\x02"  # [1]: Key, the file's second message (zig-zag count, then index)
MESSAGE_INDEX = b"\x00"  # [0]: Message, the file's first (Confluent's one-byte form)
_INT64 = (-(2**63), 2**63 - 1)
# Arrays in arrays: each level is two messages (Value, Array), and readers (the runtime's
# parser, confluent-kafka's) stop at 100 levels of nesting: deeper is a bad record here.
MAX_DEPTH = 32
_FLOATS = frozenset({"double", "float"})
_TIMESTAMPS = {  # logical type -> epoch units per second, for a value given as a number
    "timestamp-millis": 1_000,
    "timestamp-micros": 1_000_000,
    "timestamp-nanos": 1_000_000_000,
    "local-timestamp-millis": 1_000,
    "local-timestamp-micros": 1_000_000,
    "local-timestamp-nanos": 1_000_000_000,
}
_TEXTS: dict[str, Callable[[pb.Value, str], None]] = {
    "date": lambda out, v: setattr(out, "date_value", v),
    "time-millis": lambda out, v: setattr(out, "time_value", v),
    "time-micros": lambda out, v: setattr(out, "time_value", v),
    "uuid": lambda out, v: setattr(out, "uuid_value", v),
}
_INSTANT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?"
)


def kinds(record: Mapping[str, Any]) -> dict[str, str]:
    """Each column's declared kind: its logical type, else its type's name (nulls aside)."""
    out = {}
    for field in record["fields"]:
        kind = field["type"]
        if isinstance(kind, list):
            rest = [k for k in kind if k != "null"]
            kind = rest[0] if len(rest) == 1 else None
        if isinstance(kind, dict):
            kind = kind.get("logicalType") or kind.get("type")
        if isinstance(kind, str):
            out[field["name"]] = kind
    return out


def instant(text: str) -> tuple[int, int]:
    """An ISO 8601 date and time as (seconds, nanos) since the epoch, UTC (no offset: UTC)."""
    found = _INSTANT.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not an ISO 8601 date and time")
    year, month, day, hour, minute, second = (int(g) for g in found.groups()[:6])
    dt.datetime(year, month, day, hour, minute, second)  # noqa: DTZ001 - its range checked
    seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    fraction, zone = found.group(7) or "", found.group(8)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "+" else 1  # +02:00 is two hours ahead of UTC
        digits = zone[1:].replace(":", "")
        seconds += sign * (int(digits[:2]) * 3600 + int(digits[2:] or 0) * 60)
    return seconds, int(fraction.ljust(9, "0"))


def instant_text(seconds: int, nanos: int) -> str:
    """The ISO 8601 text of an instant (UTC, ``Z``), its fraction without trailing zeros."""
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=seconds)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{nanos:09d}".rstrip("0") if nanos else "") + "Z"


def value_of(v: Any, kind: str | None = None) -> pb.Value:
    """A column's value as a :class:`Value` (the module's table); ``kind``: its declared."""
    out = pb.Value()
    if v is not None:
        _set(out, v, kind)
    return out


def _set(out: pb.Value, v: Any, kind: str | None, depth: int = 0) -> None:  # noqa: PLR0912
    t = type(v)
    if t is bool:
        out.bool_value = v
    elif t is str:
        if kind in _TIMESTAMPS:
            seconds, nanos = instant(v)
            _instant(out, seconds, nanos)
        elif kind in _TEXTS:
            _TEXTS[kind](out, v)
        else:
            out.string_value = v
    elif t is int or t is Number or t is float:
        _number(out, v, kind)
    elif t is list:
        if depth >= MAX_DEPTH:
            raise ValueError(
                f"arrays nested deeper than {MAX_DEPTH}: protobuf readers refuse messages "
                "nested that deep (100 levels)"
            )
        out.array_value.SetInParent()  # present even when empty
        values = out.array_value.values
        for item in v:
            entry = values.add()  # a null item: a Value with nothing set
            if item is not None:
                _set(entry, item, None, depth + 1)
    elif t is dict:
        if kind == "record":
            out.tuple_value.SetInParent()
            fill(out.tuple_value.values, v, {})
        else:
            out.string_value = orjson.dumps(v, default=fragment).decode()
    elif t is bytes:
        out.bytes_value = v
    else:
        raise TypeError(f"{t.__name__} has no protobuf Value")


def _number(out: pb.Value, v: int | float | Number, kind: str | None) -> None:
    text = v.text if isinstance(v, Number) else None
    if kind in _TIMESTAMPS and type(v) is int:
        seconds, rest = divmod(v, _TIMESTAMPS[kind])
        _instant(out, seconds, rest * (1_000_000_000 // _TIMESTAMPS[kind]))
    elif kind in _FLOATS:
        out.double_value = float(v.text) if isinstance(v, Number) else float(v)
    elif type(v) is int and kind != "decimal" and _INT64[0] <= v <= _INT64[1]:
        out.int64_value = v
    elif text is not None:  # exactly as written: a fraction, an exponent, -0, beyond 64 bits
        out.decimal_value.value = text
    else:  # a fraction orjson read without loss: its text is the shortest, as written
        out.decimal_value.value = orjson.dumps(v).decode()


def _instant(out: pb.Value, seconds: int, nanos: int) -> None:
    stamp = out.timestamp_value
    stamp.SetInParent()  # the epoch itself (0, 0) is still an instant
    stamp.seconds, stamp.nanos = seconds, nanos


def fill(entries: Any, values: Mapping[str, Any], declared: Mapping[str, str]) -> None:
    """``values`` (a row image, a key) into a message's map; ``declared``: the kinds."""
    for name, v in values.items():
        entry = entries[name]  # a null column: an entry with nothing set
        if v is not None:
            _set(entry, v, declared.get(name))


def serialized(message: Any) -> bytes:
    """A message's bytes, deterministic (map entries sorted: one key, one byte string)."""
    data: bytes = message.SerializeToString(deterministic=True)
    return data


def python(value: pb.Value) -> Any:
    """A :class:`Value` as Python: decimals a :class:`Number` (exact), instants ISO text."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "decimal_value":
        return Number(value.decimal_value.value)
    if which == "timestamp_value":
        return instant_text(value.timestamp_value.seconds, value.timestamp_value.nanos)
    if which == "array_value":
        return [python(v) for v in value.array_value.values]
    if which == "tuple_value":
        return columns(value.tuple_value.values)
    return getattr(value, which)


def columns(entries: Any) -> dict[str, Any]:
    """A message's map (a row's values, a key's) as a dict of Python values."""
    return {name: python(v) for name, v in entries.items()}


def unframed(data: bytes) -> bytes:
    """A record's message bytes: Confluent's header and message indexes skipped if there."""
    if data[:1] != CONFLUENT_MAGIC:
        return data  # plain (a message's first byte is a tag: never 0)
    at = 5
    count, at = _zigzag(data, at)
    for _ in range(count):
        _, at = _zigzag(data, at)
    return data[at:]


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if at >= len(data):
            raise ValueError("the message indexes run past the record")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at


def header(schema_id: int, index: bytes) -> bytes:
    """Confluent's wire format before a message: byte 0, the id, the message index."""
    return CONFLUENT_MAGIC + struct.pack(">I", schema_id) + index
