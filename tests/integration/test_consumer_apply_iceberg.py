"""``highwater apply --catalog`` on the real chain: source topics -> changefeed -> Iceberg.

Two seeded workloads (the apply tests' :class:`Workload`, with columns an Iceberg table types:
exact decimals, instants with their zone, text of any characters, nested JSON, booleans,
nulls, deletes, a column set only from mid-stream, upstream duplicates, bad records) flow
through a real changefeed (declared table schemas, JSON output) into its output topics, once
for the module; the applier writes them into each catalog kind (``iceberg_catalog``): the
embedded SQLite catalog in tmp_path, and Apache Iceberg's own REST catalog server (pyiceberg
reads its tables back), each with a consumer group of its own.

First an applier process is SIGKILLed between two tables' commits of a window: the cut
before it is complete and equals the source at its R, the window's own cut is incomplete.
Then ``highwater apply`` runs, SIGKILLed at random moments and started again, to the final
marker. Every table's commits are checked once per window (none twice, none lost: the check's
negative control is in tests/unit/test_iceberg.py and below), every complete cut equals the
source at its R, and the last equals the source's final state.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from highwater_consumer import ChangefeedConsumer, Output
from highwater_consumer.iceberg import Cut, CutError, IcebergApplier, cut, load
from highwater_consumer.iceberg.cuts import applied, tables_of
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.iceberg import exactly_once_problems
from tests.support.process import ROOT
from tests.support.workload import NOTES, Workload, live_at

PARTITIONS = 3
SEED = int(os.environ.get("HIGHWATER_APPLY_SEED", "11"))
CHANGES = 1000  # per table; the column `extra` is set from the 400th change on
TABLES = ("customers", "orders")  # in name order: the applier commits customers first
AMOUNTS = ["12345678901234567.89", "1.10", "1E+2", "-0", "0.000001", "-2.50e-3", "42"]
INSTANTS = ["2024-02-29T23:59:59.123456+05:30", "1970-01-01T00:00:00Z", "2038-01-19T03:14:08-08:00"]
NAMESPACE = "shop"


def decimal_type(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def record(name: str) -> dict[str, Any]:
    optional = {
        "amount": decimal_type(38, 18),
        "note": "string",
        "meta": "string",
        "maybe": "string",
        "flag": "boolean",
        "at": {"type": "long", "logicalType": "timestamp-micros"},
        "extra": decimal_type(38, 18),
    }
    fields: list[dict[str, Any]] = [
        {"name": "region", "type": "string"},
        {"name": "id", "type": "long"},
    ]
    fields += [{"name": n, "type": ["null", t], "default": None} for n, t in optional.items()]
    return {"type": "record", "name": name, "fields": fields}


class TypedWorkload(Workload):
    """The apply tests' workload with columns of the kinds an Iceberg table holds."""

    def _after(self) -> str:
        rnd = self._random
        tag, depth = rnd.choice(AMOUNTS), rnd.randint(0, 9)
        nested = f'{{"tags":["a",{tag}],"deep":{{"x":null,"y":[[{depth}]]}}}}'
        columns = [
            f'"amount":{rnd.choice(AMOUNTS)}',
            f'"note":"{rnd.choice(NOTES)}"',
            f'"meta":{nested}',
            '"maybe":null',
            f'"flag":{rnd.choice(["true", "false"])}',
            f'"at":"{rnd.choice(INSTANTS)}"',
        ]
        if self._extra:
            columns.append(f'"extra":{rnd.choice(AMOUNTS)}')
        return "{" + ",".join(columns) + "}"


def expected_row(after: str) -> tuple[Any, ...]:
    """What a table holds of an ``after`` text: numbers by value, JSON by its text."""
    values = json.loads(after, parse_float=Decimal, parse_int=Decimal)
    meta = re.search(r'"meta":(\{"tags".*?\]\]\}\})', after)
    assert meta is not None
    at = datetime.datetime.fromisoformat(values["at"]).astimezone(datetime.timezone.utc)
    return (
        values["amount"],
        values["note"],
        meta.group(1),
        None,
        values["flag"],
        at,
        values.get("extra"),
    )


def table_at(catalog: Any, found: Cut, table: str) -> dict[tuple[str, int], Any]:
    rows = found.scan(catalog, table).to_arrow().to_pylist()
    columns = ("amount", "note", "meta", "maybe", "flag", "at", "extra")
    return {(r["region"], r["id"]): tuple(r[c] for c in columns) for r in rows}


def differences(catalog: Any, found: Cut, workloads: dict[str, Workload]) -> list[str]:
    """How the tables at a cut differ from the sources at its R (empty: equal)."""
    out = []
    for table, workload in workloads.items():
        live = live_at(workload.changes, found.resolved.wall)
        want = {key: expected_row(after) for key, after in live.items()}
        have = table_at(catalog, found, table)
        out += [f"{table} at {found.resolved}: missing {k}" for k in want.keys() - have.keys()]
        out += [f"{table} at {found.resolved}: not deleted {k}" for k in have.keys() - want.keys()]
        out += [
            f"{table} at {found.resolved}: {k}: {have[k]} != {want[k]}"
            for k in want.keys() & have.keys()
            if have[k] != want[k]
        ]
    return out


def complete_cuts(catalog: Any, changefeed: str) -> list[Hlc]:
    """Every R every table holds, in order."""
    tables = tables_of(catalog, NAMESPACE, changefeed)
    held = [{r for r, _ in applied(t, changefeed)} for t in tables.values()]
    return sorted(set.intersection(*held))


def produce(bootstrap: str, topics: dict[str, Workload]) -> None:
    """Each workload's changes (markers, duplicates, bad records among them), then its end."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    written = {topic: workload.records(CHANGES) for topic, workload in topics.items()}
    end = max(w.changes[-1].wall for w in topics.values())
    for topic, workload in topics.items():
        workload._wall = end  # one final marker time for both: every change below it
        for partition, key, value in [*written[topic], *workload.final_markers()]:
            producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(60) == 0


def applier_process(bootstrap: str, changefeed: str, catalog: str, group: str, after: int) -> None:
    """Applies ``after`` windows, then dies (SIGKILL) between the next window's two tables.

    ``catalog``: its properties as JSON. ``after`` below 0: applies on until killed. Reads a
    few records at a time: the output is all there already, and a consumer reading it whole
    would make it one window.
    """
    output = Output.of_changefeed(bootstrap, changefeed)
    properties = json.loads(catalog)
    applier = IcebergApplier(properties, changefeed, namespace=NAMESPACE, schemas=output.schemas)
    windows = 0

    def reached(step: str) -> None:
        if 0 <= after <= windows and step == f"committed {TABLES[0]}":
            os.kill(os.getpid(), signal.SIGKILL)

    applier.reached = reached
    start = applier.start(output.topics.values())
    with ChangefeedConsumer(output, group, after=start, batch=60) as consumer:
        for window in consumer.windows(idle=30):
            applier.apply(window)
            if window.last:
                consumer.ack(window)
                windows += 1
    raise AssertionError("the applier ran out of windows before its crash")


def cli(bootstrap: str, changefeed: str, catalog: dict[str, str], *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "highwater_consumer",
        "-v",
        "apply",
        changefeed,
        "--bootstrap-servers",
        bootstrap,
        *(f"--catalog={key}={value}" for key, value in catalog.items()),
        "--namespace",
        NAMESPACE,
        *more,
    ]


@dataclass(frozen=True)
class Applied:
    """The module's changefeed: its name and the workloads that went through it."""

    changefeed: str
    workloads: dict[str, Workload]


@pytest.fixture(scope="module")
def output(kafka_bootstrap: str, spark: Any) -> Applied:
    """The workloads through a changefeed into its output topics, once for every catalog."""
    changefeed = f"iceberg-apply.cf.{uuid.uuid4().hex[:8]}"
    # no lagging partition: markers every 25 changes on every partition, so many windows
    workloads = {t: TypedWorkload(PARTITIONS, SEED + n, lagging=-1) for n, t in enumerate(TABLES)}
    topics = {f"{changefeed}.src-{t}": workloads[t] for t in TABLES}
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, dict.fromkeys(topics, PARTITIONS))
    produce(kafka_bootstrap, topics)
    sources = [
        {
            "topic": topic,
            "table": table,
            "table_schema": record(table),
            "primary_key": ["region", "id"],
        }
        for topic, table in zip(topics, TABLES, strict=True)
    ]
    config = changefeed_config(
        kafka_bootstrap,
        changefeed,
        sources,
        encoder={"updated": True, "diff": True},
        on_error="dlq",
        spark={"max_offsets_per_trigger": 50},  # many batches: many markers, many windows
    )
    run_to_end(config, spark)
    return Applied(changefeed, workloads)


def test_iceberg_tables_are_the_source_at_every_cut_across_kills(
    kafka_bootstrap: str, output: Applied, iceberg_catalog: dict[str, str], tmp_path: Path
) -> None:
    rnd = random.Random(SEED)
    changefeed, workloads = output.changefeed, output.workloads
    group = f"highwater-apply-{changefeed}-{uuid.uuid4().hex[:8]}"  # one per catalog
    properties = json.dumps(iceberg_catalog)
    log = tmp_path / "apply.log"

    # 1. killed between two tables' commits of its fourth window
    crash = [sys.executable, "-m", __name__, kafka_bootstrap, changefeed, properties, group, "3"]
    died = subprocess.run(crash, cwd=ROOT, capture_output=True, timeout=300, check=False)
    assert died.returncode == -signal.SIGKILL, died.stderr.decode(errors="replace")[-3000:]
    catalog = load(iceberg_catalog)
    held = {
        n: [r for r, _ in applied(t, changefeed)]
        for n, t in tables_of(catalog, NAMESPACE, changefeed).items()
    }
    torn = held[TABLES[0]][-1]  # the window the kill tore: the first table holds it
    assert torn not in held[TABLES[1]]
    before = cut(catalog, NAMESPACE, changefeed)
    assert before.resolved == held[TABLES[1]][-1] < torn
    assert differences(catalog, before, workloads) == []
    with pytest.raises(CutError, match=f"{TABLES[1]} hold no snapshot"):
        cut(catalog, NAMESPACE, changefeed, torn)

    # 2. applier processes SIGKILLed at random moments, then highwater apply to the end
    kills = 0
    for _ in range(2):
        with log.open("ab") as out:
            process = subprocess.Popen(
                [*crash[:-1], "-1"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        time.sleep(rnd.uniform(3.0, 6.0))  # its start takes ~2 s; windows come every ~0.1 s
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait()
    final = Hlc(max(c.wall for w in workloads.values() for c in w.changes) + 1_000)
    with log.open("ab") as out:
        done = subprocess.run(
            cli(
                kafka_bootstrap,
                changefeed,
                iceberg_catalog,
                "--group",
                group,
                "--until",
                str(final),
            ),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )
    assert done.returncode == 0, log.read_text(errors="replace")[-3000:]

    # 3. every window once in every table; every cut the sources at its R
    assert exactly_once_problems(catalog, NAMESPACE, changefeed) == []
    cuts = complete_cuts(catalog, changefeed)
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


def test_a_window_applied_twice_fails_the_exactly_once_check(tmp_path: Path) -> None:
    """The negative control of the check above, on windows a changefeed's consumer hands over.

    An applier whose skip is defeated (it forgets what the tables hold) applies the same
    windows again: the check names each window twice, while the rows alone cannot tell.
    """
    from tests.unit.test_iceberg import SCHEMAS, windows  # noqa: PLC0415

    warehouse = {"warehouse": str(tmp_path)}
    first = IcebergApplier(warehouse, "cf", namespace=NAMESPACE, schemas=SCHEMAS)
    first.start(SCHEMAS)
    for window in windows():
        first.apply(window)
    catalog = load(warehouse)
    assert exactly_once_problems(catalog, NAMESPACE, "cf") == []
    forgetful = IcebergApplier(warehouse, "cf", namespace=NAMESPACE, schemas=SCHEMAS)
    forgetful.start(SCHEMAS)
    for target in forgetful.targets.values():
        target.resolved = None  # the bug: what the table holds is not read
    forgetful.apply(windows()[-1])
    problems = exactly_once_problems(catalog, NAMESPACE, "cf")
    with pytest.raises(AssertionError) as failed:
        assert problems == []
    print(f"the check failed as it must: {failed.value}")
    assert problems == [
        "customers: window 30.0000000000 applied twice",
        "customers: window 30.0000000000 after a later one",
        "orders: window 30.0000000000 applied twice",
        "orders: window 30.0000000000 after a later one",
    ]


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    applier_process(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
