"""``highwater apply --catalog`` on the real chain, by both engines: one changefeed's output.

The Iceberg apply tests' changefeed (tests/integration/test_consumer_apply_iceberg.py: two
seeded typed workloads through a real changefeed into its JSON output topics) runs once for
this module, and both engines apply it:

- **The local engine** into each catalog kind (``iceberg_catalog``: the embedded SQLite
  catalog in tmp_path, and Apache Iceberg's own REST catalog server), each with a consumer
  group of its own: an applier process SIGKILLed between two tables' commits of a window (the
  cut before it complete and equal to the source at its R, the window's own cut incomplete),
  then ``highwater apply`` SIGKILLed at random moments and started again, to the final marker.
- **The Spark engine** in local mode into the REST catalog, reading a bounded offset range a
  step (``--max-offsets``) so the output makes many windows: an applier process SIGKILLed
  between two tables' commits, then ``highwater apply --engine spark`` SIGKILLed once at a
  random moment and run again to the final marker; read back with pyiceberg and with Spark
  (``SELECT … VERSION AS OF <snapshot id>``, another process).

Every table's commits are once per window (:func:`exactly_once_problems`), every complete cut
equals the sources at its R. Negative controls: an engine that does not read what the tables
hold applies a window twice and the check names it (the Spark engine's, on the tables the
kills test left; the local engine's in test_consumer_apply_iceberg.py and
tests/unit/test_iceberg.py); a table read at the previous cut's snapshot differs from the
sources at the later R, with both readers.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from highwater_consumer import Output
from highwater_consumer.iceberg import Cut, CutError, IcebergApplier, cut, load
from highwater_consumer.iceberg.cuts import applied, tables_of
from pipeline.dev.iceberg_rest import EmbeddedIcebergRest
from schemas.hlc import Hlc
from tests.integration.test_consumer_apply_iceberg import (
    SEED,
    TABLES,
    Applied,
    differences,
    expected_row,
    output,
    table_at,
    through_changefeed,
)
from tests.support.iceberg import (
    apply_across_kills,
    cli,
    complete_cuts,
    exactly_once_problems,
    row_differences,
)
from tests.support.iceberg_spark import read_at
from tests.support.process import ROOT
from tests.support.workload import Workload, live_at

__all__ = ["output"]  # the changefeed's output, made once for the module
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]  # Spark processes, many steps
MAX_OFFSETS = 100  # records a step reads of a partition: many windows from a finished output
COLUMNS = ("amount", "note", "meta", "maybe", "flag", "at", "extra")
NAMESPACE = "shop"  # the local engine's, in each catalog


def namespace_for(test: str) -> str:
    return f"spark_{test}_{uuid.uuid4().hex[:6]}"


def applier_process(  # noqa: PLR0917 - a process's arguments
    bootstrap: str, changefeed: str, catalog: str, namespace: str, group: str, mode: str
) -> None:
    """The Spark engine in local mode, reading as ``group``, in one of two ``mode``.

    ``kill:<n>`` dies (SIGKILL) between the two tables' commits of its n-th window (from 0);
    ``forgetful`` reads no table's R (the negative control's bug) and applies one step.
    """
    from pipeline.iceberg import SparkIcebergApplier, SparkTarget, iceberg_session  # noqa: PLC0415
    from pipeline.iceberg.ranges import Offsets  # noqa: PLC0415

    output = Output.of_changefeed(bootstrap, changefeed)
    properties = json.loads(catalog)
    tables = IcebergApplier(properties, changefeed, namespace=namespace, schemas=output.schemas)
    spark = iceberg_session(SparkTarget.of(properties, "local[2]"), "apply-test")
    engine = SparkIcebergApplier(spark, output, tables, Offsets(output, group), MAX_OFFSETS)
    engine.start()
    if mode == "forgetful":
        engine._held = lambda table: None  # type: ignore[method-assign]
        for table in engine.tables.values():
            table.resolved = None
        assert engine.step(), "the forgetful engine applied nothing"
        return
    crash = int(mode.removeprefix("kill:"))

    def reached(step: str) -> None:
        if engine.windows >= crash and step == f"committed {TABLES[0]}":
            os.kill(os.getpid(), signal.SIGKILL)

    engine.reached = reached
    engine.run(idle=60)
    raise AssertionError("the applier ran out of windows before its crash")


def process(
    kafka: str, found: Applied, catalog: dict[str, str], namespace: str, *more: str
) -> list[str]:
    return [
        sys.executable,
        "-m",
        __name__,
        kafka,
        found.changefeed,
        json.dumps(catalog),
        namespace,
        *more,
    ]


def highwater_apply(
    kafka: str, found: Applied, catalog: dict[str, str], namespace: str, *more: str
) -> list[str]:
    """``highwater apply --engine spark`` in local mode, a few records a partition a step."""
    engine = ["--engine", "spark", "--master", "local[2]", "--max-offsets", str(MAX_OFFSETS)]
    return cli(kafka, found.changefeed, catalog, namespace, *engine, *more, entry="pipeline.cli")


def spark_row(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row Spark read (every value cast to text) as :func:`expected_row` makes one."""
    amount, extra, at, flag = row["amount"], row["extra"], row["at"], row["flag"]
    return (
        None if amount is None else Decimal(amount),
        row["note"],
        row["meta"],
        row["maybe"],
        None if flag is None else flag == "true",
        None if at is None else datetime.datetime.fromisoformat(at).replace(tzinfo=datetime.UTC),
        None if extra is None else Decimal(extra),
    )


def spark_differences(
    read: dict[tuple[str, int], list[dict[str, Any]]],
    found: Cut,
    workloads: dict[str, Workload],
    snapshots: dict[str, int] | None = None,
) -> list[str]:
    """How Spark's reads of the cut's snapshots (or ``snapshots``) differ from the sources."""
    out = []
    for table, workload in workloads.items():
        live = live_at(workload.changes, found.resolved.wall)
        want = {key: expected_row(after) for key, after in live.items()}
        rows = read[(table, (snapshots or found.snapshots)[table])]
        have = {(r["region"], int(r["id"])): spark_row(r) for r in rows}
        out += row_differences(f"{table} at {found.resolved}", want, have)
    return out


def test_iceberg_tables_are_the_source_at_every_cut_across_kills(
    kafka_bootstrap: str, output: Applied, iceberg_catalog: dict[str, str], tmp_path: Path
) -> None:
    rnd = random.Random(SEED)
    changefeed, workloads = output.changefeed, output.workloads
    catalog = load(iceberg_catalog)
    final = Hlc(max(c.wall for w in workloads.values() for c in w.changes) + 1_000)
    killed = apply_across_kills(
        kafka_bootstrap,
        changefeed,
        iceberg_catalog,
        NAMESPACE,
        tmp_path / "apply.log",
        rnd,
        "--until",
        str(final),
    )
    torn, kills = killed.torn, killed.kills
    before = cut(catalog, NAMESPACE, changefeed, killed.before)

    # 3. every window once in every table; every cut the sources at its R
    assert exactly_once_problems(catalog, NAMESPACE, changefeed) == []
    cuts = complete_cuts(catalog, NAMESPACE, changefeed)
    assert torn in cuts
    assert before.resolved in cuts
    assert cuts[-1] >= final
    step = max(1, len(cuts) // 25)
    checked = sorted({*cuts[::step], before.resolved, torn, cuts[-1]})
    wrong = [
        d
        for r in checked
        for d in differences(catalog, cut(catalog, NAMESPACE, changefeed, r), workloads)
    ]
    assert wrong == []
    last = cut(catalog, NAMESPACE, changefeed)
    assert last.resolved == cuts[-1]
    assert all(len(table_at(catalog, last, t)) > 100 for t in TABLES), "the workloads' live keys"
    print(
        f"iceberg apply ({iceberg_catalog.get('type', 'sqlite')}): "
        f"{sum(len(w.changes) for w in workloads.values())} changes in "
        f"{len(TABLES)} tables, {len(cuts)} complete cuts ({len(checked)} compared with the "
        f"sources), a kill between two tables at {torn}, {kills} applier kills"
    )


def test_spark_engine_tables_are_the_source_at_every_cut_across_kills(
    kafka_bootstrap: str, output: Applied, iceberg_rest: dict[str, str], tmp_path: Path
) -> None:
    rnd = random.Random(SEED)
    workloads, namespace = output.workloads, namespace_for("cuts")
    group = f"highwater-apply-spark-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "apply.log"

    # 1. killed between two tables' commits of its fourth window
    crash = process(kafka_bootstrap, output, iceberg_rest, namespace, group, "kill:3")
    died = subprocess.run(crash, cwd=ROOT, capture_output=True, timeout=600, check=False)
    assert died.returncode == -signal.SIGKILL, died.stderr.decode(errors="replace")[-3000:]
    catalog = load(iceberg_rest)
    held = {
        n: [r for r, _ in applied(t, output.changefeed)]
        for n, t in tables_of(catalog, namespace, output.changefeed).items()
    }
    torn = held[TABLES[0]][-1]
    assert torn not in held[TABLES[1]]
    assert len(held[TABLES[1]]) == 3, held
    before = cut(catalog, namespace, output.changefeed)
    assert before.resolved == held[TABLES[1]][-1] < torn
    assert differences(catalog, before, workloads) == []
    with pytest.raises(CutError, match=f"{TABLES[1]} hold no snapshot"):
        cut(catalog, namespace, output.changefeed, torn)

    # 2. highwater apply --engine spark, SIGKILLed at a random moment, then to the end
    final = Hlc(max(c.wall for w in workloads.values() for c in w.changes) + 1_000)
    command = highwater_apply(kafka_bootstrap, output, iceberg_rest, namespace, "--group", group)
    with log.open("ab") as out:
        running = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    time.sleep(rnd.uniform(25.0, 40.0))  # its start takes ~15 s, a step a few seconds
    killed = running.poll() is None
    running.send_signal(signal.SIGKILL)
    running.wait()
    with log.open("ab") as out:
        done = subprocess.run(
            [*command, "--until", str(final), "--idle", "60"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    assert done.returncode == 0, log.read_text(errors="replace")[-3000:]

    # 3. every window once in every table; every cut the sources at its R, both readers
    assert exactly_once_problems(catalog, namespace, output.changefeed) == []
    cuts = complete_cuts(catalog, namespace, output.changefeed)
    assert torn in cuts
    assert before.resolved in cuts
    assert cuts[-1] >= final
    found = [cut(catalog, namespace, output.changefeed, r) for r in cuts]
    assert [d for c in found for d in differences(catalog, c, workloads)] == []
    pairs = sorted({(t, s) for c in found for t, s in c.snapshots.items()})
    read = read_at(iceberg_rest, namespace, pairs)
    assert [d for c in found for d in spark_differences(read, c, workloads)] == []
    last = found[-1]
    assert all(len(read[(t, last.snapshots[t])]) > 100 for t in TABLES), "the live keys"

    # the comparisons' negative control: a table at the previous cut is not the later R's
    previous, later = found[-2], found[-1]
    stale = Cut(namespace, later.resolved, previous.snapshots)
    assert differences(catalog, stale, workloads) != []
    assert spark_differences(read, later, workloads, previous.snapshots) != []
    # the negative control of the exactly-once check, on the Spark engine's own commits: an
    # engine that does not read what the tables hold (its skip defeated), on a new group,
    # applies its first step again onto these tables, and the check names it
    forgetful = process(
        kafka_bootstrap, output, iceberg_rest, namespace, "g-forgetful", "forgetful"
    )
    again = subprocess.run(forgetful, cwd=ROOT, capture_output=True, timeout=600, check=False)
    assert again.returncode == 0, again.stderr.decode(errors="replace")[-3000:]
    problems = exactly_once_problems(catalog, namespace, output.changefeed)
    with pytest.raises(AssertionError) as failed:
        assert problems == []
    print(f"the check failed as it must: {failed.value}")
    assert {p.split(": ", 1)[0] for p in problems} == set(TABLES)
    assert all("applied twice" in p or "after a later one" in p for p in problems), problems
    print(
        f"iceberg apply --engine spark: {sum(len(w.changes) for w in workloads.values())} "
        f"changes, {len(cuts)} complete cuts, each compared with the sources by pyiceberg "
        f"and Spark; a kill between two tables at {torn}, a kill of highwater apply "
        f"({'mid-run' if killed else 'after it ended'})"
    )


@pytest.fixture(scope="module")
def avro_output(kafka_bootstrap: str, spark: Any, schema_registry_url: str) -> Applied:
    """The same workloads through a changefeed writing Avro through the registry."""
    registry = {"schema_registry": {"url": schema_registry_url}}
    return through_changefeed(
        kafka_bootstrap, spark, "iceberg-apply-avro", format="avro", **registry
    )


@pytest.mark.soak  # a changefeed of its own and a Spark run; in make test: the unit tests
# test_avro_records_become_rows_and_avro_markers_are_markers and the JSON chain above
def test_the_spark_engine_applies_avro_output(
    kafka_bootstrap: str, avro_output: Applied, iceberg_rest: dict[str, str]
) -> None:
    """Avro output (Confluent's wire format): rows and markers read on the executors.

    ``highwater apply --engine spark`` to the final marker: every window once in every table,
    every complete cut the sources at its R. The comparison's control: a table read at the
    previous cut differs from the sources at the later R.
    """
    workloads, namespace = avro_output.workloads, namespace_for("avro")
    final = Hlc(max(c.wall for w in workloads.values() for c in w.changes) + 1_000)
    command = highwater_apply(kafka_bootstrap, avro_output, iceberg_rest, namespace)
    done = subprocess.run(
        [*command, "--group", f"g-{uuid.uuid4().hex[:8]}", "--until", str(final), "--idle", "60"],
        cwd=ROOT,
        capture_output=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
    catalog = load(iceberg_rest)
    assert exactly_once_problems(catalog, namespace, avro_output.changefeed) == []
    cuts = complete_cuts(catalog, namespace, avro_output.changefeed)
    assert len(cuts) > 3, done.stderr.decode(errors="replace")[-3000:]
    assert cuts[-1] >= final
    found = [cut(catalog, namespace, avro_output.changefeed, r) for r in cuts]
    assert [d for c in found for d in differences(catalog, c, workloads)] == []
    stale = Cut(namespace, found[-1].resolved, found[-2].snapshots)
    assert differences(catalog, stale, workloads) != []


@pytest.mark.soak  # 3.5 minutes of Spark runs; in make test: tests/unit/test_iceberg_spark.py's
# test_a_catalog_that_does_not_answer_is_told_from_other_failures, and the REST restart test
# of the local engine (tests/integration/test_iceberg_rest.py), whose Outage it shares
def test_the_spark_engine_rides_out_a_restart_of_the_rest_catalog(
    kafka_bootstrap: str, output: Applied, tmp_path: Path
) -> None:
    """The catalog stopped once the engine has committed a window, started again 10 s later.

    First the control: with no patience (``--catalog-patience 0``) the outage stops
    ``highwater apply --engine spark``, naming the catalog. Then, resuming on the same group,
    the same outage is waited out with back-off and the engine goes on: every window once in
    every table, every complete cut the sources at its R.
    """
    server = EmbeddedIcebergRest(tmp_path / "rest")
    properties = server.start().properties
    workloads, namespace = output.workloads, namespace_for("outage")
    final = Hlc(max(c.wall for w in workloads.values() for c in w.changes) + 1_000)
    group = f"g-{uuid.uuid4().hex[:8]}"
    command = highwater_apply(kafka_bootstrap, output, properties, namespace, "--group", group)
    command += ["--until", str(final), "--idle", "120"]
    catalog, log = load(properties), tmp_path / "apply.log"

    def outage(patience: str) -> subprocess.Popen[bytes]:
        """The engine started; the server stopped once it holds one more cut than now."""
        before = len(_cuts(catalog, namespace, output.changefeed))
        with log.open("ab") as out:
            running = subprocess.Popen(
                [*command, "--catalog-patience", patience],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 300
        while len(_cuts(catalog, namespace, output.changefeed)) <= before:
            assert running.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no window committed in 300 s"
            time.sleep(0.5)
        server.stop()
        return running

    try:
        impatient = outage("0")
        assert impatient.wait(timeout=300) != 0
        assert "did not answer for" in log.read_text(errors="replace")
        server.start()

        patient = outage("120")
        time.sleep(10)
        assert patient.poll() is None, log.read_text(errors="replace")[-3000:]  # waiting
        server.start()
        assert patient.wait(timeout=900) == 0, log.read_text(errors="replace")[-3000:]
        assert "the catalog does not answer" in log.read_text(errors="replace")
    finally:
        server.stop()
    server.start()
    try:
        assert exactly_once_problems(catalog, namespace, output.changefeed) == []
        cuts = complete_cuts(catalog, namespace, output.changefeed)
        assert cuts[-1] >= final
        found = [cut(catalog, namespace, output.changefeed, r) for r in cuts]
        assert [d for c in found for d in differences(catalog, c, workloads)] == []
    finally:
        server.stop()


def _cuts(catalog: Any, namespace: str, changefeed: str) -> list[Hlc]:
    """The complete cuts so far (none before the tables are made)."""
    from pyiceberg.exceptions import NoSuchNamespaceError  # noqa: PLC0415

    try:
        return complete_cuts(catalog, namespace, changefeed)
    except (NoSuchNamespaceError, TypeError):  # no namespace, or no table yet to intersect
        return []


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    applier_process(*sys.argv[1:7])
