"""The changefeed's initial scan into Iceberg as one cut at its statement time, in bounded memory.

A source of a few thousand orders (the generator's, updates and deletes among them) and a
changefeed with ``initial_scan: only``: its output is the table at the statement time T, every
row ``updated`` T, then the marker T, so the consumer hands it over as **one window** at T,
in pieces of ``PIECE`` rows. The applier (a process of its own) holds at most ``BOUND`` rows
of a table; past them it writes them ahead as data files, committed with the last piece.

First the applier is SIGKILLed in the middle of the window, after several spills: no cut,
no snapshot at all (the files written ahead are orphans). The restarted applier applies the
window whole: the table at the cut T equals the source's state at T, one snapshot, and the
rows it held never passed the bound. The negative control: the same window applied without a
bound holds every row of the table at once, which the bound's check refuses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from highwater_consumer import ChangefeedConsumer, Output
from highwater_consumer.iceberg import CutError, IcebergApplier, apply, cut, load
from pipeline.dev.generator import GeneratorSpec, write
from schemas.hlc import Hlc
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.iceberg import exactly_once_problems
from tests.support.process import ROOT
from tests.support.scan import expected

pytestmark = pytest.mark.integration

NAMESPACE = "lake"
PIECE, BOUND = 300, 500  # rows a piece; rows a table holds at most before writing them ahead
KILL_AT = 3  # the spill after which the first applier is killed
ORDERS = json.loads((ROOT / "examples" / "orders.avsc").read_text())


def applier_process(
    bootstrap: str, changefeed: str, warehouse: str, until: str, *, kill_at: int, spill: str
) -> None:
    """Applies the changefeed's windows up to ``until``; prints what it held, as JSON.

    ``kill_at`` above 0: SIGKILLs itself after that many spills. ``spill``: rows, or "none".
    """
    output = Output.of_changefeed(bootstrap, changefeed)
    applier = IcebergApplier(
        {"warehouse": warehouse},
        changefeed,
        namespace=NAMESPACE,
        schemas=output.schemas,
        spill=None if spill == "none" else int(spill),
    )
    spills = []

    def reached(step: str) -> None:
        if step.startswith("spilled"):
            spills.append(step)
            if len(spills) == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    applier.reached = reached
    after = applier.start(output.topics.values())
    group = f"iceberg-scan-{changefeed}-{Path(warehouse).name}"  # one per warehouse
    with ChangefeedConsumer(output, group, after=after, piece=PIECE) as consumer:
        windows = apply(consumer, applier, until=Hlc.parse(until), idle=60)
    print(json.dumps({"windows": windows, "most_held": applier.most_held, "spills": len(spills)}))


def run_applier(
    bootstrap: str, changefeed: str, warehouse: Path, until: Hlc, *, kill_at: int, spill: str
) -> subprocess.CompletedProcess[str]:
    arguments = [bootstrap, changefeed, str(warehouse), str(until), str(kill_at), spill]
    return subprocess.run(
        [sys.executable, "-m", __name__, *arguments],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def table_rows(catalog: Any, changefeed: str, at: Hlc) -> dict[tuple[str, int], tuple[Any, ...]]:
    found = cut(catalog, NAMESPACE, changefeed, at).scan(catalog, "orders").to_arrow()
    return {
        (r["region"], r["order_id"]): (r["status"], r["amount"], r["items"], r["customer_id"])
        for r in found.to_pylist()
    }


def test_the_initial_scan_lands_as_one_cut_at_the_statement_time_in_bounded_memory(
    kafka_bootstrap: str, spark: Any, unique_name: Any, tmp_path: Path
) -> None:
    source, changefeed = unique_name("src"), unique_name("cf")
    spec = GeneratorSpec(topic=source, rows=6_000, partitions=3, resolved_every=500, seed=52)
    changes = write(spec, {"bootstrap.servers": kafka_bootstrap}, keep_changes=True).changes
    table = {"topic": source, "table": "orders", "table_schema": ORDERS}
    config = changefeed_config(
        kafka_bootstrap,
        changefeed,
        [{**table, "primary_key": ["region", "order_id"]}],
        encoder={"updated": True},
        initial_scan="only",
    )
    statement = run_to_end(config, spark).statement_time
    assert statement is not None
    want = {
        tuple(json.loads(key)): (a["status"], a["amount"], a["items"], a["customer_id"])
        for key, (a, _) in expected(changes, statement).snapshot.items()
    }
    assert len(want) > 5 * BOUND  # a table many times the bound
    warehouse = tmp_path / "warehouse"
    catalog = load({"warehouse": str(warehouse)})

    # 1. killed in the middle of the window, after rows were written ahead: no cut
    killed = run_applier(
        kafka_bootstrap, changefeed, warehouse, statement, kill_at=KILL_AT, spill=str(BOUND)
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    orders = catalog.load_table(f"{NAMESPACE}.orders")
    assert orders.current_snapshot() is None  # no part of the window is the table's
    with pytest.raises(CutError, match="no complete cut yet"):
        cut(catalog, NAMESPACE, changefeed)
    orphans = list(warehouse.rglob("*.parquet"))
    assert len(orphans) >= KILL_AT  # written ahead, never committed: maintenance's to remove

    # 2. restarted: the window whole, one snapshot at T, the rows held within the bound
    done = run_applier(
        kafka_bootstrap, changefeed, warehouse, statement, kill_at=0, spill=str(BOUND)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["windows"] == 1
    assert report["spills"] >= len(want) // BOUND - 1
    assert report["most_held"] <= BOUND
    assert cut(catalog, NAMESPACE, changefeed).resolved == statement
    assert table_rows(catalog, changefeed, statement) == want  # the source at T
    snapshots = catalog.load_table(f"{NAMESPACE}.orders").snapshots()
    assert [s.summary["highwater.resolved"] for s in snapshots] == [str(statement)]  # type: ignore[index]
    assert exactly_once_problems(catalog, NAMESPACE, changefeed) == []

    # 3. the negative control: no bound, and the rows held are the whole table
    unbounded = tmp_path / "unbounded"
    whole = run_applier(kafka_bootstrap, changefeed, unbounded, statement, kill_at=0, spill="none")
    assert whole.returncode == 0, whole.stderr[-3000:]
    held = json.loads(whole.stdout.strip().splitlines()[-1])["most_held"]
    with pytest.raises(AssertionError):
        assert held <= BOUND
    assert held == len(want)
    assert table_rows(load({"warehouse": str(unbounded)}), changefeed, statement) == want
    print(
        f"initial scan to Iceberg: {len(want)} rows at {statement} in pieces of {PIECE}; "
        f"killed after {KILL_AT} spills ({len(orphans)} orphan files, no snapshot); restarted: "
        f"{report['spills']} spills, at most {report['most_held']} rows held (bound {BOUND}); "
        f"without the bound {held}"
    )


if __name__ == "__main__":
    applier_process(*sys.argv[1:5], kill_at=int(sys.argv[5]), spill=sys.argv[6])
