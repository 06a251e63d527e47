"""Apache Iceberg's REST catalog server as ``highwater dev iceberg`` runs it, and restarts of it.

``highwater dev iceberg start`` prints the catalog properties ``highwater apply --catalog``
takes; pyiceberg creates, appends to and reads back a table through it; the catalog (a SQLite
file in the warehouse) and the table's history survive a restart of the server on the same
port. Then the restart the applier must ride out (issue 52, item 7): the server is stopped
between two windows while the applier runs; its next commit finds no catalog, waits with
back-off, and goes on once the server is back, with no window lost or applied twice. An
applier started while the catalog is down waits for it the same way. A catalog that stays
away stops the applier with ``CatalogUnreachable`` once its patience is spent (at a commit,
and at the start).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from highwater_consumer.iceberg import CatalogUnreachable, IcebergApplier, cut, load
from pipeline.dev.iceberg_rest import CATALOG_FILE, EmbeddedIcebergRest
from schemas.hlc import Hlc
from tests.support.iceberg import exactly_once_problems
from tests.support.process import ROOT
from tests.unit.test_iceberg import SCHEMAS, STATES, state, windows


def dev_iceberg(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "dev", "iceberg", *args, "--dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_dev_iceberg_prints_the_catalog_and_its_tables_survive_a_restart(tmp_path: Path) -> None:
    folder = tmp_path / "rest"
    try:
        started = dev_iceberg(folder, "start")
        assert started.returncode == 0, started.stderr
        flags = started.stdout.splitlines()[-1].split()
        assert flags[:2] == ["highwater", "apply"], started.stdout
        assert flags[3::2] == ["--catalog", "--catalog"], started.stdout
        properties = dict(flag.split("=", 1) for flag in flags[4::2])
        assert properties["type"] == "rest"
        assert properties["uri"].startswith("http://127.0.0.1:")
        catalog = load(properties)
        catalog.create_namespace("kept")
        rows = pa.table({"id": pa.array([1, 2], pa.int64()), "note": ["a", "b"]})
        table = catalog.create_table("kept.t", rows.schema, properties={"owner": "test"})
        table.append(rows, snapshot_properties={"highwater.resolved": "10.0000000000"})
        assert (folder / "warehouse" / CATALOG_FILE).is_file()

        assert dev_iceberg(folder, "stop").stdout.strip() == "stopped"
        assert dev_iceberg(folder, "status").returncode == 3
        again = dev_iceberg(folder, "start")
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[-1] == started.stdout.splitlines()[-1]  # same URI

        reread = load(properties).load_table("kept.t")
        assert reread.properties["owner"] == "test"
        summary = reread.current_snapshot().summary  # type: ignore[union-attr]
        assert summary["highwater.resolved"] == "10.0000000000"
        assert reread.scan().to_arrow().sort_by("id").to_pylist() == rows.to_pylist()
    finally:
        dev_iceberg(folder, "stop")
    assert dev_iceberg(folder, "status").stdout.strip() == "not running"


def test_the_applier_rides_out_a_restart_of_the_rest_catalog(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddedIcebergRest(tmp_path / "rest")
    try:
        properties = server.start().properties
        applier = IcebergApplier(properties, "cf", namespace="ns", schemas=SCHEMAS, patience=120)
        applier.start(SCHEMAS)
        first, *rest = windows()
        assert applier.apply(first)
        server.stop()  # between two windows
        failed: list[BaseException] = []

        def go_on() -> None:
            try:
                for window in rest:
                    applier.apply(window)
            except BaseException as exc:  # handed to the test's thread
                failed.append(exc)

        applying = threading.Thread(target=go_on)
        applying.start()
        time.sleep(3)
        assert applying.is_alive()  # waiting for the catalog, backing off
        server.start()  # in this thread: the server's life is tied to the thread that starts it
        applying.join(timeout=120)
        assert not applying.is_alive()
        assert failed == []
        assert "the catalog does not answer" in caplog.text

        catalog = load(properties)
        assert exactly_once_problems(catalog, "ns", "cf") == []
        for wall, expected in STATES.items():
            assert state(catalog, cut(catalog, "ns", "cf", Hlc(wall))) == expected, wall
        assert cut(catalog, "ns", "cf").resolved == Hlc(30)
    finally:
        server.stop()


def test_an_applier_started_before_its_catalog_answers_waits_for_it(tmp_path: Path) -> None:
    server = EmbeddedIcebergRest(tmp_path / "rest")
    try:
        properties = server.start().properties
        first = IcebergApplier(properties, "cf", namespace="ns", schemas=SCHEMAS)
        first.start(SCHEMAS)
        first.apply(windows()[0])
        server.stop()
        with pytest.raises(CatalogUnreachable):  # the control: no patience, no wait
            IcebergApplier(properties, "cf", namespace="ns", schemas=SCHEMAS, patience=0).start(
                SCHEMAS
            )
        later = IcebergApplier(properties, "cf", namespace="ns", schemas=SCHEMAS, patience=120)
        outcome: list[object] = []

        def start() -> None:
            try:
                outcome.append(later.start(SCHEMAS))
            except BaseException as exc:  # handed to the test's thread
                outcome.append(exc)

        starting = threading.Thread(target=start)
        starting.start()
        time.sleep(3)
        assert starting.is_alive()  # waiting for the catalog, backing off
        server.start()
        starting.join(timeout=120)
        assert outcome == [Hlc(10)]  # where the first applier left the tables
    finally:
        server.stop()


def test_a_catalog_that_stays_away_stops_the_applier_after_its_patience(tmp_path: Path) -> None:
    server = EmbeddedIcebergRest(tmp_path / "rest")
    try:
        properties = server.start().properties
        applier = IcebergApplier(properties, "cf", namespace="ns", schemas=SCHEMAS, patience=2)
        applier.start(SCHEMAS)
        applier.apply(windows()[0])
    finally:
        server.stop()
    with pytest.raises(CatalogUnreachable, match="did not answer for") as stopped:
        applier.apply(windows()[2])
    assert stopped.value.waited >= 2
    assert isinstance(stopped.value.__cause__, OSError)  # the connection refused
