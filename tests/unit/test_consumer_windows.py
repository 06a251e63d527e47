"""Resolved windows from a changefeed's output: consistent, ordered, once, restart-safe.

The output is generated as a changefeed writes it: each partition in its own order, rows and
markers interleaved, a marker never followed on its partition by a row at or below it;
replays (at-least-once duplicates, a resumed changefeed's rows again) anywhere after the
first copy. The windows must hand over every row once, in commit order, each only once the
frontier passed it; a consumer killed and restarted from the committed offsets and the last
acknowledged R hands over the rest, nothing twice, nothing lost.
"""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from highwater_consumer import Change, Row, Window, Windows
from schemas.hlc import Hlc

PARTITIONS = [("out.a", 0), ("out.a", 1), ("out.b", 0)]
TABLE = {"out.a": "a", "out.b": "b"}
TABLES = {p: TABLE[p[0]] for p in PARTITIONS}


@st.composite
def output(draw: Any) -> list[list[tuple[Any, ...]]]:
    """Per partition, its records in offset order: ("row", key, time) or ("marker", time)."""
    partitions = []
    for _ in PARTITIONS:
        records: list[tuple[Any, ...]] = []
        floor = 0  # the partition's latest marker: rows after it are above it
        written: list[tuple[Any, ...]] = []  # its rows so far
        for _ in range(draw(st.integers(0, 25))):
            kind = draw(st.sampled_from(["row", "row", "row", "marker", "replay"]))
            if kind == "row":
                time = draw(st.integers(floor + 1, floor + 8))
                written.append(("row", draw(st.integers(0, 5)), time))
                records.append(written[-1])
            elif kind == "marker":
                floor = max(floor, draw(st.integers(floor, floor + 6)))
                records.append(("marker", floor))
            elif written:
                records.append(draw(st.sampled_from(written)))  # a replay: the same record again
        partitions.append(records)
    # the broadcaster's last marker, on every partition: above every row of any
    top = max([0, *(r[2] for records in partitions for r in records if r[0] == "row")])
    top = max([top, *(r[1] for records in partitions for r in records if r[0] == "marker")])
    for records in partitions:
        records.append(("marker", top + draw(st.integers(0, 3))))
    return partitions


def feed(windows: Windows, records: list[tuple[int, int, tuple[Any, ...]]]) -> list[Window]:
    handed: list[Window] = []
    for p, offset, record in records:
        topic, partition = PARTITIONS[p]
        if record[0] == "marker":
            windows.marker((topic, partition), offset, Hlc(record[1]))
        else:
            key = f"[{record[1]}]".encode()
            windows.add((topic, partition), offset, Hlc(record[2]).packed(), key, b"{}")
        handed += windows.ready()
    return handed


def interleave(draw: Any, partitions: list[list[tuple[Any, ...]]]) -> list[tuple[int, int, Any]]:
    """The partitions' records as a consumer meets them: each in its order, interleaved."""
    cursors = [0] * len(partitions)
    out = []
    while any(c < len(r) for c, r in zip(cursors, partitions, strict=True)):
        p = draw(st.sampled_from([i for i, r in enumerate(partitions) if cursors[i] < len(r)]))
        out.append((p, cursors[p], partitions[p][cursors[p]]))
        cursors[p] += 1
    return out


def check(handed: list[Window], records: list[tuple[int, int, Any]]) -> None:
    rows = [r for w in handed for r in w.rows]
    expected = {
        (TABLE[PARTITIONS[p][0]], f"[{record[1]}]".encode(), Hlc(record[2]))
        for p, _, record in records
        if record[0] == "row"
    }
    assert sorted((r.table, r.key, r.updated) for r in rows) == sorted(expected), "once each"
    assert rows == sorted(rows), "commit order across windows"
    assert [(r.updated, r.table, r.key) for r in rows] == sorted(
        (r.updated, r.table, r.key) for r in rows
    ), "rows compare in commit order"
    previous = None
    for window in handed:
        assert all(r.updated <= window.resolved for r in window.rows)
        assert previous is None or all(r.updated > previous for r in window.rows)
        if window.last:
            previous = window.resolved


@settings(max_examples=200, deadline=None)
@given(partitions=output(), data=st.data(), piece=st.integers(1, 4))
def test_every_row_once_in_commit_order_never_before_its_marker(
    partitions: list[list[tuple[Any, ...]]], data: Any, piece: int
) -> None:
    records = interleave(data.draw, partitions)
    windows = Windows(TABLES, piece=piece)
    handed = feed(windows, records)
    check(handed, records)
    assert windows.held() == 0, "the last markers are above every row: nothing left"
    assert all(len(w.rows) <= piece for w in handed)
    for window in handed:  # a window's rows are handed over only once its marker is read
        for row in window.rows:
            read = [r for p, o, r in records if PARTITIONS[p] == row.partition and o == row.offset]
            assert read[0][0] == "row"


@settings(max_examples=200, deadline=None)
@given(partitions=output(), data=st.data(), kill=st.integers(0, 200))
def test_a_restart_from_the_committed_offsets_loses_nothing_and_repeats_nothing(
    partitions: list[list[tuple[Any, ...]]], data: Any, kill: int
) -> None:
    records = interleave(data.draw, partitions)
    kill = min(kill, len(records))
    first = Windows(TABLES)
    handed = feed(first, records[:kill])
    acknowledged = [w for w in handed if w.last]
    after = acknowledged[-1].resolved if acknowledged else None
    commits = first.committable()
    # the restart reads every partition from its committed offset (the start when none)
    again = [(p, o, r) for p, o, r in records if o >= commits.get(PARTITIONS[p], 0)]
    second = Windows(TABLES, after=after)
    handed += feed(second, again)
    check(handed, records)


def test_an_empty_window_still_says_its_time_and_a_silent_partition_holds_back() -> None:
    windows = Windows(TABLES)
    windows.marker(PARTITIONS[0], 0, Hlc(5))
    windows.marker(PARTITIONS[1], 0, Hlc(5))
    assert list(windows.ready()) == [], "out.b/0 has no marker yet"
    windows.marker(PARTITIONS[2], 0, Hlc(3))
    assert list(windows.ready()) == [Window(Hlc(3), ())]
    assert list(windows.ready()) == [], "handed over once"
    with pytest.raises(KeyError, match=r"out\.c/0"):
        windows.marker(("out.c", 0), 0, Hlc(1))


def test_a_row_reads_its_record_when_first_asked_and_keeps_it() -> None:
    reads: list[bytes] = []

    def reader(key: bytes, value: bytes) -> Change:
        reads.append(value)
        return Change(Hlc(7, 2), [1], {"a": 1}, None)

    row = Row.of(Hlc(7, 2), "a", b"[1]", b"{}", ("out.a", 0), 4, reader)
    assert row.updated == Hlc(7, 2)
    assert row.time == Hlc(7, 2).packed()
    assert reads == [], "nothing read until asked"
    assert (row.key_values, row.after, row.before) == ([1], {"a": 1}, None)
    assert reads == [b"{}"], "read once"
    assert (
        Row.of(Hlc(7, 1), "b", b"[9]", b"{}", ("out.b", 0), 0)
        < row
        < Row.of(Hlc(7, 2), "b", b"[0]", b"{}", ("out.b", 0), 0)
    ), "commit order: time, then table, then key"
