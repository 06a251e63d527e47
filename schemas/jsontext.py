"""JSON values that keep the source's numbers exactly (contract §5.6: values unchanged).

orjson parses a source value several times faster than the standard library, but its Python
values lose what JSON text can say: a number with a fraction or an exponent becomes a float
(``12345678901234567.89`` → ``1.2345678901234568e+16``, ``1.10`` → ``1.1``, ``1E+2`` →
``100.0``), an integer beyond 64 bits a float too, and ``-0`` becomes ``0``. So a value is
parsed with orjson first, and :func:`lossy` tells whether that lost anything; only then is it
read again with :func:`loads_exact`, where such numbers become :class:`Number` (their text).
:func:`dumps` writes a :class:`Number` back verbatim. Strings and nesting need no such care:
orjson keeps their characters and order.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import orjson

# an integer -0 in a value position (orjson reads it as 0); a false alarm only costs time
_NEGATIVE_ZERO = re.compile(rb"[\[:,]\s*-0(?![0-9.eE])")


class Number:
    """A JSON number as its source text, for numbers a Python int or float would change."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"Number({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Number) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def decimal(self) -> Decimal:
        """The exact value."""
        return Decimal(self.text)

    def plain(self) -> int | float:
        """The nearest Python number (for outputs whose declared type is a float)."""
        if any(c in self.text for c in ".eE"):
            return float(self.text)
        return int(self.text)


def _integer(text: str) -> int | Number:
    # orjson-sized integers stay ints; -0 and those beyond 64 bits keep their text
    if text == "-0" or len(text) > 18:
        return Number(text)
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_EXACT = json.JSONDecoder(parse_float=Number, parse_int=_integer, parse_constant=_no_constant)
# first bytes after which json.loads would look for a BOM or another encoding than UTF-8
_NOT_PLAIN_UTF8 = frozenset((0x00, 0xEF, 0xFE, 0xFF))


def loads_exact(data: bytes | str) -> Any:
    """Parse JSON keeping every fraction, exponent, -0 and big integer as :class:`Number`.

    Raises ``ValueError`` for what is not JSON (NaN and Infinity included), ``RecursionError``
    for nesting deeper than the interpreter allows. As ``json.loads`` with these hooks, with
    one decoder made once: bytes ``json.loads`` would read as UTF-8 are decoded as it does
    (``surrogatepass``), the rest (a BOM, UTF-16 or UTF-32) goes through ``json.loads``.
    """
    if isinstance(data, str):
        return _EXACT.decode(data)
    if data and data[0] not in _NOT_PLAIN_UTF8 and (len(data) == 1 or data[1]):
        return _EXACT.decode(data.decode("utf-8", "surrogatepass"))
    return json.loads(data, parse_float=Number, parse_int=_integer, parse_constant=_no_constant)


def lossy(value: Any, raw: bytes) -> bool:
    """True when ``value`` (orjson's parse of ``raw``) lost a number's exact text."""
    if _has_float(value):
        return True
    return b"-0" in raw and _NEGATIVE_ZERO.search(raw) is not None


def _has_float(value: Any) -> bool:
    """Whether a float is anywhere in ``value`` (a loop over a stack: no frame per member)."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            return True
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


def fragment(value: Any) -> Any:
    """Orjson's ``default`` hook: a :class:`Number` is written as its text."""
    if type(value) is Number:
        return orjson.Fragment(value.text)
    raise TypeError(f"{type(value).__name__} is not JSON")


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON; a :class:`Number` is written as its text."""
    return orjson.dumps(value, default=fragment)
