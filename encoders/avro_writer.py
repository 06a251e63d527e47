"""Avro binary writers compiled from a schema, for the shapes Highwater derives.

fastavro's ``schemaless_writer`` is general: for every union it looks for the branch that
fits the value, and for a union holding a record it validates the whole record first. Our
schemas are records whose fields are ``["null", T]`` unions, so that search costs more than
the writing (37 µs for an orders envelope against 12 µs here, docs/benchmarks.md).
:func:`compile_writer` turns a schema into a function ``write(out: bytearray, datum)`` that
knows each branch in advance: null-first unions, records, and the primitive types. Anything
else (logical types, enums, arrays, maps, fixed, other unions) is not compiled: the caller
then uses fastavro for that schema, so every schema is written one way or the other.

A value of the wrong type raises ``TypeError``, ``ValueError``, ``AttributeError`` or
``struct.error``; the encoder turns that into an ``EncodingError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

Write = Callable[[bytearray, Any], None]

_DOUBLE = struct.Struct("<d").pack
_FLOAT = struct.Struct("<f").pack
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class NotCompiled(Exception):
    """The schema uses a type this module does not compile."""


def _long(out: bytearray, n: int) -> None:
    if not _LONG_MIN <= n <= _LONG_MAX:
        raise ValueError(f"{n} does not fit an Avro long")
    n = (n << 1) ^ (n >> 63)  # zig-zag, then base-128 varint
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _int(out: bytearray, n: int) -> None:
    if type(n) is not int:
        raise TypeError(f"{n!r} is not an integer")
    _long(out, n)


def _string(out: bytearray, s: str) -> None:
    data = s.encode()
    _long(out, len(data))
    out += data


def _bytes(out: bytearray, b: bytes) -> None:
    if not isinstance(b, bytes | bytearray):
        raise TypeError(f"{type(b).__name__} is not bytes")
    _long(out, len(b))
    out += b


def _double(out: bytearray, v: float) -> None:
    if type(v) is bool:
        raise TypeError("a boolean is not a double")
    out += _DOUBLE(v)


def _float(out: bytearray, v: float) -> None:
    if type(v) is bool:
        raise TypeError("a boolean is not a float")
    out += _FLOAT(v)


def _boolean(out: bytearray, v: bool) -> None:
    if v is True:
        out.append(1)
    elif v is False:
        out.append(0)
    else:
        raise TypeError(f"{v!r} is not a boolean")


def _null(_out: bytearray, v: None) -> None:
    if v is not None:
        raise TypeError(f"{v!r} is not null")


_PRIMITIVES: dict[str, Write] = {
    "null": _null,
    "boolean": _boolean,
    "int": _int,
    "long": _int,
    "float": _float,
    "double": _double,
    "string": _string,
    "bytes": _bytes,
}


def compile_writer(schema: Any, named: dict[str, Write] | None = None) -> Write:
    """A writer for ``schema``; :class:`NotCompiled` if it holds a type we do not compile."""
    named = {} if named is None else named
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in named:  # a record named earlier (records register before their fields)
            return named[schema]
        raise NotCompiled(schema)
    if isinstance(schema, list):
        return _nullable(schema, named)
    if schema.get("logicalType") is not None:
        raise NotCompiled(schema["logicalType"])
    if schema.get("type") == "record":
        return _record(schema, named)
    if isinstance(schema.get("type"), str) and schema["type"] in _PRIMITIVES:
        return _PRIMITIVES[schema["type"]]
    raise NotCompiled(str(schema.get("type")))


def _nullable(union: list[Any], named: dict[str, Write]) -> Write:
    if len(union) != 2 or union[0] != "null":
        raise NotCompiled("a union other than [null, T]")
    inner = compile_writer(union[1], named)

    def write(out: bytearray, datum: Any) -> None:
        if datum is None:
            out.append(0)
        else:
            out.append(2)  # branch 1, zig-zag encoded
            inner(out, datum)

    return write


def _record(schema: dict[str, Any], named: dict[str, Write]) -> Write:
    fields: list[tuple[str, bool, Write]] = []

    def write(out: bytearray, datum: dict[str, Any]) -> None:
        get = datum.get
        for name, nullable, inner in fields:
            value = get(name)
            if nullable:
                if value is None:
                    out.append(0)
                    continue
                out.append(2)
            inner(out, value)

    named[schema["name"]] = write  # before the fields: a field may refer to the record
    for field in schema["fields"]:
        kind = field["type"]
        if isinstance(kind, list) and len(kind) == 2 and kind[0] == "null":
            fields.append((field["name"], True, compile_writer(kind[1], named)))
        else:
            fields.append((field["name"], False, compile_writer(kind, named)))
    return write
