"""``highwater iceberg maintain``: fewer files, the kept cuts unchanged, orphans gone.

On each catalog kind the applier is tested on (``iceberg_catalog``: the embedded SQLite one,
and Apache Iceberg's own REST catalog server as integration tests). Windows built here are
applied by the real applier to two tables; each table's rows at every cut are read back with
pyiceberg before maintenance and compared after it, and the latest cut with a model of the
source. Each guarantee's check runs beside a broken variant it catches: an expiry ignoring
the kept cuts, an orphan removal ignoring what is referenced, a compaction that does not
rebase on the applier's commit.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from highwater_consumer.decoding import JsonDecoder
from highwater_consumer.iceberg import (
    CutError,
    IcebergApplier,
    Keep,
    MaintenanceError,
    compaction,
    cut,
    load,
    maintain,
    orphans,
    writes,
)
from highwater_consumer.iceberg.cuts import history, tables_of
from highwater_consumer.iceberg.maintenance import duration, expirable
from highwater_consumer.windows import Row, Window
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from tests.support.iceberg import exactly_once_problems

ROOT = Path(__file__).resolve().parents[2]
ORDERS = TableSchema.of(
    {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "amount",
                "type": [
                    "null",
                    {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
                ],
            },
            {"name": "note", "type": ["null", "string"]},
        ],
    },
    ["id"],
)
TABLES = ("customers", "orders")
SPACING = 10 * 60 * 10**9  # ten minutes between windows: a test may take minutes on a busy machine
DECODER = JsonDecoder()
State = dict[str, dict[int, tuple[Decimal | None, str | None]]]


def workload(count: int, seed: int = 7) -> tuple[list[Window], dict[Hlc, State]]:
    """``count`` windows ten minutes apart, ending now, and the source's state at each R.

    Inserts of new keys on both tables, and every fourth window updates and deletes of
    older ones; the states are the model the cuts are compared with. A window that changes
    no older row adds a small file to each table (what compaction is for); one that does
    rewrites the small files holding them with its own rows (``writes.SMALL_FILE``).
    """
    chosen, now = random.Random(seed), time.time_ns()
    state: State = {t: {} for t in TABLES}
    windows, states, offset = [], {}, 0
    for n in range(count):
        resolved = Hlc(now - (count - 1 - n) * SPACING)
        rows = []
        for i in range(12):
            table, key = TABLES[i % 2], 1000 + n * 12 + i  # a new key
            if n % 4 == 0 and i < 4 and state[table]:
                key = chosen.choice(sorted(state[table]))  # an older row changed
            offset += 1
            at = resolved.wall - 1000 + i
            if key in state[table] and chosen.random() < 0.5:
                after = None
                del state[table][key]
            else:
                amount = Decimal(chosen.randrange(100_000)) / 100
                after = {"amount": str(amount), "note": f"{table} {key} at {n}"}
                state[table][key] = (amount, after["note"])
            value = json.dumps({"after": after, "updated": f"{at}.0000000000"}).encode()
            place = ("out", i % 2)
            rows.append(
                Row.of(Hlc(at), table, f"[{key}]".encode(), value, place, offset, DECODER.change)
            )
        windows.append(Window(resolved, tuple(rows)))
        states[resolved] = {t: dict(rows_) for t, rows_ in state.items()}
    return windows, states


def applier(catalog: dict[str, str]) -> IcebergApplier:
    made = IcebergApplier(catalog, "cf", namespace="ns", schemas=dict.fromkeys(TABLES, ORDERS))
    made.start(TABLES)
    return made


def read(catalog: Any, at: Hlc | None = None) -> State:
    """Every table at the cut ``at`` (the latest: None), read back with pyiceberg."""
    found = cut(catalog, "ns", "cf", at)
    out: State = {}
    for table in TABLES:
        rows = found.scan(catalog, table).to_arrow().to_pylist()
        out[table] = {r["id"]: (r["amount"], r["note"]) for r in rows}
    return out


def data_files(catalog: Any) -> int:
    return sum(compaction.sizes(t)[0] for t in tables_of(catalog, "ns", "cf").values())


def cut_problems(catalog: Any, before: dict[Hlc, State], kept: set[Hlc]) -> list[str]:
    """How the cuts after maintenance differ from before it (empty: none).

    A kept one gone or reading other rows, or one to expire still there.
    """
    problems = []
    for resolved, rows in sorted(before.items()):
        try:
            now = read(catalog, resolved)
        except CutError:
            if resolved in kept:
                problems.append(f"kept cut {resolved} is gone")
            continue
        if resolved not in kept:
            problems.append(f"cut {resolved} was to expire")
        elif now != rows:
            problems.append(f"kept cut {resolved} reads other rows")
    return problems


def applied_windows(
    catalog: dict[str, str], count: int
) -> tuple[Any, dict[Hlc, State], list[Window]]:
    windows, states = workload(count)
    made = applier(catalog)
    for window in windows:
        made.apply(window)
    loaded = load(catalog)
    before = {r: read(loaded, r) for r in states}
    assert before == states  # the applier's cuts hold the source at each R
    return loaded, before, windows


def test_maintain_leaves_fewer_files_and_every_kept_cut_as_it_was(
    iceberg_catalog: dict[str, str],
) -> None:
    catalog, before, _ = applied_windows(iceberg_catalog, 24)
    ordered = sorted(before)
    files = data_files(catalog)
    # the last 5 are within 45 minutes of now until 5 minutes after they were made: the test
    # (24 windows applied and read back) is done well within that, however busy the machine
    keep = Keep(last=3, resolved=frozenset({ordered[4]}), newer_than=timedelta(minutes=45))
    reports = maintain(catalog, "cf", namespace="ns", keep=keep, orphans_older_than=timedelta(0))
    kept = {ordered[4], *ordered[-5:]}  # R 4, the last 3, and those of the last 45 minutes
    assert cut_problems(catalog, before, kept) == []
    assert data_files(catalog) < files / 3, (files, reports)
    assert [r.files_after for r in reports] == [1, 1]
    assert all(r.snapshots_expired >= 24 - 7 for r in reports)  # the compacted ones too
    assert exactly_once_problems(catalog, "ns", "cf") == []
    with pytest.raises(CutError, match="expired"):
        cut(catalog, "ns", "cf", ordered[5])
    for table in tables_of(catalog, "ns", "cf").values():  # the latest cut: the compaction's
        compacted = table.current_snapshot()
        assert compacted is not None
        assert compacted.summary is not None
        assert compacted.summary["highwater.compacted"] == "true"
        assert history(table, "cf")[ordered[-1]] == compacted.snapshot_id


def test_an_expiry_that_ignored_the_kept_cuts_is_what_the_check_finds(
    iceberg_catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control: every snapshot but the current ones expired."""
    catalog, before, _ = applied_windows(iceberg_catalog, 8)
    ordered = sorted(before)

    def everything(found: Any, kept: set[Hlc], current: int | None) -> list[int]:
        return [snapshot for _, snapshot in found if snapshot != current]

    monkeypatch.setattr("highwater_consumer.iceberg.maintenance.expirable", everything)
    keep = Keep(last=2, resolved=frozenset({ordered[1]}), newer_than=None)
    maintain(catalog, "cf", namespace="ns", keep=keep, orphans_older_than=timedelta(0))
    kept = {ordered[1], *ordered[-2:]}
    assert cut_problems(catalog, before, kept) == [
        f"kept cut {ordered[1]} is gone",
        f"kept cut {ordered[-2]} is gone",
    ]


def test_a_cut_to_keep_must_be_a_complete_one_and_keep_rules_are_checked(
    iceberg_catalog: dict[str, str],
) -> None:
    catalog, before, _ = applied_windows(iceberg_catalog, 3)
    missing = Hlc(min(before).wall + 1)
    with pytest.raises(MaintenanceError, match=f"keep {missing}: no complete cut"):
        maintain(catalog, "cf", namespace="ns", keep=Keep(resolved=frozenset({missing})))
    assert {r: read(catalog, r) for r in before} == before  # nothing was done
    with pytest.raises(MaintenanceError, match="the latest cut is always kept"):
        Keep(last=0)
    with pytest.raises(MaintenanceError, match="'an hour' is not a duration"):
        duration("an hour")
    assert duration("90m") == timedelta(minutes=90)
    assert duration("0") == timedelta(0)
    with pytest.raises(MaintenanceError, match="no table of changefeed 'other'"):
        maintain(catalog, "other", namespace="ns")


def test_expirable_keeps_the_kept_the_current_and_what_is_past_the_latest_kept() -> None:
    found = [(Hlc(10), 1), (Hlc(20), 2), (Hlc(20), 3), (Hlc(30), 4), (Hlc(40), 5)]
    # 20's compaction (3) is what cut 20 reads; 40 is past the latest complete cut
    assert expirable(found, {Hlc(20), Hlc(30)}, current=5) == [1, 2]
    assert expirable(found, {Hlc(30)}, current=5) == [1, 2, 3]
    assert expirable(found, set(), current=5) == []  # no complete cut: nothing expires


def paths(table: Any) -> set[str]:
    return set(orphans.listed(table))


def test_orphans_are_removed_and_referenced_files_untouched(
    iceberg_catalog: dict[str, str],
) -> None:
    """Files of commits that never landed: an old one removed, a young one spared.

    The young one's commit may be in flight: the age bound spares it. Every file a
    snapshot references stays.
    """
    catalog, before, _ = applied_windows(iceberg_catalog, 6)
    table = catalog.load_table("ns.orders")
    rows = table.scan().to_arrow().slice(0, 3)
    # as an applier killed after writing its files, or whose commit is still in flight
    old, young = (
        writes.written(table.metadata, table, rows, uuid.uuid4(), itertools.count())[0]
        for _ in range(2)
    )
    old_path = PyArrowFileIO.parse_location(old.file_path)[2]
    young_path = PyArrowFileIO.parse_location(young.file_path)[2]
    hour_ago = time.time() - 3600
    os.utime(old_path, (hour_ago, hour_ago))
    referenced = orphans.reachable(table)
    removed = orphans.orphans(table, lambda: catalog.load_table("ns.orders"), time.time() - 60)
    assert removed == [old_path]
    orphans.remove(table, removed)
    left = paths(table)
    assert young_path in left
    assert old_path not in left
    assert referenced <= left
    assert {r: read(catalog, r) for r in before} == before


def test_an_orphan_removal_ignoring_references_is_what_the_check_finds(
    iceberg_catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control: nothing counted as referenced, so live files go too."""
    catalog, _, _ = applied_windows(iceberg_catalog, 3)
    table = catalog.load_table("ns.orders")
    referenced = orphans.reachable(table)
    monkeypatch.setattr(orphans, "reachable", lambda table: set())
    removed = orphans.orphans(table, lambda: catalog.load_table("ns.orders"), time.time() + 1)
    orphans.remove(table, removed)
    assert not referenced <= paths(table)


def test_a_compaction_refused_by_the_applier_is_rebased_and_neither_is_lost(
    iceberg_catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The applier and a compaction, each refused once by the other: both land, none lost.

    The applier commits a window between the compaction's plan and its commit; its next
    commit is refused by the compaction.
    """
    windows, states = workload(16)
    made = applier(iceberg_catalog)
    for window in windows[:12]:
        made.apply(window)
    real, calls = compaction.commit, []

    def applier_first(table: Any, groups: Any) -> None:
        if not calls:
            made.apply(windows[12])  # the applier's commit lands first: this one is refused
        calls.append(len(groups))
        real(table, groups)

    monkeypatch.setattr(compaction, "commit", applier_first)
    reports = maintain(iceberg_catalog, "cf", namespace="ns", keep=Keep(last=16, newer_than=None))
    assert len(calls) == 3
    assert [r.refused for r in reports] == [1, 0]
    for window in windows[13:]:  # its tables read before the compaction: refused, retried
        made.apply(window)
    catalog = load(iceberg_catalog)
    assert exactly_once_problems(catalog, "ns", "cf") == []
    assert read(catalog) == states[windows[-1].resolved]
    assert {r: read(catalog, r) for r in states} == states


def test_a_compaction_that_did_not_rebase_is_what_the_check_finds(
    iceberg_catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The negative control: groups committed as planned after the refusal.

    Rows the applier's window replaced come back.
    """
    windows, states = workload(16)
    made = applier(iceberg_catalog)
    for window in windows[:12]:
        made.apply(window)
    real, calls = compaction.commit, []

    def applier_first(table: Any, groups: Any) -> None:
        if not calls:
            made.apply(windows[12])
        calls.append(1)
        real(table, groups)

    monkeypatch.setattr(compaction, "commit", applier_first)
    monkeypatch.setattr(compaction, "rebased", lambda table, groups: (groups, []))
    maintain(iceberg_catalog, "cf", namespace="ns", keep=Keep(last=16, newer_than=None))
    assert read(load(iceberg_catalog)) != states[windows[12].resolved]


def test_maintain_beside_a_live_applier_loses_no_window(iceberg_catalog: dict[str, str]) -> None:
    """An applier thread applies 30 windows while maintenance runs again and again."""
    windows, states = workload(30)
    made = applier(iceberg_catalog)
    for window in windows[:5]:
        made.apply(window)
    failures: list[BaseException] = []

    def live() -> None:
        try:
            for window in windows[5:]:
                made.apply(window)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=live)
    thread.start()
    runs = refused = 0
    while thread.is_alive() or runs < 2:
        keep = Keep(last=40, newer_than=None)
        reports = maintain(
            iceberg_catalog,
            "cf",
            namespace="ns",
            keep=keep,
            orphans_older_than=timedelta(minutes=1),
        )
        runs, refused = runs + 1, refused + sum(r.refused for r in reports)
    thread.join()
    assert failures == []
    catalog = load(iceberg_catalog)
    assert exactly_once_problems(catalog, "ns", "cf") == []
    assert {r: read(catalog, r) for r in states} == states
    print(f"{runs} maintenance runs beside the applier, {refused} of their commits refused")


def test_the_command_prints_what_it_did_per_table(tmp_path: Path) -> None:
    properties = {"warehouse": str(tmp_path / "warehouse")}
    _catalog, before, _ = applied_windows(properties, 6)
    command = [
        sys.executable,
        "-m",
        "highwater_consumer",
        "iceberg",
        "maintain",
        "cf",
        f"--catalog=warehouse={properties['warehouse']}",
        "--namespace=ns",
        "--keep-last=2",
        "--keep-newer-than=0",
        "--orphans-older-than=0",
    ]
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("ns.customers: data files ")
    assert "snapshots expired " in lines[1]
    assert "orphan files removed " in lines[1]
    assert cut_problems(load(properties), before, set(sorted(before)[-2:])) == []
