"""``highwater apply``'s COPY path on a real PostgreSQL: values exact, windows whole.

A piece of a window goes to PostgreSQL as one COPY into a staging table and one statement per
kind from there (:mod:`highwater_consumer.postgres`). JSON rows are staged as their records
(PostgreSQL reads the values), any other rows as their values (Python writes COPY's text):
each test runs both ways (``path``) and reads the table back. The data is what real feeds
carry: text with tabs, newlines, carriage returns, backslashes, quotes and characters beyond
the BMP (raw and as JSON escapes), the strings ``NULL`` and backslash-N beside a real NULL, numbers
beyond a double and a 64-bit integer, JSON values, keys updated, deleted and inserted again in
one window, windows in pieces, a column added mid-window.

Crash tests: an applier process SIGKILLed inside a window's transaction (after its COPY,
after its merge, after its R was written) leaves the table at the previous R; the negative
control is an applier that commits its rows before its R, killed at the same place, which the
same check finds.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import psycopg
import pytest

from highwater_consumer.decoding import Change, Decoder, JsonDecoder
from highwater_consumer.postgres import PostgresApplier, apply
from highwater_consumer.windows import Row, Window
from pipeline.dev.postgres import PostgresInfo
from schemas.hlc import Hlc
from tests.support.process import ROOT

JSON = Decoder(JsonDecoder())
TABLE = """
CREATE TABLE {name} (
    region text, id numeric, note text, amount numeric, ratio float8, meta json, doc jsonb,
    flag boolean, maybe text, n bigint, extra text,
    PRIMARY KEY (region, id)
)
"""
COLUMNS = (
    "region, id::text, note, amount::text, ratio, meta::text, doc::text, flag, maybe, n, extra"
)
PATHS = ["records", "values"]


def _values_reader(key: bytes, value: bytes) -> Change:
    """The JSON decoder's change, as a reader that is not a JsonDecoder's (Avro's path)."""
    return JSON.change(key, value)


def row(time: int, key: str, after: str | None, *, table: str = "t", path: str) -> Row:
    """A row change as the changefeed writes it: key and ``after`` JSON text as given."""
    value = f'{{"after":{after or "null"},"before":null,"updated":"{time}.0000000000"}}'
    reader = JSON.change if path == "records" else _values_reader
    return Row.of(Hlc(time), table, key.encode(), value.encode(), ("out", 0), time, reader)


def make_table(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {name}")
        connection.execute(TABLE.format(name=name))


def read(
    dsn: str, name: str, changefeed: str
) -> tuple[str | None, dict[tuple[str, str], tuple[Any, ...]]]:
    """The stored R and the table (numbers and JSON as their text), in one transaction."""
    with psycopg.connect(dsn) as connection:
        connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        found = connection.execute(
            "SELECT resolved FROM highwater_applied WHERE changefeed = %s", (changefeed,)
        ).fetchone()
        rows = connection.execute(f"SELECT {COLUMNS} FROM {name}").fetchall()
    return (None if found is None else found[0]), {(r[0], r[1]): tuple(r[2:]) for r in rows}


def applier_for(dsn: str, changefeed: str, name: str) -> PostgresApplier:
    applier = PostgresApplier(dsn, changefeed, {"t": name})
    applier.start()
    return applier


# text as real feeds carry it: COPY's text format must escape the first five
HARD_TEXT = "tab\there, new\nline, cr\r, back\\slash \\N \\\\., \"quotes\" 'single', 😀 𝄞 é"


def after(**values: Any) -> str:
    """An ``after`` as orjson writes it (a changefeed's JSON); orjson.Fragment: exact text."""
    return orjson.dumps(values).decode()


@pytest.mark.parametrize("path", PATHS)
def test_values_reach_the_table_exactly_as_the_changefeed_wrote_them(
    postgres: PostgresInfo, path: str
) -> None:
    name = f"exact_{path}"
    make_table(postgres.dsn, name)
    big = "123456789012345678901234567890.123456789012345678901234567890"
    rows = [
        row(
            10,
            '["r\\tx\\\\y",123456789012345678901234567890]',  # a key of tab, backslash, 2^96
            after(
                note=HARD_TEXT,
                amount=orjson.Fragment(big.encode()),
                ratio=orjson.Fragment(b"0.1"),
                meta=orjson.Fragment(
                    '{"a":1.10,"b":[1E+2,"x\\ty\\\\z"],"c":null,"d":"é"}'.encode()
                ),
                doc={"k": [1, 2, {"deep": "é\n"}]},
                flag=True,
                maybe=None,
                n=9223372036854775807,
                extra="NULL",
            ),
            path=path,
        ),
        row(
            10,
            '["plain",1.50]',
            after(
                note="\\N",  # the string, not COPY's NULL
                amount=orjson.Fragment(b"1.50"),
                ratio=orjson.Fragment(b"-1.5E-300"),
                meta=orjson.Fragment(b"[]"),
                doc="a string",  # a JSON string into jsonb: the text read as JSON
                flag=False,
                maybe="",
                n=orjson.Fragment(b"-0"),
                extra=None,
            ).replace('"a string"', '"\\"a string\\""'),
            path=path,
        ),
        row(
            10,
            '["\\ud83d\\ude00 escaped",2]',  # an escaped pair beyond the BMP (json.dumps)
            '{"note":"\\ud834\\udd1e \\u0009\\u000a \\"\\\\","amount":1E+2,"ratio":1e2,'
            '"meta":{ "spaced" : [ 1 , 2.0 ] },"doc":null,"flag":null,"maybe":"NULL",'
            '"n":12,"extra":"\\\\N"}',
            path=path,
        ),
    ]
    applier = applier_for(postgres.dsn, name, name)
    try:
        assert applier.apply(Window(Hlc(10), tuple(rows)))
    finally:
        applier.close()
    resolved, table = read(postgres.dsn, name, name)
    assert resolved == "10.0000000000"
    assert table == {
        ("r\tx\\y", "123456789012345678901234567890"): (
            HARD_TEXT,
            big,
            0.1,
            '{"a":1.10,"b":[1E+2,"x\\ty\\\\z"],"c":null,"d":"é"}',
            '{"k": [1, 2, {"deep": "é\\n"}]}',
            True,
            None,
            9223372036854775807,
            "NULL",
        ),
        ("plain", "1.50"): ("\\N", "1.50", -1.5e-300, "[]", '"a string"', False, "", 0, None),
        ("😀 escaped", "2"): (
            '𝄞 \t\n "\\',
            "100",
            100.0,
            '{ "spaced" : [ 1 , 2.0 ] }' if path == "records" else '{"spaced":[1,2.0]}',
            None,
            None,
            "NULL",
            12,
            "\\N",
        ),
    }


def test_both_paths_write_what_the_per_row_statements_wrote(postgres: PostgresInfo) -> None:
    """The old applier (a statement a row, the bench's baseline) is the oracle."""
    from pipeline.dev.bench_consumer import StatementApplier  # noqa: PLC0415

    windows = [
        [
            row(5, f'["r{n % 3}",{n}]', after(note=f"{HARD_TEXT} {n}", amount=n, n=n), path=path)
            for n in range(50)
        ]
        + [row(6, '["r0",3]', None, path=path), row(6, '["r1",4]', after(note="NULL"), path=path)]
        for path in PATHS
    ]
    tables = {}
    for name, kind, rows in [
        ("oracle", StatementApplier, windows[0]),
        ("by_records", PostgresApplier, windows[0]),
        ("by_values", PostgresApplier, windows[1]),
    ]:
        make_table(postgres.dsn, name)
        applier = kind(postgres.dsn, name, {"t": name})
        applier.start()
        try:
            assert applier.apply(Window(Hlc(6), tuple(rows)))
        finally:
            applier.close()
        tables[name] = read(postgres.dsn, name, name)[1]
    assert len(tables["oracle"]) == 49
    assert tables["by_records"] == tables["oracle"]
    assert tables["by_values"] == tables["oracle"]


@pytest.mark.parametrize("path", PATHS)
def test_a_key_updated_deleted_and_inserted_again_in_one_window_ends_as_its_last_version(
    postgres: PostgresInfo, path: str
) -> None:
    name = f"versions_{path}"
    make_table(postgres.dsn, name)
    applier = applier_for(postgres.dsn, name, name)
    try:
        first = [row(1, f'["r",{n}]', after(note=f"first {n}", n=n), path=path) for n in (1, 2, 3)]
        assert applier.apply(Window(Hlc(1), tuple(first)))
        second = [
            row(2, '["r",1]', after(note="updated", n=10), path=path),
            row(3, '["r",1]', None, path=path),
            row(4, '["r",1]', after(note="inserted again", n=11), path=path),  # 1: the last
            row(2, '["r",2]', None, path=path),  # 2: deleted
            row(2, '["r",4]', after(note="new", n=4), path=path),
            row(3, '["r",4]', None, path=path),  # 4: inserted and deleted: never there
            row(3, '["r",5]', None, path=path),  # 5: a delete of a key never there
            row(4, '["r",3]', after(note="NULL", n=None), path=path),
        ]
        second.sort()  # commit order
        assert applier.apply(Window(Hlc(4), tuple(second)))
    finally:
        applier.close()
    resolved, table = read(postgres.dsn, name, name)
    assert resolved == "4.0000000000"
    assert {k: (v[0], v[7]) for k, v in table.items()} == {
        ("r", "1"): ("inserted again", 11),
        ("r", "3"): ("NULL", None),
    }


@pytest.mark.parametrize("path", PATHS)
def test_a_window_in_pieces_is_one_transaction_and_its_pieces_apply_in_order(
    postgres: PostgresInfo, path: str
) -> None:
    name = f"pieces_{path}"
    make_table(postgres.dsn, name)
    applier = applier_for(postgres.dsn, name, name)
    try:
        assert applier.apply(
            Window(Hlc(1), (row(1, '["r",1]', after(note="at 1", extra="kept"), path=path),))
        )
        pieces = [
            (
                row(2, '["r",1]', after(note="piece 1"), path=path),
                row(2, '["r",2]', after(note="2"), path=path),
            ),
            (
                row(3, '["r",2]', None, path=path),
                row(3, '["r",1]', after(note="piece 2", n=2), path=path),
            ),
            (row(4, '["r",2]', after(note="2 again", extra="e"), path=path),),
        ]
        for piece in pieces[:-1]:
            assert applier.apply(Window(Hlc(4), piece, last=False))
            resolved, table = read(postgres.dsn, name, name)
            assert resolved == "1.0000000000", "a piece commits nothing"
            assert table[("r", "1")][0] == "at 1"
        assert applier.apply(Window(Hlc(4), pieces[-1], last=True))
    finally:
        applier.close()
    resolved, table = read(postgres.dsn, name, name)
    assert resolved == "4.0000000000"
    assert {k: (v[0], v[7], v[8]) for k, v in table.items()} == {
        ("r", "1"): ("piece 2", 2, "kept"),  # a shape without extra leaves it as it was
        ("r", "2"): ("2 again", None, "e"),
    }


@pytest.mark.parametrize("path", PATHS)
def test_a_piece_that_fails_fails_its_window_whole(postgres: PostgresInfo, path: str) -> None:
    name = f"failing_{path}"
    make_table(postgres.dsn, name)
    applier = applier_for(postgres.dsn, name, name)
    try:
        assert applier.apply(Window(Hlc(1), (row(1, '["r",1]', after(note="at 1"), path=path),)))
        applier.apply(
            Window(Hlc(2), (row(2, '["r",1]', after(note="piece 1"), path=path),), last=False)
        )
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            applier.apply(
                Window(
                    Hlc(2),
                    (row(2, '["r",2]', after(amount="not a number"), path=path),),
                    last=False,
                )
            )
        with pytest.raises(Exception, match="an earlier piece failed"):
            applier.apply(Window(Hlc(2), (), last=True))
    finally:
        applier.close()
    resolved, table = read(postgres.dsn, name, name)
    assert resolved == "1.0000000000"
    assert table[("r", "1")][0] == "at 1"


class Windows:
    """A consumer double: hands over given windows, records the acknowledged ones."""

    def __init__(self, windows: list[Window], on_ack: Callable[[Window], None]) -> None:
        self.given, self.on_ack, self.acked = windows, on_ack, []

    def windows(self, **_: Any) -> Iterator[Window]:
        yield from self.given

    def ack(self, window: Window) -> None:
        self.on_ack(window)
        self.acked.append(str(window.resolved))


def test_pipelined_windows_are_acknowledged_only_once_committed_and_none_after_a_failure(
    postgres: PostgresInfo,
) -> None:
    """The pipeline acks a window after its commit, and stops at a failed one.

    Negative control: the same windows applied one by one by a loop that goes on after a
    failure store the last R over a window never written, which the check finds.
    """
    windows = [
        Window(
            Hlc(t), (row(t, f'["r",{t}]', after(note=f"at {t}", amount=amount), path="records"),)
        )
        for t, amount in [(1, 1), (2, 2), (3, "bad"), (4, 4), (5, 5)]
    ]
    name = "pipelined"
    make_table(postgres.dsn, name)
    applier = applier_for(postgres.dsn, name, name)

    def committed(window: Window) -> None:
        stored = read(postgres.dsn, name, name)[0]
        assert stored is not None, "acked before its commit"
        assert Hlc.parse(stored) >= window.resolved, "acked before its commit"

    consumer = Windows(windows, committed)
    try:
        with pytest.raises(psycopg.errors.InvalidTextRepresentation):
            apply(consumer, applier)
    finally:
        applier.close()
    resolved, table = read(postgres.dsn, name, name)
    assert consumer.acked == ["1.0000000000", "2.0000000000"]
    assert resolved == "2.0000000000"
    assert sorted(table) == [("r", "1"), ("r", "2")]
    assert check(table, resolved, windows) == []

    make_table(postgres.dsn, "careless")  # the negative control
    careless = applier_for(postgres.dsn, "careless", "careless")
    try:
        for window in windows:
            try:
                careless.apply(window)
            except psycopg.Error:
                continue  # what the pipeline must not do
    finally:
        careless.close()
    resolved, table = read(postgres.dsn, "careless", "careless")
    assert resolved == "5.0000000000"
    assert check(table, resolved, windows) == ["missing ('r', '3')"]


def check(table: dict[Any, Any], resolved: str | None, windows: list[Window]) -> list[str]:
    """How the table's keys differ from the windows' at ``resolved`` (empty: equal)."""
    want: set[Any] = set()
    for window in windows:
        if resolved is None or window.resolved > Hlc.parse(resolved):
            break
        for r in window.rows:
            region, number = orjson.loads(r.key)
            key = (region, str(number))
            if r.after is None:
                want.discard(key)
            else:
                want.add(key)
    return [f"missing {k}" for k in sorted(want - table.keys())] + [
        f"not deleted {k}" for k in sorted(table.keys() - want)
    ]


# --- crashes inside a window's transaction (an applier process, SIGKILLed) ---


def crash_windows(path: str) -> list[Window]:
    """R 10: keys 1-5; R 20 in two pieces: updates, a delete, an insert."""
    first = tuple(row(10, f'["r",{n}]', after(note=f"at 10 {n}"), path=path) for n in range(1, 6))
    second = [
        (row(20, '["r",1]', after(note="at 20"), path=path), row(20, '["r",3]', None, path=path)),
        (
            row(20, '["r",6]', after(note="at 20"), path=path),
            row(20, '["r",2]', after(note="at 20"), path=path),
        ),
    ]
    return [
        Window(Hlc(10), first),
        Window(Hlc(20), second[0], last=False),
        Window(Hlc(20), second[1], last=True),
    ]


def expected(resolved: str) -> dict[tuple[str, str], str]:
    notes = {("r", str(n)): f"at 10 {n}" for n in range(1, 6)}
    if resolved == "20.0000000000":
        notes.update({("r", "1"): "at 20", ("r", "2"): "at 20", ("r", "6"): "at 20"})
        del notes[("r", "3")]
    return notes


def crashing_applier(dsn: str, name: str, point: str, path: str, mode: str) -> None:
    """The process a crash test kills: R 10 applied, then SIGKILL at ``point`` in R 20.

    ``mode`` ``commit-early``: a broken applier (the negative control) that commits what it
    merged before its R is written.
    """
    applier = PostgresApplier(dsn, name, {"t": name})
    applier.start()
    windows = crash_windows(path)
    assert applier.apply(windows[0])

    armed = False  # the kill comes in the window's last piece: after the first's merge

    def reached(step: str) -> None:
        if step == "merged" and mode == "commit-early":
            applier.connection.execute("COMMIT")
            applier.connection.execute("BEGIN")
        if armed and step == point:
            os.kill(os.getpid(), signal.SIGKILL)

    applier.reached = reached
    applier.apply(windows[1])
    armed = True
    applier.apply(windows[2])
    raise AssertionError(f"{point} was never reached")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("point", ["copied", "merged", "stored"])
def test_a_crash_inside_a_window_leaves_the_table_at_the_previous_r(
    postgres: PostgresInfo, point: str, path: str
) -> None:
    name = f"crash_{point}_{path}"
    make_table(postgres.dsn, name)
    found = {}
    for mode in ["whole", "commit-early"]:
        with psycopg.connect(postgres.dsn, autocommit=True) as connection:
            connection.execute(f"TRUNCATE {name}")
            connection.execute("DELETE FROM highwater_applied WHERE changefeed = %s", (name,))
        process = subprocess.run(
            [sys.executable, "-m", __name__, postgres.dsn, name, point, path, mode],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
        resolved, table = read(postgres.dsn, name, name)
        assert resolved == "10.0000000000"
        notes = {k: v[0] for k, v in table.items()}
        found[mode] = notes == expected(resolved)
        if mode == "whole":
            assert notes == expected(resolved), f"SIGKILL at {point}: the table left at R 10"
    # the negative control: rows committed before their R are found by the same check
    assert found == {"whole": True, "commit-early": False}


if __name__ == "__main__":
    crashing_applier(*sys.argv[1:6])


def test_two_changefeed_tables_into_one_target_each_have_their_staging(
    postgres: PostgresInfo,
) -> None:
    name = "shared_target"
    make_table(postgres.dsn, name)
    applier = PostgresApplier(postgres.dsn, name, {"t": name, "u": name})
    applier.start()
    try:
        rows = [
            row(1, '["t",1]', after(note="from t"), table="t", path="records"),
            row(1, '["u",1]', after(note="from u"), table="u", path="values"),
        ]
        assert applier.apply(Window(Hlc(1), tuple(rows)))
    finally:
        applier.close()
    assert {k: v[0] for k, v in read(postgres.dsn, name, name)[1].items()} == {
        ("t", "1"): "from t",
        ("u", "1"): "from u",
    }


def test_avro_rows_stage_their_values_exactly(postgres: PostgresInfo) -> None:
    """Avro rows (Confluent's wire format) take the values path: decimals by their digits."""
    import io  # noqa: PLC0415
    from decimal import Decimal  # noqa: PLC0415

    import fastavro  # noqa: PLC0415

    from highwater_consumer.decoding import AvroDecoder  # noqa: PLC0415

    key_schema = {
        "type": "record",
        "name": "k",
        "fields": [{"name": "region", "type": "string"}, {"name": "id", "type": "long"}],
    }
    row_schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "note", "type": ["null", "string"]},
            {
                "name": "amount",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 20},
            },
        ],
    }
    value_schema = {
        "type": "record",
        "name": "envelope",
        "fields": [
            {"name": "after", "type": ["null", row_schema]},
            {"name": "updated", "type": "string"},
        ],
    }
    schemas = {b"\x00\x00\x00\x00\x01": key_schema, b"\x00\x00\x00\x00\x02": value_schema}
    decoder = Decoder(AvroDecoder(schemas.get))

    def avro(header: bytes, datum: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(header)
        fastavro.schemaless_writer(out, fastavro.parse_schema(schemas[header]), datum)
        return out.getvalue()

    def change(time: int, number: int, values: dict[str, Any] | None) -> Row:
        key = avro(b"\x00\x00\x00\x00\x01", {"region": "r\t1", "id": number})
        value = avro(b"\x00\x00\x00\x00\x02", {"after": values, "updated": f"{time}.0000000000"})
        return Row.of(Hlc(time), "t", key, value, ("out", 0), time, decoder.change)

    name = "avro_values"
    make_table(postgres.dsn, name)
    applier = applier_for(postgres.dsn, name, name)
    try:
        rows = (
            change(
                1,
                1,
                {"note": HARD_TEXT, "amount": Decimal("12345678901234567890.12345678901234567890")},
            ),
            change(1, 2, {"note": None, "amount": Decimal("-0.00000000000000000001")}),
            change(1, 3, {"note": "\\N", "amount": Decimal(0)}),
            change(2, 3, None),
        )
        assert applier.apply(Window(Hlc(2), rows))
    finally:
        applier.close()
    table = read(postgres.dsn, name, name)[1]
    assert {k: (v[0], v[1]) for k, v in table.items()} == {
        ("r\t1", "1"): (HARD_TEXT, "12345678901234567890.12345678901234567890"),
        ("r\t1", "2"): (None, "-0.00000000000000000001"),
    }


def test_protobuf_rows_stage_their_values_exactly(postgres: PostgresInfo) -> None:
    """Protobuf rows (format: protobuf) take the values path: decimals by their digits."""
    from encoders.base import ChangeRow, Context  # noqa: PLC0415
    from encoders.protobuf import ProtobufEncoder  # noqa: PLC0415
    from highwater_consumer.protobuf import ProtobufDecoder  # noqa: PLC0415
    from pipeline.config import EncoderConfig  # noqa: PLC0415
    from schemas.jsontext import Number  # noqa: PLC0415
    from schemas.tables import TableSchema  # noqa: PLC0415

    table = TableSchema.of(
        {
            "type": "record",
            "name": "t",
            "fields": [
                {"name": "region", "type": "string"},
                {"name": "id", "type": "long"},
                {"name": "note", "type": ["null", "string"]},
                {
                    "name": "amount",
                    "type": {
                        "type": "bytes",
                        "logicalType": "decimal",
                        "precision": 40,
                        "scale": 20,
                    },
                },
            ],
        },
        ["region", "id"],
    )
    encoder = ProtobufEncoder(EncoderConfig(format="protobuf", updated=True), "cf", table)
    decoder = Decoder(ProtobufDecoder())

    def change(time: int, number: int, values: dict[str, Any] | None) -> Row:
        row = ChangeRow("t", ["r\t1", number], values, None, Hlc(time), Hlc(time))
        key, value = encoder.key(row, Context("out")), encoder.value(row, Context("out"))
        assert value is not None
        return Row.of(Hlc(time), "t", key, value, ("out", 0), time, decoder.change)

    name = "protobuf_values"
    make_table(postgres.dsn, name)
    applier = applier_for(postgres.dsn, name, name)
    try:
        rows = (
            change(
                1,
                1,
                {"note": HARD_TEXT, "amount": Number("12345678901234567890.12345678901234567890")},
            ),
            change(1, 2, {"note": None, "amount": Number("-0.00000000000000000001")}),
            change(1, 3, {"note": "\\N", "amount": 0}),
            change(2, 3, None),
        )
        assert applier.apply(Window(Hlc(2), rows))
    finally:
        applier.close()
    applied = read(postgres.dsn, name, name)[1]
    assert {k: (v[0], v[1]) for k, v in applied.items()} == {
        ("r\t1", "1"): (HARD_TEXT, "12345678901234567890.12345678901234567890"),
        ("r\t1", "2"): (None, "-0.00000000000000000001"),
    }
