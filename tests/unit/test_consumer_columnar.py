"""The columnar path without a broker: the C scan agrees with the decoder, the windows agree.

* The C reader's scan (``_rdbatch.scan``) says only what the Python decoder would say: for any
  record it is sure of (a row or a marker), ``JsonDecoder.read`` gives the same time, the
  row's ``after`` has the names it found in their order, its key the width it counted; a
  changefeed's usual records are ones it is sure of (else nothing would be faster).
* :class:`ArrowWindows` fed the same batches as :class:`Windows` hands over the same windows
  (rows, order, R, pieces), drops the same replays, and says the same offsets to commit.
"""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from highwater_consumer import columnar
from highwater_consumer.arrow_windows import ArrowWindows
from highwater_consumer.columnar import CHECK, MARKER, NATIVE, ROW, columns_of, settle
from highwater_consumer.decoding import JsonDecoder, Marker
from highwater_consumer.staging import Table, last_versions, stage_records
from highwater_consumer.staging_arrow import stage_window
from highwater_consumer.windows import Windows
from schemas.hlc import LOGICAL_SCALE, Hlc

DECODER = JsonDecoder()
native = pytest.mark.skipif(NATIVE is None, reason="the C extension is not built")


def scan(key: bytes | None, value: bytes | None) -> Any:
    from highwater_consumer import _rdbatch  # type: ignore[attr-defined]  # noqa: PLC0415

    return _rdbatch.scan(key, value)


def agrees(key: bytes | None, value: bytes | None) -> int:
    """The scan's kind, checked against the decoder when the scan is sure."""
    kind, wall, logical, width, shape = scan(key, value)
    if kind == CHECK:
        return kind
    found = DECODER.read(key, value)  # sure: the decoder takes it too
    if kind == MARKER:
        assert found == Marker(Hlc(wall, logical))
    else:
        assert kind == ROW
        assert found == wall * LOGICAL_SCALE + logical
        after = orjson.loads(value)["after"]  # type: ignore[arg-type]
        assert shape == (None if after is None else list(after))
        assert width == len(orjson.loads(key))  # type: ignore[arg-type]
    return kind


USUAL = [
    (
        b'["eu",1]',
        b'{"after":{"a":1.50,"b":"x \\" \\u00e9 \xc3\xa9"},"before":null,'
        b'"updated":"1700000000000000000.0000000003"}',
    ),
    (b'["eu",1]', b'{"after":null,"before":{"a":1},"updated":"1700000000000000000.0000000003"}'),
    (b"[1]", b'{"after":{},"updated":"1.1"}'),
    (None, b'{"resolved":"1700000000000000000.0000000000"}'),
    (
        b'[{"k":[1,2]},null,true,false,-0.5e+10]',
        b' { "after" : { "x" : [ ] } , "updated" : "5.5" } ',
    ),
]
DOUBTFUL = [  # the scan leaves these to the decoder (some are bad, some are not)
    (b'["a"]', b'{"after":{"a":NaN},"updated":"5.1"}'),
    (b'["a"]', b'{"after":{"a":1},"updated":"5"}'),
    (b'["a"]', b'{"after":{"a":1},"updated":"5.1","updated":"6.1"}'),
    (b'["a"]', b'{"after":{"a":1,"a":2},"updated":"5.1"}'),
    (b'["a"]', b'{"after":{"\\u0061":1},"updated":"5.1"}'),
    (b'["a"]', b'{"after":{"a":"\\ud800"},"updated":"5.1"}'),
    (b'["a"]', b'{"after":{"a":"\xff"},"updated":"5.1"}'),
    (b'["a"]', b'{"after":{"a":"\xed\xa0\x80"},"updated":"5.1"}'),
    (b'["a"]', b'{"after":{"a":01},"updated":"5.1"}'),
    (b'["a"]', b'{"after":{"a":1},"updated":"5.1"} {}'),
    (b'["a"]', b'{"after":{"a":1}}'),
    (b'["a"]', b'{"updated":"5.1"}'),
    (b'{"a":1}', b'{"after":{"a":1},"updated":"5.1"}'),
    (None, b'{"after":{"a":1},"updated":"5.1"}'),
    (b'["a"]', None),
    (b'["a"]', b'{"after":[1],"updated":"5.1"}'),
    (None, b'{"resolved":"5.1","x":1}'),
    (None, b'{"resolved":5}'),
    (b'["a"]', b'{"after":{"a":1},"updated":"99999999999999999999.1"}'),
    (b'["a"]', b"[" * 300 + b"]" * 300),
    (b'["a"]', b""),
]


@native
def test_the_scan_is_sure_of_a_changefeeds_usual_records_and_agrees() -> None:
    assert [agrees(k, v) for k, v in USUAL] == [ROW, ROW, ROW, MARKER, ROW]


@native
def test_the_scan_leaves_what_it_is_not_sure_of_to_the_decoder() -> None:
    assert [agrees(k, v) for k, v in DOUBTFUL] == [CHECK] * len(DOUBTFUL)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@native
@settings(max_examples=300, deadline=None)
@given(
    after=st.none() | st.dictionaries(st.text(), JSON, max_size=4),
    key=st.lists(JSON, max_size=3),
    wall=st.integers(0, 2**64 - 1),
    logical=st.integers(0, 10**10 - 1),
    noise=st.binary(max_size=3),
    cut=st.integers(0, 400),
)
def test_the_scan_agrees_with_the_decoder_on_any_record(  # noqa: PLR0917 - hypothesis' draws
    after: Any, key: Any, wall: int, logical: int, noise: bytes, cut: int
) -> None:
    value = orjson.dumps({"after": after, "before": None, "updated": f"{wall}.{logical:010d}"})
    agrees(orjson.dumps(key), value)
    agrees(orjson.dumps(key), value[:cut] + noise + value[cut:])  # broken: CHECK, or agrees


Record = tuple[int, int, bytes | None, bytes | None]  # slot, offset, key, value


def enriched(key: list[Any], after: Any, updated: str, *, schema: bool) -> tuple[bytes, bytes]:
    """A row as ``envelope: enriched`` writes it (its time ``source.ts_hlc``).

    ``schema``: each side inside its Kafka Connect schema (``enriched_properties: [schema]``).
    """
    names = [f"k{i}" for i in range(len(key))]
    key_object: Any = dict(zip(names, key, strict=True))
    value: Any = {"after": after, "op": "c" if after else "d", "source": {"ts_hlc": updated}}
    if schema:
        key_object = {"payload": key_object, "schema": {"type": "struct"}}
        value = {"payload": value | {"ts_ns": 1}, "schema": {"type": "struct"}}
    return orjson.dumps(key_object), orjson.dumps(value)


def records(
    rng: random.Random,
    slots: Any,
    offsets: dict[Any, int],
    time: int,
    *,
    marked: bool,
    form: str = "wrapped",
) -> tuple[list[Record], int]:
    """A random batch: rows (replays, repeats), markers, bad records; the time reached."""
    batch: list[Record] = []
    if marked:  # markers on every partition: a window at least
        for slot, partition in enumerate(slots):
            marker = orjson.dumps({"resolved": f"{time}.0000000000"})
            batch.append((slot, offsets[partition], None, marker))
            offsets[partition] += 1
    for _ in range(rng.randrange(0, 60)):
        slot = rng.randrange(len(slots))
        offset = offsets[slots[slot]]
        offsets[slots[slot]] += 1
        roll = rng.random()
        if roll < 0.1:  # a marker
            value = orjson.dumps({"resolved": f"{time - rng.randrange(0, 20)}.0000000000"})
            batch.append((slot, offset, None, value))
        elif roll < 0.13:
            batch.append((slot, offset, b'["x"]', b"not json"))
        else:  # a row, now or replayed from before
            at = time if roll < 0.8 else rng.randrange(50, time + 1)
            time += rng.randrange(0, 3)
            key_values = ["k", rng.randrange(8)]
            after_: Any = None if rng.random() < 0.1 else {"n": rng.randrange(5)}
            if after_ is not None and rng.random() < 0.3:  # a second shape, text to escape
                after_["m"] = rng.choice(["a\tb", "back\\slash", "new\nline\r", "é"])
            updated = f"{at}.{rng.randrange(3):010d}"
            if form == "wrapped":
                key = orjson.dumps(key_values)
                value = orjson.dumps({"after": after_, "updated": updated})
            else:
                key, value = enriched(key_values, after_, updated, schema=form == "schema")
            batch.append((slot, offset, key, value))
    return batch, time


def feed(seed: int, piece: int, after: Hlc | None, form: str = "wrapped") -> tuple[int, list[Any]]:
    """Random batches (replays, duplicates, markers, bad records) into both; windows compared."""
    rng = random.Random(seed)
    partitions = {("b", 0): "beta", ("a", 1): "alpha", ("a", 0): "alpha", ("b", 1): "beta"}
    rows = Windows(partitions, after, piece, DECODER.change)
    columns = ArrowWindows(partitions, after, piece, DECODER.change)
    slots = columns.slots
    offsets = dict.fromkeys(slots, 0)
    time = 100
    handed = 0
    pairs = []
    for step in range(12):
        batch, time = records(rng, slots, offsets, time, marked=step in {5, 11}, form=form)
        found = (
            columns_of(*map(list, zip(*batch, strict=True)))
            if batch
            else columns_of([], [], [], [])
        )
        arrow_batch, bad = settle(found, DECODER.read)
        columns.add(arrow_batch)
        for item in bad:
            columns.skipped(item.slot, item.offset)
        for slot, offset, key, value in batch:
            try:
                read = DECODER.read(key, value)
            except ValueError:
                rows.skipped(slots[slot], offset)
                continue
            if type(read) is Marker:
                rows.marker(slots[slot], offset, read.resolved)
            else:
                rows.add(slots[slot], offset, read, key, value)  # type: ignore[arg-type]
        row_windows, arrow_windows = list(rows.ready()), columns.ready()
        pairs += zip(row_windows, arrow_windows, strict=False)
        expected = [(w.resolved, w.last, w.rows) for w in row_windows]
        got = [(w.resolved, w.last, w.to_window().rows) for w in arrow_windows]
        assert got == expected
        assert [[tuple(r) for r in w[2]] for w in got] == [
            [tuple(r) for r in w[2]] for w in expected
        ]
        assert columns.committable() == rows.committable()
        assert columns.held_rows() == rows.held()
        assert columns.duplicates == rows.duplicates
        handed += sum(len(w[2]) for w in got)
    return handed, pairs


@pytest.mark.parametrize("seed", range(40))
def test_arrow_windows_equal_the_per_row_windows_batch_by_batch(seed: int) -> None:
    after = None if seed % 4 else Hlc(120)
    handed, _ = feed(seed, piece=[1, 3, 100_000][seed % 3], after=after)
    assert handed > 20 or after is not None


@pytest.mark.parametrize("form", ["enriched", "schema"])
@pytest.mark.parametrize("seed", range(8))
def test_arrow_windows_of_an_enriched_output_equal_the_per_row_windows(
    seed: int, form: str
) -> None:
    """The scan leaves enriched records to the decoder; the windows are the same rows."""
    handed, _ = feed(seed, piece=[1, 3, 100_000][seed % 3], after=None, form=form)
    assert handed > 20


def table(name: str, number: int) -> Table:
    types = {"k": "text", "id": "bigint", "n": "bigint", "m": "text"}
    return Table(name, sql.Identifier(name), types, ("k", "id"), types, number)


@pytest.mark.parametrize("seed", range(20))
def test_the_copy_text_from_columns_is_the_per_row_text(seed: int) -> None:
    """:func:`stage_window` on a columnar window makes what ``stage_records`` makes of its rows."""
    _, pairs = feed(seed, piece=[7, 100_000][seed % 2], after=None)
    tables = {name: table(name, n) for n, name in enumerate(("alpha", "beta"))}
    compared = 0
    for rows, columns in pairs:
        expected = {
            name: stage_records(tables[name], found)
            for name, found in last_versions(rows.rows).items()
        }
        got = stage_window(columns, tables.__getitem__)
        assert got is not None
        assert {s.table.name: s for s in got} == expected
        compared += sum(s.rows for s in got)
    assert compared > 20


def test_without_the_c_extension_the_same_api_reads_through_confluent_kafka(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The extension is optional: not built, :func:`reader` gives the confluent-kafka one."""
    monkeypatch.setattr(columnar, "_RDBATCH", None)
    settings = {"bootstrap.servers": "127.0.0.1:9", "group.id": "g"}  # nothing is reached
    found = columnar.reader(settings, [("t", 0)], [0])
    try:
        assert isinstance(found, columnar.PlainReader)
    finally:
        found.close()
    with pytest.raises(RuntimeError, match="not available"):
        columnar.reader(settings, [("t", 0)], [0], native=True)
