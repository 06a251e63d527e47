"""``highwater apply`` on the real chain: source topic -> changefeed -> consumer -> PostgreSQL.

A seeded workload (numbers of every form, text of any characters, nested JSON, deletes, a
column added mid-stream, upstream duplicates, bad records, a lagging partition) flows through
a changefeed (``highwater run``, at least once: a kill replays rows) into the output topics;
``highwater apply`` (a process of its own, SIGKILLed at random moments and started again)
applies its windows to a real PostgreSQL. All along, a reader takes snapshots of the target
(the stored R and the table, in one transaction): at every stored R the table must equal the
source's state at R, value for value. The broker itself (one of its own, not the suite's) is
SIGKILLed and started again under the applier between the changefeed's runs; the applier goes
on storing newer R after it. After the drain, the applier runs to the final marker and the
table equals the source's final state.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pipeline.config import load_config
from pipeline.dev.broker import EmbeddedKafka, lone_node
from pipeline.dev.postgres import PostgresInfo
from pipeline.dev.service import free_ports, kill
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from tests.integration.test_chaos import config_for
from tests.support.changefeed import run_to_end
from tests.support.process import ROOT, run_killed_at, write_config
from tests.support.producer import SteadyProducer
from tests.support.workload import Workload, live_at

PARTITIONS = 3
SEED = int(os.environ.get("HIGHWATER_APPLY_SEED", "11"))
KILLS = int(os.environ.get("HIGHWATER_APPLY_KILLS", "1"))  # of the changefeed
TABLE = """
CREATE TABLE {name} (
    region text, id bigint, amount numeric, note text, meta json, maybe text, extra numeric,
    PRIMARY KEY (region, id)
)
"""


def expected_row(after: str) -> tuple[Any, ...]:
    """What the table must hold of an ``after`` text: numbers by value, JSON by its text."""
    values = json.loads(after, parse_float=Decimal, parse_int=Decimal)
    meta = re.search(r'"meta":(\{"tags".*?\]\]\}\})', after)
    assert meta is not None
    extra = values.get("extra")
    return (values["amount"], values["note"], meta.group(1), values["maybe"], extra)


def snapshot(dsn: str, changefeed: str, table: str) -> tuple[Hlc | None, dict[Any, Any]]:
    """The stored R and the table, read in one transaction."""
    with psycopg.connect(dsn) as connection:
        connection.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        if connection.execute("SELECT to_regclass('highwater_applied')").fetchone() == (None,):
            return None, {}  # before the applier's first start
        found = connection.execute(
            "SELECT resolved FROM highwater_applied WHERE changefeed = %s", (changefeed,)
        ).fetchone()
        rows = connection.execute(
            f"SELECT region, id, amount, note, meta::text, maybe, extra FROM {table}"
        ).fetchall()
    resolved = None if found is None else Hlc.parse(found[0])
    return resolved, {(r[0], r[1]): tuple(r[2:]) for r in rows}


def differences(workload: Workload, resolved: Hlc, table: dict[Any, Any]) -> list[str]:
    """How the table differs from the source at ``resolved`` (empty: equal)."""
    want = {
        key: expected_row(after) for key, after in live_at(workload.changes, resolved.wall).items()
    }
    out = [f"missing {k}" for k in want.keys() - table.keys()]
    out += [f"not deleted {k}" for k in table.keys() - want.keys()]
    out += [
        f"{k}: {table[k]} != {want[k]}" for k in want.keys() & table.keys() if table[k] != want[k]
    ]
    return out


class Applier:
    """``highwater apply`` as a process, SIGKILLed at random moments until told to finish."""

    def __init__(self, args: list[str], log: Path, rnd: random.Random) -> None:
        self.args, self.log, self.rnd = args, log, rnd
        self.kills = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Applier:
        self.thread.start()
        return self

    def process(self, *more: str) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "highwater_consumer", "-v", "apply", *self.args, *more],
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _run(self) -> None:
        while not self.stop.is_set():
            process = self.process()
            try:
                process.wait(self.rnd.uniform(2.0, 6.0))
                time.sleep(0.5)  # it failed: before the changefeed's first run, no status yet
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGKILL)
                process.wait()
                self.kills += 1

    def finish(self, until: Hlc) -> None:
        """Stop killing; one last run to the window at ``until``."""
        self.stop.set()
        self.thread.join(30)
        done = self.process("--until", str(until)).wait(180)
        assert done == 0, self.log.read_text(errors="replace")[-3000:]


class Checker:
    """Snapshots of the target while it is being applied: each one equal to the source at R."""

    def __init__(self, dsn: str, changefeed: str, table: str, workload: Workload) -> None:
        self.dsn, self.changefeed, self.table, self.workload = dsn, changefeed, table, workload
        self.checked: set[Hlc] = set()
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Checker:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(0.3):
            resolved, table = snapshot(self.dsn, self.changefeed, self.table)
            if resolved is None or resolved in self.checked:
                continue
            wrong = differences(self.workload, resolved, table)
            if wrong:
                self.failures.append(f"at R {resolved}: {wrong[:5]}")
            self.checked.add(resolved)

    def newer_than(self, resolved: Hlc | None, timeout: float) -> Hlc:
        """Wait for a stored R above ``resolved``; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            newer = [r for r in set(self.checked) if resolved is None or r > resolved]
            if newer:
                return max(newer)
            time.sleep(0.3)
        raise AssertionError(f"no stored R above {resolved} in {timeout} s")

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedKafka]:
    """A broker of the test's own, on ports it keeps across a restart."""
    broker = EmbeddedKafka(tmp_path / "kafka", node=lone_node(*free_ports(2)))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_applied_tables_equal_the_source_at_every_stored_r_across_kills(
    own_broker: EmbeddedKafka,
    unique_name: Any,
    tmp_path: Path,
    postgres: PostgresInfo,
    spark: Any,
) -> None:
    kafka_bootstrap = own_broker.start().bootstrap_servers  # running: its info
    rnd = random.Random(SEED)
    source, changefeed_id = unique_name("src"), unique_name("cf")
    table = "orders_applied"
    with psycopg.connect(postgres.dsn, autocommit=True) as connection:
        connection.execute(TABLE.format(name=table))
    workload = Workload(partitions=PARTITIONS, seed=SEED)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: PARTITIONS})
    # at least once: the run after the kill writes again what it wrote since its checkpoint
    raw = {**config_for(kafka_bootstrap, changefeed_id, source), "delivery": "at_least_once"}
    config = write_config(tmp_path / "cf.yaml", raw)
    producer = SteadyProducer(kafka_bootstrap, source, workload).start()
    args = [changefeed_id, "--bootstrap-servers", kafka_bootstrap, "--dsn", postgres.dsn]
    applier = Applier([*args, "--table", f"t={table}"], tmp_path / "apply.log", rnd)
    checker = Checker(postgres.dsn, changefeed_id, table, workload)
    applier.start()
    checker.start()
    try:
        for _ in range(KILLS):  # the changefeed SIGKILLed at a random point of its work
            crash = (
                f"{rnd.choice(['during_write', 'after_write', 'after_marker'])}:{rnd.randint(3, 6)}"
            )
            run_killed_at(config, tmp_path / "runs.log", crash, timeout=240)
        producer.stop()
        # the broker SIGKILLed under the applier, and started again on its ports
        before = checker.newer_than(None, 60)
        info = own_broker.status()
        assert info is not None
        kill([info.pid])
        time.sleep(3)
        own_broker.start()
        producer.finish()
        drain = {**raw, "spark": {"trigger": {"available_now": True}}}
        run_to_end(load_config(write_config(tmp_path / "drain.yaml", drain)), spark)
        after = checker.newer_than(before, 120)  # the applier went on after the restart
        final = Hlc(max(c.wall for c in workload.changes) + 1_000)  # the final markers' time
        applier.finish(final)
    finally:
        producer.stop()
        checker.finish()
        applier.stop.set()
    resolved, rows = snapshot(postgres.dsn, changefeed_id, table)
    assert resolved is not None
    assert resolved >= final
    assert differences(workload, resolved, rows) == []
    assert len(rows) > 100, "a table of the workload's live keys"
    assert checker.failures == []
    print(
        f"apply: {len(workload.changes)} changes, {len(rows)} rows, {KILLS} changefeed kills, "
        f"{applier.kills} applier kills, a broker restart (stored R {before} before it, "
        f"{after} after), {len(checker.checked)} stored R checked"
    )
    assert applier.kills >= 1, "the applier was killed while applying"
    # Several stored R compared: one before the broker's restart, one after, the final one at
    # least. How many more depends on the markers the killed runs sent before their kills
    # (random crash points): 4 in one loaded run of session 38, 5 or more before; the checker
    # sees each R the applier stores (it looks every 0.3 s, windows are seconds apart).
    assert len(checker.checked) >= 3, "snapshots taken at several stored R"


def test_two_appliers_of_one_changefeed_never_take_the_table_back_to_an_older_r(
    postgres: PostgresInfo,
) -> None:
    """Two ``highwater apply`` of one changefeed (a restart overlapping a run still going).

    Each window is applied once, in R order; one at or below the R stored is skipped; while
    one applier's window is open, the other's waits.
    """
    from highwater_consumer.decoding import JsonDecoder  # noqa: PLC0415
    from highwater_consumer.postgres import PostgresApplier  # noqa: PLC0415
    from highwater_consumer.windows import Row, Window  # noqa: PLC0415

    with psycopg.connect(postgres.dsn, autocommit=True) as connection:
        connection.execute(TABLE.format(name="twice"))

    def window(time: int, note: str) -> Window:
        value = json.dumps({"after": {"note": note}, "updated": f"{time}.0000000000"}).encode()
        row = Row.of(Hlc(time), "twice", b'["eu",1]', value, ("out", 0), time, JsonDecoder().change)
        return Window(Hlc(time), (row,))

    first, second = PostgresApplier(postgres.dsn, "two"), PostgresApplier(postgres.dsn, "two")
    try:
        assert first.start() is None
        assert second.start() is None
        assert first.apply(window(5, "at 5"))
        assert second.apply(window(7, "at 7"))
        assert not first.apply(window(6, "at 6")), "6 is below the 7 stored: skipped"
        assert not first.apply(window(7, "at 7 again"))
        assert first.apply(window(8, "at 8"))
        nine = window(9, "at 9")
        assert first.apply(Window(nine.resolved, nine.rows, last=False)), "open, not committed"
        waiting = threading.Thread(target=second.apply, args=(window(10, "at 10"),))
        waiting.start()
        waiting.join(1.0)
        assert waiting.is_alive(), "the second applier waits for the first's window"
        assert first.apply(Window(nine.resolved, (), last=True))
        waiting.join(30)
        assert not waiting.is_alive()
    finally:
        first.close()
        second.close()
    with psycopg.connect(postgres.dsn) as connection:
        stored = connection.execute(
            "SELECT resolved FROM highwater_applied WHERE changefeed = 'two'"
        ).fetchone()
        rows = connection.execute("SELECT region, id, note FROM twice").fetchall()
    assert stored == ("10.0000000000",)
    assert rows == [("eu", 1, "at 10")]
