r"""The COPY text an applier stages: any value reads back as itself, by COPY's own rules.

PostgreSQL's text format (``COPY … FROM STDIN``): fields split at a tab, rows at a newline, a
field of exactly backslash-N is NULL, and a backslash starts an escape (``\t``, ``\n``, an
octal or hex byte, or the next character itself). :func:`copy_fields` reads a line so; every
value :func:`field` writes must come back unchanged, whatever its characters.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from highwater_consumer.decoding import Decoder, JsonDecoder
from highwater_consumer.staging import NULL, Table, field, last_versions, stage, stage_records
from highwater_consumer.windows import Row, images
from schemas.hlc import Hlc
from schemas.jsontext import Number

_SIMPLE = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9a-fA-F]{1,2})|(.))", re.DOTALL)


def copy_fields(line: str) -> list[str | None]:
    """A COPY text line's fields as PostgreSQL reads them (None: NULL)."""
    assert "\n" not in line, "a raw newline would end the row"
    assert "\r" not in line, "so would a carriage return"

    def one(match: re.Match[str]) -> str:
        octal, hexa, other = match.groups()
        if octal:
            return chr(int(octal, 8))
        if hexa:
            return chr(int(hexa, 16))
        return _SIMPLE.get(other, other)

    return [None if f == NULL else _ESCAPE.sub(one, f) for f in line.split("\t")]


@given(st.text())
def test_any_text_reads_back_as_itself(value: str) -> None:
    assert copy_fields(field(value)) == [value]


def test_values_are_the_text_postgresql_reads_for_them() -> None:
    assert field(None) is NULL
    assert copy_fields(field("\\N")) == ["\\N"], "the string is not NULL"
    assert copy_fields(field("NULL")) == ["NULL"]
    assert field(Number("1.50")) == "1.50"
    assert field(Number("-0")) == "-0"
    assert field(2**70) == str(2**70)
    assert copy_fields(field({"a": Number("1E+2"), "t": "x\ty"})) == ['{"a":1E+2,"t":"x\\ty"}']
    assert field(True) == "true"
    assert field(b"\x00\xff") == "\\\\x00ff"  # bytea's hex form, its backslash escaped


TABLE = Table(
    "t",
    sql.Identifier("t"),
    {"k": "text", "n": "integer", "a": "numeric", "b": "text"},
    ("k", "n"),
    {"k": "text", "n": "integer", "a": "numeric", "b": "text"},
    0,
)
JSON = Decoder(JsonDecoder())


def lines(data: bytes) -> list[str]:
    """COPY text's rows (a newline ends each; no other line break does)."""
    text = data.decode()
    assert text == "" or text.endswith("\n")
    return text.split("\n")[:-1]


def rows(*changes: tuple[int, str, str | None]) -> list[Row]:
    out = []
    for time, key, after in changes:
        value = f'{{"after":{after or "null"},"updated":"{time}.0000000000"}}'
        out.append(
            Row.of(Hlc(time), "t", key.encode(), value.encode(), ("o", 0), time, JSON.change)
        )
    return out


@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(st.none(), st.text())), max_size=30))
def test_each_key_is_staged_once_as_its_last_version(changes: list[tuple[int, Any]]) -> None:
    given_rows = rows(
        *[
            (t, f'["k",{n}]', None if text is None else orjson.dumps({"b": text}).decode())
            for t, (n, text) in enumerate(changes, start=1)
        ]
    )
    last: dict[int, Any] = {}
    for n, text in changes:
        last[n] = text
    collapsed = last_versions(given_rows).get("t", [])
    staged = stage(TABLE, images(collapsed))
    read = {
        int(f[2]): (f[0], f[3] if len(f) > 3 else None)  # type: ignore[arg-type]
        for f in map(copy_fields, lines(staged.data))
    }
    assert read == {n: ("0", None) if t is None else ("1", t) for n, t in last.items()}
    records = stage_records(TABLE, collapsed)
    assert records is not None
    assert records.counts == staged.counts
    for line, row in zip(lines(records.data), collapsed, strict=True):
        assert copy_fields(line)[1:] == [row.key.decode(), (row.value or b"").decode()]


def test_shapes_set_only_their_columns() -> None:
    staged = stage(
        TABLE,
        images(
            rows(
                (1, '["x",1]', '{"a":1.50}'),
                (2, '["x",2]', '{"a":2,"b":"y"}'),
                (3, '["x",3]', None),
            )
        ),
    )
    assert staged.columns == ("k", "n", "a", "b")
    assert staged.shapes == (("a",), ("a", "b"))
    assert staged.counts == (1, 1, 1)
    assert [copy_fields(line) for line in lines(staged.data)] == [
        ["1", "x", "1", "1.50", None],
        ["2", "x", "2", "2", "y"],
        ["0", "x", "3", None, None],
    ]
