"""A big window in pieces: rows past the bound written ahead, the window still one snapshot.

The applier holds at most ``spill`` rows per table; past it, the rows are written as data
files not committed, and the window's last piece commits them with the rest in one snapshot
marked R. A key written ahead and changed again later in the window takes its later
version; one deleted later is gone. A window refused after rows were written ahead deletes
them; a crash before the last piece leaves no snapshot at R and the restart applies the
window whole. Negative controls: without the bound the rows held pass it (what the bound's
check finds), and a key's later version not superseding its copy written ahead is what the
table's state check finds.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from highwater_consumer.iceberg import IcebergApplier, UnwritableRecord, cut, load
from highwater_consumer.iceberg.spill import Spill
from highwater_consumer.windows import Row, Window
from schemas.hlc import Hlc
from tests.support.iceberg import exactly_once_problems
from tests.unit.test_iceberg import SCHEMAS, change

BOUND = 4


def pieces(rows: list[Row], size: int, resolved: int) -> Iterator[Window]:
    """A window of ``rows`` handed over in pieces of ``size`` rows, as the consumer does."""
    for start in range(0, len(rows), size):
        last = start + size >= len(rows)
        yield Window(Hlc(resolved), tuple(rows[start : start + size]), last=last)


def apply_all(applier: IcebergApplier, windows: Iterator[Window]) -> None:
    for window in windows:
        applier.apply(window)


def big_window() -> tuple[list[Row], dict[tuple[str, int], tuple[Any, str]]]:
    """30 orders; then 3 of them updated, 2 deleted, one updated twice; and what stays."""
    rows, live = [], {}
    for n in range(30):
        rows.append(change(100 + n, "orders", ["eu", n], {"amount": n, "note": f"n{n}"}, n))
        live["eu", n] = (Decimal(n).quantize(Decimal("0.01")), f"n{n}")
    later = [
        (200, 1, {"amount": 1000, "note": "updated"}),
        (201, 5, None),
        (202, 2, {"amount": 2000, "note": "first"}),
        (203, 17, None),
        (204, 28, {"amount": 28000, "note": "updated"}),
        (205, 2, {"amount": 2001, "note": "second"}),  # twice: the last wins
    ]
    for offset, (time, n, after) in enumerate(later, start=30):
        rows.append(change(time, "orders", ["eu", n], after, offset))
        if after is None:
            del live["eu", n]
        else:
            live["eu", n] = (Decimal(after["amount"]).quantize(Decimal("0.01")), after["note"])
    return rows, live


def table_at(catalog: Any, wall: int) -> dict[tuple[str, int], tuple[Any, str]]:
    rows = cut(catalog, "ns", "cf", Hlc(wall)).scan(catalog, "orders").to_arrow().to_pylist()
    return {(r["region"], r["id"]): (r["amount"], r["note"]) for r in rows}


def applier(catalog: dict[str, str], spill: int | None = BOUND) -> IcebergApplier:
    made = IcebergApplier(catalog, "cf", namespace="ns", schemas=SCHEMAS, spill=spill)
    made.start(["orders", "customers"])
    return made


def test_a_window_past_the_bound_is_written_ahead_and_committed_as_one_snapshot(
    iceberg_catalog: dict[str, str],
) -> None:
    made = applier(iceberg_catalog)
    spilled: list[str] = []
    made.reached = spilled.append
    rows, live = big_window()
    for piece in pieces(rows, 5, 300):
        made.apply(piece)
    assert made.most_held <= BOUND  # the rows held never passed the bound
    assert spilled.count("spilled orders") >= len(rows) // BOUND - 1
    catalog = load(iceberg_catalog)
    assert table_at(catalog, 300) == live
    table = catalog.load_table("ns.orders")
    assert [s.summary["highwater.resolved"] for s in table.snapshots()] == [str(Hlc(300))]
    assert exactly_once_problems(catalog, "ns", "cf") == []
    # a window after it updates and deletes rows of files written ahead (copy-on-write)
    made.apply(Window(Hlc(400), (change(301, "orders", ["eu", 3], None, 99),)))
    del live["eu", 3]
    assert table_at(catalog, 400) == live
    assert table_at(catalog, 300) != live  # the cut before still holds the key


def test_without_the_bound_the_rows_held_pass_it(iceberg_catalog: dict[str, str]) -> None:
    """The negative control of the bound's check: the same window, nothing written ahead."""
    made = applier(iceberg_catalog, spill=None)
    rows, live = big_window()
    for piece in pieces(rows, 5, 300):
        made.apply(piece)
    with pytest.raises(AssertionError):
        assert made.most_held <= BOUND
    assert made.most_held == len(live) + 2  # every key held, the two deleted too
    assert table_at(load(iceberg_catalog), 300) == live


def test_a_later_version_not_superseding_its_copy_written_ahead_is_what_the_check_finds(
    iceberg_catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control of the state check: the stale copies kept (the bug)."""
    monkeypatch.setattr(Spill, "supersede", lambda self, key: None)
    made = applier(iceberg_catalog)
    rows, live = big_window()
    for piece in pieces(rows, 5, 300):
        made.apply(piece)
    found = table_at(load(iceberg_catalog), 300)
    with pytest.raises(AssertionError):
        assert found == live
    resurrected = {("eu", 5), ("eu", 17)} & found.keys()  # deleted later, their copies kept
    assert resurrected, found


def test_a_window_refused_after_rows_were_written_ahead_deletes_them(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    made = applier({"warehouse": str(warehouse)})
    files: list[int] = []  # the data files there as each spill is done
    made.reached = lambda step: files.append(len(list(warehouse.rglob("*.parquet"))))
    rows, _ = big_window()
    bad = change(400, "orders", ["eu", 99], {"amount": "0.001"}, 77)
    with pytest.raises(UnwritableRecord, match="out/0@77"):
        apply_all(made, pieces([*rows[:20], bad], 5, 500))
    assert max(files, default=0) >= 4  # rows were written ahead before the refusal
    assert not made.targets["orders"].spills
    assert list(warehouse.rglob("*.parquet")) == []  # nothing left behind
    catalog = load({"warehouse": str(warehouse)})
    assert all(t.current_snapshot() is None for t in map(catalog.load_table, ["ns.orders"]))


def test_a_crash_in_a_window_written_ahead_leaves_no_cut_and_the_restart_applies_it(
    iceberg_catalog: dict[str, str],
) -> None:
    made = applier(iceberg_catalog)
    made.apply(Window(Hlc(50), (change(40, "orders", ["eu", 0], {"note": "before"}, 0),)))
    rows, live = big_window()
    spilled = []

    def crash(step: str) -> None:
        spilled.append(step)
        if len(spilled) == 3:
            raise KeyboardInterrupt("killed in a window written ahead")

    made.reached = crash
    with pytest.raises(KeyboardInterrupt):
        apply_all(made, pieces(rows, 5, 300))
    catalog = load(iceberg_catalog)
    assert cut(catalog, "ns", "cf").resolved == Hlc(50)  # no part of the window is a cut
    assert table_at(catalog, 50) == {("eu", 0): (None, "before")}
    again = applier(iceberg_catalog)
    for piece in pieces(rows, 5, 300):  # the consumer hands the window over again
        again.apply(piece)
    assert table_at(catalog, 300) == live
    assert exactly_once_problems(catalog, "ns", "cf") == []


def test_an_append_only_table_written_ahead_keeps_every_row(tmp_path: Path) -> None:
    from highwater_consumer.iceberg.columns import iceberg_schema  # noqa: PLC0415
    from tests.unit.test_iceberg import ORDERS  # noqa: PLC0415

    warehouse = {"warehouse": str(tmp_path)}
    catalog = load(warehouse)
    catalog.create_namespace("ns")
    schema = iceberg_schema(ORDERS)
    catalog.create_table("ns.log", schema.__class__(*schema.fields))  # no identifier fields
    made = IcebergApplier(warehouse, "cf", namespace="ns", names={"orders": "log"}, spill=3)
    made.start(["orders"])
    rows = [
        change(10 + n, "orders", ["eu", n % 4], {"region": "eu", "id": n % 4, "note": f"v{n}"}, n)
        for n in range(11)
    ]
    for piece in pieces(rows, 4, 100):
        made.apply(piece)
    assert made.most_held <= 3
    assert made.applied == 11
    found = catalog.load_table("ns.log").scan().to_arrow().to_pylist()
    assert sorted(r["note"] for r in found) == sorted(f"v{n}" for n in range(11))
