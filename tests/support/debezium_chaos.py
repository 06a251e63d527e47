"""A real database → Debezium capture under kills, and what its changefeed's output must show.

Shared by the restart tests of each upstream (``tests/integration/test_debezium_restarts.py``
for PostgreSQL, ``test_mariadb.py``). :func:`run` writes an upstream's transactions while Kafka
Connect is SIGKILLed: first inside its initial snapshot (at the snapshot's first record on
Kafka; started again, it has no flushed offsets and snapshots again), then at random moments
(it resumes from its last flushed offsets, inside a transaction most of the time, and sends
again what followed them); the changefeed (``highwater run``) is SIGKILLed while writing a
batch and after a few markers; a drain ends it. :func:`check` then reads the output topics
as a ``read_committed`` consumer does, independently of Highwater:

* per key, the versions emitted are exactly the distinct changes Debezium wrote for it, in
  the order it wrote them, each once: a re-sent change is never news. A change is known by
  its place in the source (an LSN, a binlog position); a snapshot's read by its snapshot
  (the snapshot's place and time), so a snapshot done again after a kill reads each row
  again as a new version (timed just above what its partition had passed), with the row's
  content as of then (docs/reference/debezium.md says why: Debezium gives those reads a
  new place, and a read's time is not Debezium's);
* under ``delivery: exactly_once`` every ``(key, updated)`` once, counted;
* their times (``updated``) rise with them; after a marker no new row at or below it;
* the tables rebuilt from the output equal the final ``SELECT``, value for value;
* markers on every output partition, the last at or above the last transaction's commit;
* the kills hurt: Debezium did snapshot again after the first kill (which landed before the
  first snapshot's last read), sent changes again, and a transaction's BEGIN again, and the
  changefeed dropped changes as re-sent.

:func:`negative_controls` shows the check can fail: on the run's own output with a row sent
twice, a version lost, a marker sent ahead of a row, it must.

The seed (``tests/support/seeds.py``) is the suite's own in ``make test`` and new in the soak;
it is printed with the result.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from pipeline.config import parse_config
from pipeline.core.sources.debezium import transaction_key
from pipeline.dev.connect import Database, EmbeddedConnect
from tests.support.changefeed import over_capture, run_to_end
from tests.support.kafka import Message, consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.seeds import suite_seed
from tests.support.validator import exact, hlc_order, order_and_resolved

SEED = suite_seed()
CONNECT_KILLS = int(os.environ.get("HIGHWATER_CONNECT_KILLS", "3"))  # make soak: 10
# make test kills the changefeed once (mid-batch, or after markers, as the seed picks); the soak
# both times
SOAK = "HIGHWATER_CONNECT_KILLS" in os.environ
DELIVERY = os.environ.get("HIGHWATER_SOAK_DELIVERY", "exactly_once")  # as the chaos soak's
TRANSACTIONS = 50 * CONNECT_KILLS  # written over about 20 s a kill


class Server(Protocol):
    """An embedded database: started, stopped, SQL run in it."""

    def start(self) -> Database: ...

    def stop(self) -> bool: ...

    def sql(self, statements: str) -> str: ...


@dataclass(frozen=True)
class Upstream:
    """What one database brings to the run, and how its output reads back.

    ``tables``: the captured ``schema.table`` names, the first the one ``last`` writes to (a
    row with the text ``the last transaction``); ``transaction(i, rng)``: the SQL of
    transaction ``i``; ``selects``: per table (its short name) the final ``SELECT`` and its
    columns; ``watched``: per table the column whose versions per key are compared;
    ``place``: a raw change event's ``source`` -> its place in the source's history;
    ``text``: an exactly read output value (None: absent or NULL) as the ``SELECT`` prints
    it, given the column; ``separator``: between a ``SELECT``'s values.
    """

    server: Server
    tables: list[str]
    setup: str
    transaction: Callable[[int, random.Random], str]
    last: str
    selects: dict[str, tuple[str, tuple[str, ...]]]
    watched: dict[str, str]
    place: Callable[[dict[str, Any]], tuple[int, ...]]
    text: Callable[[Any, str], str]
    separator: str
    # the table of thousands of rows (one of ``tables``): its initial snapshot lasts, and the
    # first Connect kill lands at its first read (a small table's can end before the kill does)
    bulk: str
    # the SQL of short transactions another session commits every 0.2 s meanwhile, while
    # the writer's are open (commits interleaved with theirs), if any
    concurrent: Callable[[int], str] | None = None


@dataclass
class Run:
    """What a run left: the raw change and transaction topics, the output, the final state."""

    changefeed_id: str
    delivery: str
    written: dict[str, list[Message]]  # table -> Debezium's change topic
    transactions: list[dict[str, Any]]  # the transaction topic's payloads
    outputs: dict[str, list[Message]]  # table -> the changefeed's output topic
    final: dict[str, str]  # table -> the final SELECT's output
    resent: int  # changes the changefeed dropped as re-sent, over every run of it


class _Chaos:
    """The writer, and the changefeed's runs killed, each in a thread of its own.

    Connect is killed and started again from the test's own thread: its JVM dies with the
    thread that started it (``PR_SET_PDEATHSIG``).
    """

    def __init__(self, upstream: Upstream, rng: random.Random) -> None:
        self.upstream, self.rng = upstream, rng
        self.errors: list[BaseException] = []
        self.logs: list[str] = []

    def write(self, more: Callable[[], bool]) -> None:
        """The transactions, three at a second: at least ``TRANSACTIONS``, and on while ``more``.

        (The changefeed's kills need batches to land in.)
        """
        try:
            first = 0
            while first < TRANSACTIONS or (more() and first < 4 * TRANSACTIONS):
                self.upstream.server.sql(
                    "\n".join(
                        self.upstream.transaction(i, self.rng) for i in range(first, first + 3)
                    )
                )
                first += 3
                time.sleep(1.0)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def interleave(self, more: Callable[[], bool]) -> None:
        """The upstream's concurrent transactions, every 0.2 s while ``more``."""
        concurrent = self.upstream.concurrent
        try:
            n = 0
            while concurrent is not None and more():
                self.upstream.server.sql(concurrent(n))
                n += 1
                time.sleep(0.2)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def kill_changefeed(self, config_file: Path, log_file: Path) -> None:
        """``highwater run`` SIGKILLed while writing a batch, then after a few markers (soak).

        (Markers go on while the writer is done: the heartbeat's transactions.)
        """
        try:
            crashes = [
                f"during_write:{self.rng.randint(2, 4)}",
                f"after_marker:{self.rng.randint(5, 15)}",
            ]
            for crash in crashes if SOAK else [self.rng.choice(crashes)]:
                self.logs.append(run_killed_at(config_file, log_file, crash, 240))
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)


def run(upstream: Upstream, kafka_bootstrap: str, spark: Any, tmp_path: Path) -> Run:
    """The capture, the writer, the kills, the drain (see the module)."""
    rng = random.Random(SEED)
    folder = Path(tempfile.mkdtemp(prefix="highwater-dbz-restarts-"))
    folder.chmod(0o755)  # the database's own user reaches it
    connect = EmbeddedConnect(folder / "connect")
    name = f"dbzr-{uuid.uuid4().hex[:8]}"
    changefeed_id = f"{name}.cf"
    server = upstream.server
    try:
        database = server.start()
        server.sql(upstream.setup)

        def capture() -> Any:
            return connect.capture(
                kafka_bootstrap,
                database,
                upstream.tables,
                topic_prefix=name,
                partitions=2,
                flush_interval_ms=3000,
            )

        assert upstream.bulk in upstream.tables, f"the bulk table {upstream.bulk!r} is not captured"
        watcher = _watch([f"{name}.{upstream.bulk}"], kafka_bootstrap)
        info = capture()
        raw = over_capture(
            kafka_bootstrap,
            changefeed_id,
            info.sources(upstream.tables),
            spark={"trigger": {"processing_time": "1s"}},
            delivery=DELIVERY,
        )
        config_file = write_config(tmp_path / "cf.yaml", raw)
        chaos = _Chaos(upstream, random.Random(rng.random()))
        runs = threading.Thread(
            target=chaos.kill_changefeed, args=(config_file, tmp_path / "run.log")
        )
        writer = threading.Thread(target=chaos.write, args=(runs.is_alive,))
        other = threading.Thread(target=chaos.interleave, args=(writer.is_alive,))
        writer.start()
        other.start()
        _kill_inside_the_snapshot(connect, watcher)  # no offsets flushed yet: it snapshots again
        capture()
        # a run started before Debezium created a table's topic (at its first event) exits
        # 75 on the missing source topic, as it should, and never reaches its crash point: the
        # kill loop took that for a failure (make test, session 42: "topic ... does not exist")
        _wait_for_topics([info.topic(t) for t in upstream.tables], kafka_bootstrap)
        runs.start()
        for _ in range(CONNECT_KILLS):  # Connect SIGKILLed at random moments while writing
            time.sleep(rng.uniform(5, 12))
            connect.kill()  # SIGKILL: what it sent after its last flush is sent again
            capture()
        writer.join(300)
        other.join(60)
        runs.join(600)
        assert not chaos.errors, chaos.errors
        server.sql(upstream.last)
        last_topic = info.topic(upstream.tables[0])
        deadline = time.monotonic() + 120
        while not any(
            b"the last transaction" in (m.value or b"")
            for m in consume_all(kafka_bootstrap, last_topic)
        ):
            assert time.monotonic() < deadline, "Debezium never sent the last transaction"
            time.sleep(1)
        time.sleep(3)  # its END, and a heartbeat's transaction after it
        drain = parse_config({**raw, "spark": {"trigger": {"available_now": True}}}, env={})
        drained = run_to_end(drain, spark)
        final = {table: server.sql(select) for table, (select, _) in upstream.selects.items()}
        written = {
            table.rpartition(".")[2]: consume_all(kafka_bootstrap, info.topic(table))
            for table in upstream.tables
        }
        transactions = [
            json.loads(m.value)["payload"]
            for m in consume_all(kafka_bootstrap, info.transaction_topic)
            if m.value is not None
        ]
    except BaseException:
        print(f"Kafka Connect's log:\n{connect.tail(60)}")
        raise
    finally:
        connect.stop()
        server.stop()
    shutil.rmtree(folder, ignore_errors=True)
    outputs = {t: consume_all(kafka_bootstrap, f"{changefeed_id}.{t}") for t in upstream.selects}
    resent = drained.stats.resent + sum(
        int(n) for log in chaos.logs for n in re.findall(r"(\d+) re-sent dropped", log)
    )
    return Run(changefeed_id, DELIVERY, written, transactions, outputs, final, resent)


def _watch(topics: list[str], bootstrap: str) -> Consumer:
    """A consumer of the change topics, subscribed before Debezium creates them."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"watch-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 100,
        }
    )
    consumer.subscribe(["^(" + "|".join(re.escape(t) for t in topics) + ")$"])
    return consumer


def _wait_for_topics(topics: list[str], bootstrap: str, timeout: float = 180) -> None:
    """Until each of ``topics`` exists (Debezium creates a table's at its first event)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while True:
        found = admin.list_topics(timeout=10).topics
        missing = [t for t in topics if t not in found or found[t].error is not None]
        if not missing:
            return
        assert time.monotonic() < deadline, f"Debezium created no topic for {missing}"
        time.sleep(0.5)


def _kill_inside_the_snapshot(connect: EmbeddedConnect, watcher: Consumer) -> None:
    """SIGKILL Connect as its initial snapshot's first read of the bulk table reaches Kafka.

    (The snapshot of its few thousand rows takes a second or more; :func:`check` shows from
    the topics that the kill landed before its last read. Watching every table, a small one
    snapshotted first could end, its last read on Kafka, before the kill landed: make test
    met that once on PostgreSQL, whose connector snapshots customers before orders.)
    """
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            message = watcher.poll(0.02)
            if message is not None and message.error() is None and message.value() is not None:
                connect.kill()
                return
        raise AssertionError("Debezium's snapshot never reached Kafka")
    finally:
        watcher.close()


def check(upstream: Upstream, result: Run) -> None:
    """What the output must show (see the module)."""
    again = sum(_sent_again(upstream, messages) for messages in result.written.values())
    begins = [transaction_key(e["id"]) for e in result.transactions if e["status"] == "BEGIN"]
    begun_again = len(begins) - len(set(begins))
    snapshots = {table: _snapshots(upstream, m) for table, m in result.written.items()}
    print(
        f"seed {SEED}: Debezium snapshotted {max(len(s) for s in snapshots.values())} times "
        f"(the first unfinished in {[t for t, s in snapshots.items() if not s[0][1]]}), sent "
        f"{again} changes again, {begun_again} BEGINs again; the changefeed "
        f"({result.delivery}) dropped {result.resent} re-sent"
    )
    assert any(len(s) > 1 and not s[0][1] for s in snapshots.values()), (
        f"seed {SEED}: the first Connect kill did not land inside the initial snapshot "
        f"(per table, each snapshot's id and whether it reached its last read): {snapshots}"
    )
    assert again > 0, f"seed {SEED}: no Connect kill made Debezium send a change again"
    assert begun_again > 0, f"seed {SEED}: no Connect kill made Debezium begin one again"

    # the last transaction of the followed tables (the heartbeat's go on after the drain)
    ours = [
        e
        for e in result.transactions
        if e["status"] == "END"
        and any(d["data_collection"] in upstream.tables for d in e["data_collections"])
    ]
    last_commit = max(e["ts_ms"] for e in ours) * 1_000_000
    for table, (_, columns) in upstream.selects.items():
        column = upstream.watched[table]
        output = result.outputs[table]
        rows = [m for m in output if m.key is not None]
        # per key, the versions emitted are Debezium's distinct changes in its order, once
        first: dict[str, list[tuple[tuple[int, int], Any]]] = {}  # key: [(time, after)]
        shown: set[tuple[bytes, str]] = set()
        twice: list[tuple[bytes, str]] = []
        for m in rows:
            body = exact(m.value)
            if (m.key, body["updated"]) in shown:
                twice.append((m.key, body["updated"]))
                continue  # a replay of the changefeed's own (at least once)
            shown.add((m.key, body["updated"]))
            first.setdefault(m.key.decode(), []).append((hlc_order(body["updated"]), body["after"]))
        if result.delivery == "exactly_once":  # a read_committed reader sees each once
            assert not twice, f"seed {SEED}: {table}: {len(twice)} rows twice: {twice[:5]}"
        want = _versions(upstream, result.written[table], column)
        got = {
            k: [None if a is None else upstream.text(a.get(column), column) for _, a in vs]
            for k, vs in first.items()
        }
        differ = {
            k: (got.get(k), want.get(k))
            for k in got.keys() | want.keys()
            if got.get(k) != want.get(k)
        }
        assert not differ, (
            f"seed {SEED}: {table}: key -> (emitted, Debezium's): {str(differ)[:2000]}\n"
            + _story(upstream, result.written[table], rows, sorted(differ)[:2], column)
        )
        # per key the first emissions rise in time; after a marker no new row at or below it
        violations = order_and_resolved(output)
        assert violations == {}, f"seed {SEED}: {table}: violations {str(violations)[:3000]}"
        markers = [m for m in output if m.key is None]
        assert {m.partition for m in markers} == {0, 1, 2}, table
        top = max(hlc_order(json.loads(m.value)["resolved"]) for m in markers)
        assert top[0] >= last_commit, f"{table}: the last marker {top} below the last commit"
        # the table the output rebuilds is the final SELECT, value for value, but for the rows
        # deleted while Debezium snapshotted again (docs/reference/debezium.md, "Connector
        # restarts": the new snapshot does not have them and Debezium sends no delete: their
        # last version stays)
        vanished = _vanished(upstream, result.written[table])
        rebuilt = {
            k: upstream.separator.join(upstream.text(vs[-1][1].get(c), c) for c in columns)
            for k, vs in first.items()
            if vs[-1][1] is not None
        }
        kept = sorted(row for k, row in rebuilt.items() if k not in vanished)
        final = sorted(result.final[table].splitlines())
        extra, missing = sorted(set(kept) - set(final)), sorted(set(final) - set(kept))
        keys = sorted(k for k, row in rebuilt.items() if row in extra)
        assert kept == final, (
            f"seed {SEED}: {table}: rebuilt, not in the final SELECT: {extra[:5]}; in the final "
            f"SELECT, not rebuilt: {missing[:5]} ({len(vanished)} rows deleted while Debezium "
            "snapshotted again left out)\n"
            + _story(upstream, result.written[table], rows, keys[:2], column)
        )
    assert result.resent > 0, "the changefeed dropped no change as re-sent"


def negative_controls(upstream: Upstream, result: Run) -> None:
    """:func:`check` fails on the run's own output broken three ways (it passed as it was).

    A row a read_committed reader sees twice (exactly once only: at least once allows it), a
    version lost, and a marker sent ahead of a row it covers.
    """
    table = max(result.outputs, key=lambda t: len(result.outputs[t]))
    output = result.outputs[table]
    at = max(i for i, m in enumerate(output) if m.key is not None)  # the table's last row
    row = output[at]
    updated = json.loads(row.value or b"{}")["updated"]
    broken = {
        "twice": [*output[: at + 1], row, *output[at + 1 :]],
        "key -> \\(emitted, Debezium's\\)": [
            m
            for m in output
            if m.key != row.key or json.loads(m.value or b"{}")["updated"] != updated
        ],
        "violations": [
            *output[:at],
            replace(row, key=None, value=json.dumps({"resolved": updated}).encode()),
            *output[at:],
        ],
    }
    if result.delivery != "exactly_once":
        del broken["twice"]
    for says, rows in broken.items():
        with pytest.raises(AssertionError, match=says):
            check(upstream, replace(result, outputs={**result.outputs, table: rows}))


def _identity(upstream: Upstream, payload: dict[str, Any]) -> tuple[Any, ...]:
    """What a raw event is: a change by its place, a snapshot's read by its snapshot."""
    source = payload["source"]
    if payload["op"] == "r":
        return ("read", upstream.place(source), source["ts_ms"])
    return ("change", upstream.place(source))


def _snapshots(upstream: Upstream, messages: list[Message]) -> list[tuple[Any, bool]]:
    """A table's snapshots in the order Debezium began them, and whether each was finished."""
    done: dict[Any, bool] = {}
    for m in messages:
        if m.value is not None:
            payload = json.loads(m.value)["payload"]
            if payload["op"] == "r":
                snapshot = _identity(upstream, payload)[1:]
                last = payload["source"].get("snapshot") in ("last", "last_in_data_collection")
                done[snapshot] = done.get(snapshot, False) or last
    return sorted(done.items(), key=lambda kv: kv[0][1])  # by the snapshot's time


def _vanished(upstream: Upstream, messages: list[Message]) -> set[str]:
    """Keys whose last event is a read of a snapshot older than the table's last one.

    Deleted while the connector was down between two snapshots: the later one does not read
    them, and Debezium sends no delete (docs/reference/debezium.md, "Connector restarts").
    """
    last: dict[str, tuple[Any, ...]] = {}
    for m in messages:
        if m.value is not None:
            key = json.dumps(list(json.loads(m.key)["payload"].values()))
            last[key] = _identity(upstream, json.loads(m.value)["payload"])
    snapshots = [snapshot for snapshot, _ in _snapshots(upstream, messages)]
    if len(snapshots) < 2:
        return set()
    newest = ("read", *snapshots[-1])
    return {k for k, identity in last.items() if identity[0] == "read" and identity != newest}


def _versions(upstream: Upstream, messages: list[Message], column: str) -> dict[str, list[Any]]:
    """Per key, Debezium's distinct changes in the order it wrote them: the column's text.

    (None: deleted.) Read from the raw JSON, not with Highwater's adapter: each change once
    by its :func:`_identity`, a key's events in their partition's order.
    """
    seen: set[tuple[str, tuple[Any, ...]]] = set()
    out: dict[str, list[Any]] = {}
    for m in messages:
        if m.value is None:
            continue  # a tombstone
        payload = json.loads(m.value)["payload"]
        key = json.dumps(list(json.loads(m.key)["payload"].values()))
        identity = (key, _identity(upstream, payload))
        if identity in seen:
            continue  # sent again
        seen.add(identity)
        after = payload["after"]
        out.setdefault(key, []).append(
            None if after is None else upstream.text(after.get(column), column)
        )
    return out


def _story(
    upstream: Upstream, events: list[Message], rows: list[Message], keys: list[str], column: str
) -> str:
    """What Debezium wrote for ``keys`` and what the changefeed emitted for them, in order."""
    lines = []
    for key in keys:
        lines.append(f"key {key}: Debezium's events (partition@offset op snapshot place value):")
        for m in events:
            if m.value is None or json.dumps(list(json.loads(m.key)["payload"].values())) != key:
                continue
            payload = json.loads(m.value)["payload"]
            source = payload["source"]
            after = payload["after"]
            value = None if after is None else upstream.text(after.get(column), column)
            place = _identity(upstream, payload)
            lines.append(
                f"  {m.partition}@{m.offset} {payload['op']} {source.get('snapshot')} {place} "
                f"ts_ms={source.get('ts_ms')} {value!r}"
            )
        lines.append("  emitted (partition@offset updated value):")
        for m in rows:
            if m.key.decode() == key:
                body = exact(m.value)
                after = body["after"]
                value = None if after is None else upstream.text(after.get(column), column)
                lines.append(f"  {m.partition}@{m.offset} {body['updated']} {value!r}")
    return "\n".join(lines)[:6000]


def _sent_again(upstream: Upstream, messages: list[Message]) -> int:
    """Changes Debezium wrote more than once (the same place of the same key)."""
    seen: set[tuple[bytes, tuple[int, ...]]] = set()
    again = 0
    for m in messages:
        if m.value is None:
            continue
        payload = json.loads(m.value)["payload"]
        if payload["op"] == "r":
            continue
        place = (m.key, upstream.place(payload["source"]))
        again += place in seen
        seen.add(place)
    return again
