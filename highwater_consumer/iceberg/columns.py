"""A changefeed table's schema as an Iceberg schema, and its values as what Iceberg holds.

The changefeed's schema is the table's declared Avro record and primary key
(:class:`schemas.tables.TableSchema`; its job status publishes it). Each column maps to the
Iceberg type that holds its values exactly, or is refused with the column's name:

=================================================  =============================================
Avro                                                Iceberg
=================================================  =============================================
``int``, ``long``                                   ``int``, ``long``
``float``, ``double``, ``boolean``                  ``float``, ``double``, ``boolean``
``string``, ``enum``, ``uuid``                      ``string`` (any character; a JSON object or
                                                    array given for it: its JSON text, numbers
                                                    as written)
``record``, ``array``, ``map`` (nested values)      ``string``: the value's JSON text
``bytes``, ``fixed``                                ``binary``
``decimal(p, s)`` (p ≤ 38)                          ``decimal(p, s)``: exact, never rounded
``date``                                            ``date``
``timestamp-millis``, ``timestamp-micros``          ``timestamptz`` (an instant: a value without
                                                    its zone is refused)
``local-timestamp-millis``, ``-micros``             ``timestamp``
``time-millis``, ``time-micros``                    ``time``
=================================================  =============================================

The primary key's columns are the table's identifier fields (required); every other column
is optional, as the changefeed's own output schemas make them (a row may lack a column).
A value its column cannot hold is :class:`Unwritable`: the applier stops there, naming the
record (never skipped, never approximated). Pure: pyiceberg's types, no catalog.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation
from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from schemas.jsontext import Number, dumps
from schemas.tables import TableSchema

from ..decoding import ApplyError

Convert = Callable[[Any], Any]  # a value as the changefeed wrote it -> as Iceberg holds it
MAX_PRECISION = 38  # Iceberg's decimals
_WIDE = Context(prec=2 * MAX_PRECISION)  # quantizing to a decimal(38, s) never runs short


class NoIcebergType(ApplyError):
    """A declared column no Iceberg type holds exactly (its name and why)."""


class Unwritable(ValueError):
    """A value its column cannot hold; the applier names the record it came from."""


@dataclass(frozen=True)
class Column:
    """One column: its Iceberg type and how a value becomes what that type holds."""

    name: str
    kind: IcebergType
    convert: Convert
    required: bool = False


def iceberg_schema(table: TableSchema) -> Schema:
    """The Iceberg schema of a declared table: its columns in order, the key as identifiers."""
    fields = []
    for number, column in enumerate(columns(table), start=1):
        fields.append(NestedField(number, column.name, column.kind, required=column.required))
    key_ids = [f.field_id for f in fields if f.name in table.primary_key]
    return Schema(*fields, identifier_field_ids=key_ids)


def columns(table: TableSchema) -> list[Column]:
    """Each declared column with its Iceberg type and converter (refused: NoIcebergType)."""
    out = []
    for field in table.record["fields"]:
        name = field["name"]
        _, avro = _unwrapped(field["type"], name)  # every non-key column is optional
        key = name in table.primary_key
        kind, convert = _mapped(avro, name)
        if key and isinstance(kind, (FloatType, DoubleType)):
            raise NoIcebergType(f"column {name!r}: a float cannot be an Iceberg identifier field")
        out.append(Column(name, kind, convert, required=key))
    return out


def converters(schema: Schema) -> dict[str, Convert]:
    """Each column of an Iceberg table's schema (made here or by anyone) -> its converter."""
    return {field.name: converter(field.field_type, field.name) for field in schema.fields}


def converter(kind: IcebergType, name: str) -> Convert:
    """How a value becomes what a column of Iceberg type ``kind`` holds (refused: by name)."""
    if isinstance(kind, DecimalType):
        return _decimal(kind.precision, kind.scale)
    found = _BY_TYPE.get(type(kind))
    if found is None:
        raise NoIcebergType(f"column {name!r}: the applier does not write {kind} columns")
    return found


def column_type(avro: Any, name: str) -> IcebergType:
    """The Iceberg type of a column's Avro type (a null union: the type inside), by name."""
    _, inside = _unwrapped(avro, name)
    return _mapped(inside, name)[0]


def _unwrapped(avro: Any, name: str) -> tuple[bool, Any]:
    """(nullable, the type inside) of a column's Avro type; a union of two types is refused."""
    if isinstance(avro, list):
        rest = [t for t in avro if t != "null"]
        if len(rest) != 1:
            raise NoIcebergType(f"column {name!r}: the union {avro} has no one Iceberg type")
        return len(rest) < len(avro), rest[0]
    return False, avro


def _mapped(avro: Any, name: str) -> tuple[IcebergType, Convert]:
    """The Iceberg type of an Avro type and its converter (the tables at the module's end)."""
    if isinstance(avro, list):
        _, avro = _unwrapped(avro, name)
    if isinstance(avro, Mapping):
        logical = avro.get("logicalType")
        if logical == "decimal":
            precision, scale = int(avro["precision"]), int(avro.get("scale", 0))
            if precision > MAX_PRECISION:
                raise NoIcebergType(
                    f"column {name!r}: decimal({precision},{scale}) is wider than Iceberg's "
                    f"decimal({MAX_PRECISION}, s)"
                )
            return DecimalType(precision, scale), _decimal(precision, scale)
        if logical in _LOGICAL:
            return _LOGICAL[logical]
        return _mapped(avro["type"], name)
    found = _PRIMITIVE.get(str(avro))
    if found is None:
        raise NoIcebergType(f"column {name!r}: no Iceberg type for Avro type {avro!r}")
    return found


def _integer(bits: int) -> Convert:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def convert(value: Any) -> int:
        if type(value) is int:
            number = value
        elif type(value) is Number and re.fullmatch(r"-?\d+", value.text):
            number = int(value.text)
        else:
            raise Unwritable(f"{_shown(value)} is not an integer")
        if not low <= number <= high:
            raise Unwritable(f"{_shown(value)} does not fit a {bits}-bit integer")
        return number

    return convert


def _decimal(precision: int, scale: int) -> Convert:
    def convert(value: Any) -> Decimal:
        number = _exact_number(value)
        if number is None or not number.is_finite():
            raise Unwritable(f"{_shown(value)} is not a decimal")
        try:
            fixed = number.quantize(Decimal(1).scaleb(-scale), context=_WIDE)
        except InvalidOperation:
            fixed = None
        if fixed is None or fixed != number or len(fixed.as_tuple().digits) > precision:
            raise Unwritable(
                f"{_shown(value)} does not fit decimal({precision},{scale}) without rounding"
            )
        return fixed

    return convert


def _exact_number(value: Any) -> Decimal | None:
    """The exact value of a number as written (JSON text, int, float's shortest text, Decimal)."""
    if isinstance(value, Decimal):
        return value
    kind = type(value)
    if kind is Number:
        text = value.text
    elif kind is float:
        text = repr(value)  # orjson gave a float only where its shortest text is exact
    elif kind in (int, str):
        text = str(value)
    else:
        return None  # a boolean (an int to Python), an object, …
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _floating(value: Any) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    if type(value) is Number:
        return float(value.text)
    raise Unwritable(f"{_shown(value)} is not a number")


def _boolean(value: Any) -> bool:
    if type(value) is not bool:
        raise Unwritable(f"{_shown(value)} is not a boolean")
    return value


def _text(value: Any) -> str:
    if type(value) is str:
        found = value
    elif isinstance(value, (dict, list)):
        found = dumps(value).decode()  # a JSON value: its text, numbers as written
    else:
        raise Unwritable(f"{_shown(value)} is not text (nor a JSON object or array)")
    try:
        found.encode()
    except UnicodeEncodeError as exc:
        raise Unwritable(f"{_shown(value)} is not Unicode text ({exc.reason})") from None
    return found


def _binary(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    raise Unwritable(f"{_shown(value)} is not bytes")


def _date(value: Any) -> datetime.date:
    if type(value) is datetime.date:
        return value
    if type(value) is int:
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=value)
    if type(value) is str:
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            pass
    raise Unwritable(f"{_shown(value)} is not a date")


_FRACTION = re.compile(r"[.,](\d+)")


def _datetime(value: Any, unit: int) -> datetime.datetime:
    """A timestamp as written: a datetime (Avro), an RFC 3339 text, or an int of its unit."""
    if isinstance(value, datetime.datetime):
        return value
    if type(value) is int:
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return epoch + datetime.timedelta(microseconds=value * unit)
    if type(value) is str:
        fraction = _FRACTION.search(value)
        if fraction is not None and fraction.group(1)[6:].strip("0"):
            raise Unwritable(f"{_shown(value)} is finer than a microsecond")
        try:
            return datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
    raise Unwritable(f"{_shown(value)} is not a timestamp")


def _instant(unit: int) -> Convert:
    def convert(value: Any) -> datetime.datetime:
        found = _datetime(value, unit)
        if found.tzinfo is None:
            raise Unwritable(f"{_shown(value)} is an instant without its zone")
        return found.astimezone(datetime.timezone.utc)

    return convert


def _local(unit: int) -> Convert:
    def convert(value: Any) -> datetime.datetime:
        found = _datetime(value, unit)
        if found.tzinfo is not None:
            if type(value) is not int:
                raise Unwritable(f"{_shown(value)} has a zone; the column is a local timestamp")
            found = found.replace(tzinfo=None)
        return found

    return convert


def _time(unit: int) -> Convert:
    def convert(value: Any) -> datetime.time:
        if type(value) is datetime.time:
            return value
        if type(value) is int and 0 <= value * unit < 86_400_000_000:
            seconds, micros = divmod(value * unit, 1_000_000)
            hours, rest = divmod(seconds, 3600)
            return datetime.time(hours, *divmod(rest, 60), micros)
        if type(value) is str:
            try:
                return datetime.time.fromisoformat(value)
            except ValueError:
                pass
        raise Unwritable(f"{_shown(value)} is not a time of day")

    return convert


_PRIMITIVE: dict[str, tuple[IcebergType, Convert]] = {
    "int": (IntegerType(), _integer(32)),
    "long": (LongType(), _integer(64)),
    "float": (FloatType(), _floating),
    "double": (DoubleType(), _floating),
    "boolean": (BooleanType(), _boolean),
    "string": (StringType(), _text),
    "enum": (StringType(), _text),
    "record": (StringType(), _text),  # nested values: their JSON text
    "array": (StringType(), _text),
    "map": (StringType(), _text),
    "bytes": (BinaryType(), _binary),
    "fixed": (BinaryType(), _binary),
}
_LOGICAL: dict[str, tuple[IcebergType, Convert]] = {
    "date": (DateType(), _date),
    "timestamp-millis": (TimestamptzType(), _instant(1000)),
    "timestamp-micros": (TimestamptzType(), _instant(1)),
    "local-timestamp-millis": (TimestampType(), _local(1000)),
    "local-timestamp-micros": (TimestampType(), _local(1)),
    "time-millis": (TimeType(), _time(1000)),
    "time-micros": (TimeType(), _time(1)),
    "uuid": (StringType(), _text),
}
_BY_TYPE: dict[type, Convert] = {
    IntegerType: _integer(32),
    LongType: _integer(64),
    FloatType: _floating,
    DoubleType: _floating,
    BooleanType: _boolean,
    StringType: _text,
    BinaryType: _binary,
    DateType: _date,
    TimestamptzType: _instant(1),
    TimestampType: _local(1),
    TimeType: _time(1),
}


def _shown(value: Any) -> str:
    text = value.text if type(value) is Number else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
