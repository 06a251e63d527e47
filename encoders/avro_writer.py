"""Avro binary writers compiled from a schema, for the shapes Highwater derives.

fastavro's ``schemaless_writer`` is general: for every union it looks for the branch that
fits the value, and for a union holding a record it validates the whole record first. Our
schemas are records whose fields are ``["null", T]`` unions, so that search costs more than
the writing (37 µs for an orders envelope against 8 µs here, docs/benchmarks.md).
:func:`compile_writer` turns a schema into a function ``write(out: bytearray, datum)`` that
knows each branch in advance: null-first unions, records, arrays and the primitive types. Each
primitive encoding is written once, as a source template (``_INLINE``); a record becomes one
generated function with its primitive fields inlined, so no call is made per field. Anything
else (logical types, enums, maps, fixed, other unions) is not compiled: the caller
then uses fastavro for that schema, so every schema is written one way or the other.

A value of the wrong type raises ``TypeError`` naming it, one out of the type's range
``ValueError``; the encoder turns either into an ``EncodingError``.
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


_VARINT = ["while n > 127:", "    out.append((n & 127) | 128)", "    n >>= 7", "out.append(n)"]
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _integer_check(kind: str, low: int, high: int) -> list[str]:
    """Zig-zag varint of an integer within ``[low, high]`` (an Avro ``int`` or ``long``)."""
    return [
        "if type(v) is not int:",
        "    raise TypeError(f'{v!r} is not an integer')",
        f"if not {low} <= v <= {high}:",
        f"    raise ValueError(f'{{v}} does not fit an Avro {kind}')",
        "n = (v << 1) ^ (v >> 63)",
        *_VARINT,
    ]


# Source lines that write the value ``v`` of a primitive type into ``out``.
_INLINE: dict[str, list[str]] = {
    "string": [
        "if type(v) is not str:",
        "    raise TypeError(f'{v!r} is not a string')",
        "b = v.encode()",
        "n = len(b) << 1",  # zig-zag length
        *_VARINT,
        "out += b",
    ],
    "bytes": [
        "if not isinstance(v, (bytes, bytearray)):",
        "    raise TypeError(f'{type(v).__name__} is not bytes')",
        "n = len(v) << 1",
        *_VARINT,
        "out += v",
    ],
    "long": _integer_check("long", _LONG_MIN, _LONG_MAX),
    "int": _integer_check("int", _INT_MIN, _INT_MAX),
    "double": [
        "if type(v) is not float and type(v) is not int:",
        "    raise TypeError(f'{v!r} is not a number')",
        "out += _DOUBLE(v)",
    ],
    "float": [
        "if type(v) is not float and type(v) is not int:",
        "    raise TypeError(f'{v!r} is not a number')",
        "out += _FLOAT(v)",
    ],
    "boolean": [
        "if v is True:",
        "    out.append(1)",
        "elif v is False:",
        "    out.append(0)",
        "else:",
        "    raise TypeError(f'{v!r} is not a boolean')",
    ],
    "null": ["if v is not None:", "    raise TypeError(f'{v!r} is not null')"],
}


def _generated(name: str, lines: list[str], namespace: dict[str, Any]) -> Write:
    """Compile ``def write(out, v)`` (or ``d``) from source lines built from the templates."""
    namespace = {"_DOUBLE": _DOUBLE, "_FLOAT": _FLOAT, **namespace}
    source = "\n".join(lines)
    exec(compile(source, f"<avro writer {name}>", "exec"), namespace)  # noqa: S102 - our templates
    write: Write = namespace["write"]
    return write


# One writer per primitive type, from the same templates the records inline.
_PRIMITIVES: dict[str, Write] = {
    kind: _generated(kind, ["def write(out, v):", *(f"    {line}" for line in body)], {})
    for kind, body in _INLINE.items()
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
    if schema.get("type") == "array":
        return _array(compile_writer(schema["items"], named))
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


def _array(item: Write) -> Write:
    """An array as one block of its items (the count, zig-zag), then the empty block."""

    def write(out: bytearray, datum: Any) -> None:
        if not isinstance(datum, (list, tuple)):
            raise TypeError(f"{datum!r} is not an array")
        if datum:
            n = len(datum) << 1
            while n > 127:
                out.append((n & 127) | 128)
                n >>= 7
            out.append(n)
            for value in datum:
                item(out, value)
        out.append(0)

    return write


def _record(schema: dict[str, Any], named: dict[str, Write]) -> Write:
    """A record's writer, as one generated function.

    A field of a primitive type is written inline (no call per field); other fields call
    their own writers. A field referring to the record itself goes through ``cell``.
    """
    cell: list[Write] = []

    def until_compiled(out: bytearray, datum: Any) -> None:
        cell[0](out, datum)

    named[schema["name"]] = until_compiled
    namespace: dict[str, Any] = {}
    lines = ["def write(out, d):", "    get = d.get"]
    for i, field in enumerate(schema["fields"]):
        kind = field["type"]
        nullable = isinstance(kind, list) and len(kind) == 2 and kind[0] == "null"
        inner = kind[1] if nullable else kind
        if isinstance(inner, str) and inner in _INLINE:
            body = _INLINE[inner]
        else:
            namespace[f"_w{i}"] = compile_writer(inner, named)
            body = [f"_w{i}(out, v)"]
        lines.append(f"    v = get({field['name']!r})")
        if nullable:
            lines += ["    if v is None:", "        out.append(0)", "    else:"]
            lines += ["        out.append(2)", *(f"        {line}" for line in body)]
        else:
            lines += [f"    {line}" for line in body]
    write = _generated(schema["name"], lines, namespace)
    cell.append(write)
    named[schema["name"]] = write
    return write
