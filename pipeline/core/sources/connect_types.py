"""Kafka Connect's types in Debezium's row images: the column schemas, the values they read.

With ``schemas.enable=true`` (or Avro) a Debezium event carries its envelope's Connect
schema; this module owns reading it: each image's column schemas by name
(:func:`field_schemas`) and an image's values by their semantic types (:func:`typed`).
``Decimal`` and ``VariableScaleDecimal`` (``decimal.handling.mode=precise``: base64
two's-complement bytes) become JSON numbers with their exact digits, Debezium's and Kafka
Connect's dates, times and timestamps (days, milli-, micro-, nanoseconds) become ISO-8601
text, exactly; the rest (``ZonedTimestamp`` text, strings, numbers) is kept as sent.
Without a schema the payload is kept as sent (``decimal.handling.mode=string`` keeps NUMERIC
exact there). The JVM walk reads them alike (``Connect.java``).
"""

from __future__ import annotations

import base64
import binascii
from datetime import date, datetime, timedelta
from typing import Any

from schemas.jsontext import Number

from .base import BadRecord, exact_number

_EPOCH = datetime(1970, 1, 1)  # noqa: DTZ001 - Debezium's timestamps without a zone
_DAY = date(1970, 1, 1)
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
# semantic type -> (what it counts, per second) for times of day and timestamps
_TIMESTAMPS = {
    "io.debezium.time.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
}
_TIMES = {
    "io.debezium.time.Time": 1_000,
    "io.debezium.time.MicroTime": 1_000_000,
    "io.debezium.time.NanoTime": 1_000_000_000,
    "org.apache.kafka.connect.data.Time": 1_000,
}
_DATES = frozenset({"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"})


def field_schemas(schema: dict[str, Any], field: str) -> dict[str, dict[str, Any]]:
    """The column schemas of the envelope's ``field`` (``after``, ``before``) by name."""
    for entry in schema.get("fields") or ():
        if type(entry) is dict and entry.get("field") == field:
            columns = entry.get("fields") or ()
            return {c["field"]: c for c in columns if type(c) is dict and "field" in c}
    return {}


def typed(image: dict[str, Any], columns: dict[str, dict[str, Any]], field: str) -> dict[str, Any]:
    """A row image with its semantic types read (see the module's description)."""
    out = dict(image)
    for name, value in image.items():
        column = columns.get(name)
        if value is None or column is None or not column.get("name"):
            continue
        try:
            out[name] = _semantic(value, column)
        except (ValueError, TypeError, KeyError, OverflowError, binascii.Error) as exc:
            raise BadRecord(
                f"{field}.{name}: {column['name']} value {value!r} cannot be read: {exc}"
            ) from None
    return out


def _semantic(value: Any, column: dict[str, Any]) -> Any:
    kind = column["name"]
    if kind == _DECIMAL:
        return decimal_number(value, int((column.get("parameters") or {})["scale"]))
    if kind == _VARIABLE_DECIMAL:
        return decimal_number(value["value"], int(value["scale"]))
    if kind in _DATES:
        return (_DAY + timedelta(days=_integer(value))).isoformat()
    if kind in _TIMESTAMPS:
        seconds, fraction = divmod(_integer(value), _TIMESTAMPS[kind])
        moment = _EPOCH + timedelta(seconds=seconds)
        return moment.isoformat() + _fraction(fraction, _TIMESTAMPS[kind])
    if kind in _TIMES:
        seconds, fraction = divmod(_integer(value), _TIMES[kind])
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return clock + _fraction(fraction, _TIMES[kind])
    return value


def _integer(value: Any) -> int:
    number = whole(value)
    if number is None:
        raise TypeError("not an integer")
    return number


def whole(value: Any) -> int | None:
    """An integer, also as the exact reader gives one beyond 18 digits (nanoseconds); else None."""
    if type(value) is int:
        return value
    if type(value) is Number and value.text.lstrip("-").isdigit():
        return int(value.text)
    return None


def _fraction(count: int, per_second: int) -> str:
    """``.123`` for 123 ms, ``.000123`` for 123 µs; nothing for a whole second."""
    if not count:
        return ""
    digits = len(str(per_second)) - 1
    return f".{count:0{digits}d}"


def decimal_number(encoded: Any, scale: int) -> int | Number:
    """Base64 big-endian two's-complement digits and a scale, as the exact number."""
    if type(encoded) is not str:
        raise TypeError("not base64 text")
    unscaled = int.from_bytes(base64.b64decode(encoded, validate=True), "big", signed=True)
    if scale <= 0:
        return exact_number(str(unscaled * 10**-scale))
    sign, digits = ("-" if unscaled < 0 else ""), str(abs(unscaled)).rjust(scale + 1, "0")
    return Number(f"{sign}{digits[:-scale]}.{digits[-scale:]}")
