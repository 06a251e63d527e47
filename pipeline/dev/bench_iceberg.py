"""The Iceberg applier's benchmark (``make bench``'s Iceberg part, or on its own).

    python -m pipeline.dev.bench_iceberg [--rows 1000000] [--rate 5000] [--seconds 5]
        [--windows 720] [--keys uniform|recent] [--new 0.1] [--maintain-every 60]

An orders table of ``--rows`` rows (id, customer, status, amount, note) is loaded into the
embedded catalog (one commit, R0), then ``--windows`` windows of ``--seconds`` seconds at
``--rate`` changes/s each (so 720 windows of 5 s: an hour of them) are applied by
:class:`IcebergApplier`, as the consumer hands them over (rows in the changefeed's JSON,
decoded by the applier): 10 % deletes of existing orders, ``--new`` new ones (10 %: as many
orders made as deleted, so the table stays at its size, as a source's table at a steady
state does; 0.3 grows it by 5,000 rows a window), the rest updates of existing ones.
``--keys uniform`` picks the orders changed anywhere in the table (copy-on-write's worst
case: every file holds some); ``recent`` mostly among the newest 5 % (orders change while
young). Each window is built before its clock starts.

Every ``--maintain-every`` windows (60: five minutes of source) :func:`maintain` runs between
two windows as an operator's schedule would (keep the latest cut, compact, remove orphans),
its time counted in the sustained rate: pyiceberg copies a table's whole metadata several
times a commit, every snapshot in it, so a commit's time grows with the snapshots kept (~3 ms
a snapshot here). The model the table is checked against (a million entries: the bench's,
no applier holds one) is kept out of the cyclic collector's walks (``gc.freeze``).

Printed: windows/s and changes/s applied (sustained: over all windows and maintenance; per
tenth of the run, so a rate that falls as the hour goes on shows; the slowest tenth of
windows), data files in the table after them and after ``highwater iceberg maintain`` (files
on disk too), and the table checked against a model of the source (rows, sum of amounts).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from highwater_consumer.decoding import JsonDecoder
from highwater_consumer.iceberg import IcebergApplier, Keep, embedded, load, maintain, writes
from highwater_consumer.iceberg.compaction import sizes
from highwater_consumer.iceberg.cuts import CHANGEFEED, RESOLVED
from highwater_consumer.iceberg.orphans import listed
from highwater_consumer.windows import Row, Window
from schemas.hlc import Hlc
from schemas.tables import TableSchema

ORDERS = TableSchema.of(
    {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "customer", "type": ["null", "long"]},
            {"name": "status", "type": ["null", "string"]},
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
STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
WALL = 1_700_000_000_000_000_000
SECOND = 10**9
DELETES = 0.1  # of a window's changes
Model = dict[int, Decimal]  # id -> amount: what the table must hold


def _order(chosen: random.Random, key: int, n: int) -> dict[str, object]:
    return {
        "customer": chosen.randrange(50_000),
        "status": STATUSES[chosen.randrange(len(STATUSES))],
        "amount": f"{chosen.randrange(1_000_000) / 100:.2f}",
        "note": f"order {key} change {n}",
    }


def load_orders(applier: IcebergApplier, rows: int, chosen: random.Random, model: Model) -> float:
    """The table's first ``rows`` orders, one commit at R0 (as an initial scan lands)."""
    started = time.perf_counter()
    orders = []
    for key in range(rows):
        order = _order(chosen, key, 0)
        model[key] = Decimal(str(order["amount"]))
        orders.append({"id": key, **order, "amount": model[key]})
    target = applier.targets["orders"]
    summary = {CHANGEFEED: applier.changefeed, RESOLVED: str(Hlc(WALL))}
    writes.commit(target.table, target.key, set(), orders, summary)
    return time.perf_counter() - started


def workload(  # noqa: PLR0917 - the workload's parts
    windows: int,
    per_window: int,
    seconds: int,
    keys: str,
    chosen: random.Random,
    model: Model,
    new: float = 0.1,
) -> Iterator[Window]:
    """The windows one by one, the model changed as each changes it.

    Made as they are asked for: an hour of them built at once is 18M rows in memory (17 GB,
    and the collector walking them slowed every window), which no applier holds.
    """
    decoder, offset = JsonDecoder(), 0
    following = max(model) + 1
    for n in range(1, windows + 1):
        resolved = Hlc(WALL + n * seconds * SECOND)
        rows = []
        for i in range(per_window):
            kind = chosen.random()
            if kind < new:
                key, following = following, following + 1
            else:
                key = _existing(chosen, keys, following)
                while key not in model:
                    key = _existing(chosen, keys, following)
            if new <= kind < new + DELETES:
                after = None
                del model[key]
            else:
                after = _order(chosen, key, n)
                model[key] = Decimal(str(after["amount"]))
            at = resolved.wall - seconds * SECOND + (i + 1) * (seconds * SECOND // per_window)
            value = json.dumps({"after": after, "updated": f"{at}.0000000000"}).encode()
            offset += 1
            place = ("orders", offset % 6)
            rows.append(
                Row.of(Hlc(at), "orders", f"[{key}]".encode(), value, place, offset, decoder.change)
            )
        yield Window(resolved, tuple(rows))


def _existing(chosen: random.Random, keys: str, following: int) -> int:
    if keys == "recent" and chosen.random() < 0.9:
        return following - 1 - chosen.randrange(max(1, following // 20))
    return chosen.randrange(following)


def files_on_disk(catalog: object) -> int:
    """The table's data files on disk (referenced or not yet removed)."""
    table = load(catalog).load_table("bench.orders")  # type: ignore[arg-type]
    return sum(1 for path in listed(table) if path.endswith(".parquet"))


def run(args: argparse.Namespace, warehouse: Path) -> None:
    """Load, apply the windows timed (maintained on the schedule), check, maintain."""
    chosen = random.Random(52)  # noqa: S311 - benchmark data
    model: Model = {}
    catalog = embedded(warehouse)
    applier = IcebergApplier(catalog, "bench", namespace="bench", schemas={"orders": ORDERS})
    applier.start(["orders"])
    loaded = load_orders(applier, args.rows, chosen, model)
    gc.freeze()  # the model: the bench's own, walked by every full collection otherwise
    per_window = args.rate * args.seconds
    windows = workload(args.windows, per_window, args.seconds, args.keys, chosen, model, args.new)
    applier = IcebergApplier(catalog, "bench", namespace="bench", schemas={"orders": ORDERS})
    applier.start(["orders"])
    print(
        f"iceberg: {args.rows:,} orders loaded in {loaded:.1f} s; {args.windows} windows of "
        f"{per_window:,} changes ({args.keys} keys, {args.new:.0%} new, {DELETES:.0%} "
        f"deleted), each built before its clock starts; maintained every "
        f"{args.maintain_every or 'no'} windows",
        flush=True,
    )
    times, upkeep = [], []
    for n, window in enumerate(windows, 1):
        began = time.perf_counter()
        applier.apply(window)
        times.append(time.perf_counter() - began)
        if args.maintain_every and n % args.maintain_every == 0 and n < args.windows:
            upkeep.append(_maintained(catalog, n))
    report("iceberg apply", times, sum(times) + sum(upkeep), per_window)
    tenths(times, upkeep, per_window, args.maintain_every)
    checked_and_maintained(catalog, model, "", len(times), on_disk=True)


def _maintained(catalog: Any, windows: int) -> float:
    """A scheduled :func:`maintain` between two windows; its seconds."""
    took, said = _maintain(catalog)
    print(f"iceberg maintained after {windows} windows in {took:.1f} s: {said}", flush=True)
    return took


def _maintain(catalog: Any) -> tuple[float, str]:
    """:func:`maintain` keeping the latest cut, orphans of any age: its seconds, its report."""
    began = time.perf_counter()
    reports = maintain(
        catalog,
        "bench",
        namespace="bench",
        keep=Keep(last=1, newer_than=None),
        orphans_older_than=timedelta(0),
    )
    return time.perf_counter() - began, str(reports[0])


def tenths(times: list[float], upkeep: list[float], per_window: int, every: int) -> None:
    """changes/s in each tenth of the run (its windows and the maintenance within them)."""
    size = max(1, len(times) // 10)
    rates = []
    for start in range(0, len(times), size):
        spent = sum(times[start : start + size])
        if every:  # the scheduled runs after windows start+1 .. start+size
            spent += sum(
                took for i, took in enumerate(upkeep, 1) if start < i * every <= start + size
            )
        rates.append(f"{per_window * len(times[start : start + size]) / spent:,.0f}")
    print(f"iceberg apply per tenth of the windows (changes/s): {', '.join(rates)}", flush=True)


def report(label: str, times: list[float], elapsed: float, per_window: int) -> None:
    """Windows/s and changes/s over all windows, and the window p50 and slowest tenth."""
    changes = per_window * len(times)
    slow = statistics.mean(sorted(times)[-max(1, len(times) // 10) :])
    print(
        f"{label}: {len(times) / elapsed:.2f} windows/s, {changes / elapsed:,.0f} "
        f"changes/s ({changes:,} changes in {elapsed:.1f} s; a window p50 "
        f"{statistics.median(times):.2f} s, slowest tenth {slow:.2f} s: "
        f"{per_window / slow:,.0f} changes/s)",
        flush=True,
    )


def checked_and_maintained(
    catalog: Any, model: Model, engine: str, windows: int, *, on_disk: bool
) -> None:
    """The table checked against the model; its files before and after ``maintain``."""
    table = load(catalog).load_table("bench.orders")
    rows = table.scan().to_arrow()
    total = pc.sum(rows.column("amount")).as_py()
    if rows.num_rows != len(model) or total != sum(model.values()):
        raise RuntimeError(f"the table holds {rows.num_rows} rows, the model {len(model)}")

    def files() -> str:
        count = sizes(load(catalog).load_table("bench.orders"))[0]
        return f"{count} ({files_on_disk(catalog)} on disk)" if on_disk else str(count)

    before = files()
    took, said = _maintain(catalog)
    print(
        f"iceberg files per table after {windows} windows{engine}: {before} data files; after "
        f"maintenance ({took:.1f} s): {files()}; {said}; table checked: "
        f"{rows.num_rows:,} rows as the model",
        flush=True,
    )


def iceberg_part(  # noqa: PLR0917 - the bench's options
    rows: int,
    rate: int,
    seconds: int,
    windows: int,
    keys: str,
    new: float = 0.1,
    maintain_every: int = 60,
) -> None:
    """The part as ``make bench`` runs it: in a warehouse of its own, removed after."""
    args = argparse.Namespace(
        rows=rows,
        rate=rate,
        seconds=seconds,
        windows=windows,
        keys=keys,
        new=new,
        maintain_every=maintain_every,
    )
    warehouse = Path(tempfile.mkdtemp(prefix="highwater-bench-iceberg-"))
    try:
        run(args, warehouse)
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """The Iceberg part on its own (no broker: the windows are built here)."""
    parser = argparse.ArgumentParser(prog="bench_iceberg", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5_000, help="changes/s of the source")
    parser.add_argument("--seconds", type=int, default=5, help="of a window")
    parser.add_argument("--windows", type=int, default=720, help="720 of 5 s: an hour")
    parser.add_argument("--keys", choices=["uniform", "recent"], default="uniform")
    parser.add_argument("--new", type=float, default=0.1, help="of a window's changes")
    parser.add_argument("--maintain-every", type=int, default=60, help="windows (0: never)")
    args = parser.parse_args(argv)
    iceberg_part(
        args.rows, args.rate, args.seconds, args.windows, args.keys, args.new, args.maintain_every
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
