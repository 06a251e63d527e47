"""Columnar windows (Arrow tables) equal the per-row windows, on a real broker.

An output written as a changefeed writes it (wrapped JSON envelopes, markers on every
partition, in Kafka transactions) with what real outputs carry besides: aborted transactions
(read_committed hides them), several topics and partitions, replays below the last marker and
duplicates above it, rows out of time order in a partition, deletes, records the C scan is
not sure of (HLC forms, escapes, whitespace: the Python decoder reads them) and bad records.
``ChangefeedConsumer(..., columnar=True).arrow_windows()`` must hand over the same windows as
``windows()`` (rows, order, R, pieces), the same bad records, and resume the same after a
restart, by the C reader and by the confluent-kafka one. The negative control reads at
read_uncommitted: the aborted rows appear and the check fails.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from confluent_kafka import Producer

from highwater_consumer import ChangefeedConsumer, Output, Window, staging_arrow
from highwater_consumer.columnar import NATIVE, SKIP, reader, settle
from highwater_consumer.postgres import PostgresApplier, apply
from pipeline.dev.postgres import PostgresInfo
from schemas.hlc import Hlc
from sinks.admin import ensure_topics

pytestmark = pytest.mark.integration

WALL = 1_700_000_000_000_000_000
PARTITIONS = 3
TABLES = {"orders": "orders", "items": "items"}
READERS = [
    pytest.param(True, id="native", marks=pytest.mark.skipif(NATIVE is None, reason="not built")),
    pytest.param(False, id="confluent-kafka"),
]


def envelope(time: str, after: str | None, before: str = "null") -> bytes:
    return f'{{"after":{after or "null"},"before":{before},"updated":"{time}"}}'.encode()


class Writer:
    """The output, written a step at a time: rows, an aborted transaction, then markers."""

    def __init__(self, bootstrap: str, topics: dict[str, str]) -> None:
        ensure_topics({"bootstrap.servers": bootstrap}, dict.fromkeys(topics, PARTITIONS))
        self.topics = topics
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"out-{uuid.uuid4().hex}"}
        )
        self.producer.init_transactions(30)
        self.markers: list[Hlc] = []
        self.aborted: set[bytes] = set()

    def step(self) -> Hlc:
        """One step's records; its marker."""
        producer, step = self.producer, len(self.markers)
        producer.begin_transaction()
        top = WALL + (step + 1) * 1000
        first = min(self.topics)
        for topic in self.topics:
            for i in range(40):
                time = top - (i * 7) % 40  # out of time order within a partition
                key = f'["eu-{i % 3}",{i % 7}]'.encode()  # each key about twice a step
                after = None if i % 11 == 0 else f'{{"note":"s{step} é\\t{i}","amount":{i}.5}}'
                forms = [f"{time}.0000000000", f"{time}.{i % 3}", str(time)]  # the last: Python's
                value = envelope(forms[i % 3] if i % 5 else f"{time}.0000000000", after)
                if i % 13 == 0 and step == 1 and topic == first:  # the scan leaves them to Python
                    key = b' [ "eu-0" , ' + str(i % 7).encode() + b" ] "
                    value = envelope(f"{time}.0000000000", '{"n\\u006fte":"x","amount":1}')
                producer.produce(topic, key=key, value=value, partition=i % PARTITIONS)
                if i % 9 == 0:  # a duplicate above the marker
                    producer.produce(topic, key=key, value=value, partition=i % PARTITIONS)
            if step >= 2:  # a replay below the last marker (the key has newer versions)
                old = f'["eu-1",{step}]'.encode()
                replay = envelope(f"{WALL + 500}.0000000000", '{"note":"old"}')
                producer.produce(topic, key=old, value=replay, partition=step % PARTITIONS)
            if step == 3:  # bad records
                producer.produce(topic, key=b'["x",1]', value=b"not json", partition=0)
                producer.produce(topic, key=b'["x",2]', value=b'{"after":{}}', partition=1)
                producer.produce(topic, key=b"[1]", value=b'{"after":{"a":NaN},"u', partition=2)
        producer.commit_transaction(30)
        producer.begin_transaction()  # aborted: never seen at read_committed
        for topic in self.topics:
            for i in range(10):
                key = f'["aborted",{step * 10 + i}]'.encode()
                self.aborted.add(key)
                value = envelope(f"{top - 5}.0000000000", '{"note":"aborted"}')
                producer.produce(topic, key=key, value=value, partition=i % PARTITIONS)
        producer.flush(30)
        producer.abort_transaction(30)
        producer.begin_transaction()
        for topic in self.topics:
            for p in range(PARTITIONS):
                marker = f'{{"resolved":"{top}.0000000000"}}'.encode()
                producer.produce(topic, value=marker, partition=p)
        producer.commit_transaction(30)
        self.markers.append(Hlc(top))
        return Hlc(top)


def plain(window: Window) -> tuple[str, bool, list[tuple[Any, ...]]]:
    return (
        str(window.resolved),
        window.last,
        [(r[0], r.table, r.key, r.value, r.partition, r.offset) for r in window.rows],
    )


class Reading:
    """A consumer read in step with the writer: its windows (plain), bad records, ArrowWindows."""

    def __init__(self, output: Output, group: str, *, columnar: bool, **options: Any) -> None:
        self.bad: list[str] = []
        self.consumer = ChangefeedConsumer(
            output, group, on_bad=lambda b: self.bad.append(str(b)), columnar=columnar, **options
        )
        self.columnar = columnar
        if columnar:  # which reader is in use, as asked
            session = self.consumer.open()._session().columnar
            assert session is not None
            assert session.native is (options.get("native") is not False and NATIVE is not None)
        self.found = (self.consumer.arrow_windows if columnar else self.consumer.windows)()
        self.windows: list[Any] = []
        self.arrow: list[Any] = []

    def upto(self, resolved: Hlc) -> None:
        """Windows until the one at ``resolved`` (the writer's last marker), each acked."""
        while True:
            window = next(self.found)
            self.windows.append(plain(window.to_window() if self.columnar else window))
            if self.columnar:
                self.arrow.append(window)
            self.consumer.ack(window)
            if window.last and window.resolved >= resolved:
                return

    def close(self) -> None:
        self.found.close()
        self.consumer.close()


@pytest.mark.parametrize("native", READERS)
def test_columnar_windows_equal_the_per_row_windows_and_resume_alike(
    kafka_bootstrap: str, native: bool
) -> None:
    suffix = uuid.uuid4().hex[:8]
    out = Output(kafka_bootstrap, {f"columnar-{t}-{suffix}": t for t in TABLES})
    writer = Writer(kafka_bootstrap, dict(out.topics))
    careless = Output(out.bootstrap, out.topics, kafka={"isolation.level": "read_uncommitted"})
    group = {"rows": f"r-{suffix}", "columns": f"c-{suffix}"}
    readings = {
        "rows": Reading(out, group["rows"], columnar=False),
        "columns": Reading(out, group["columns"], columnar=True, native=native),
        "rows in pieces": Reading(out, f"rp-{suffix}", columnar=False, piece=7, hold=5),
        "columns in pieces": Reading(
            out, f"cp-{suffix}", columnar=True, native=native, piece=7, hold=5
        ),
        "uncommitted": Reading(
            careless, f"u-{suffix}", columnar=True, native=native, piece=7, hold=5
        ),
    }
    try:
        for step in range(6):
            marker = writer.step()
            if step == 3:  # restarts: from the offsets and R committed, and from `after`
                for name, columnar in (("rows", False), ("columns", True)):
                    readings[name].close()
                    options = {"native": native} if columnar else {}
                    readings[name] = Reading(out, group[name], columnar=columnar, **options)
                    readings[f"{name} after"] = Reading(
                        out,
                        f"a{name}-{suffix}",
                        columnar=columnar,
                        after=writer.markers[2],
                        **options,
                    )
            for reading in readings.values():
                reading.upto(marker)
        assert readings["columns"].windows == readings["rows"].windows
        assert readings["columns after"].windows == readings["rows after"].windows
        assert readings["columns in pieces"].windows == readings["rows in pieces"].windows
        assert [w[0] for w in readings["rows after"].windows] == [
            str(m) for m in writer.markers[3:]
        ]
        for name in ("columns", "columns in pieces"):
            assert sorted(readings[name].bad) == sorted(readings[f"rows{name[7:]}"].bad)
        assert len(readings["rows in pieces"].bad) == 2 * 3
        pieces = readings["rows in pieces"].windows
        assert max(len(w[2]) for w in pieces) == 7
        assert len(pieces) > len(readings["rows"].windows)
        handed = [row for window in readings["rows in pieces"].windows for row in window[2]]
        assert len(handed) > 400
        assert not {row[2] for row in handed} & writer.aborted
        # the negative control: read_uncommitted shows the aborted rows, and the check fails
        careless_rows = readings["uncommitted"].windows
        assert careless_rows != readings["rows in pieces"].windows
        assert {row[2] for window in careless_rows for row in window[2]} & writer.aborted
    finally:
        for reading in readings.values():
            reading.close()


@pytest.mark.skipif(NATIVE is None, reason="the C extension is not built")
def test_keys_and_values_of_any_bytes_come_out_byte_identical(
    kafka_bootstrap: str, unique_name: Any
) -> None:
    topic = unique_name("bytes")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {topic: 1})
    big = bytes(range(256)) * 3900  # 998,400 bytes, every byte value
    records = [
        (b"\x00nul\x00", b"\x00\x01\x02"),
        (b"\xff\xfe invalid utf-8 \xc3\x28", b"\xed\xa0\x80 a surrogate \xf8"),
        (b"", b""),
        (None, b"a null key"),
        (b"a null value", None),
        (b'["k",1]', envelope("5.0000000001", '{"v":"\\u0000 é"}')),
        (big[:1000], big),
        (b'["big",1]', envelope("5.0000000002", '{"v":"' + "x" * 990_000 + '"}')),
    ]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2_000_000})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
        producer.flush(30)
    settings = {"bootstrap.servers": kafka_bootstrap, "group.id": f"b-{uuid.uuid4()}"}
    source = reader(settings, [(topic, 0)], [0], native=True)
    keys: list[Any] = []
    values: list[Any] = []
    kinds: list[int] = []

    def refuse(key: Any, value: Any) -> Any:
        raise ValueError("read by the scan only")

    try:
        for _ in range(60):
            batch, _bad = settle(source.read(100, 1.0), refuse)
            keys += batch.key.to_pylist()
            values += batch.value.to_pylist()
            kinds += batch.kind.to_pylist()
            if len(keys) >= len(records):
                break
    finally:
        source.close()
    assert list(zip(keys, values, strict=True)) == records
    assert kinds == [SKIP] * 5 + [0, SKIP, 0]  # the envelopes are rows, the rest refused


# --- the PostgreSQL applier: the same target rows from columnar windows ---

TARGET = (
    "CREATE TABLE {name} (region text, id bigint, note text, amount numeric, "
    "PRIMARY KEY (region, id))"
)


def target(dsn: str, names: dict[str, str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        for name in names.values():
            connection.execute(f"DROP TABLE IF EXISTS {name}")
            connection.execute(TARGET.format(name=name))


def stored(dsn: str, names: dict[str, str], changefeed: str) -> tuple[Any, ...]:
    """The stored R and each table's rows (numbers as their text)."""
    with psycopg.connect(dsn) as connection:
        tables = {
            table: sorted(connection.execute(f"SELECT region, id, note, amount::text FROM {name}"))
            for table, name in names.items()
        }
        found = connection.execute(
            "SELECT resolved FROM highwater_applied WHERE changefeed = %s", (changefeed,)
        ).fetchone()
    return found, tables


@pytest.mark.parametrize("native", READERS)
def test_the_applier_writes_the_same_rows_from_columnar_windows(
    kafka_bootstrap: str, postgres: PostgresInfo, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    staged: list[int] = []
    made = staging_arrow.stage_columns

    def counted(table: Any, rows: Any) -> Any:
        staged.append(rows.num_rows)
        return made(table, rows)

    monkeypatch.setattr(staging_arrow, "stage_columns", counted)
    suffix = uuid.uuid4().hex[:8]
    out = Output(kafka_bootstrap, {f"apply-{t}-{suffix}": t for t in TABLES})
    writer = Writer(kafka_bootstrap, dict(out.topics))
    reading = Reading(out, f"w-{suffix}", columnar=True, native=native, piece=50)
    try:
        for _ in range(6):
            reading.upto(writer.step())
    finally:
        reading.close()
    # the same windows, applied as Arrow tables and as rows
    found = {}
    for how in ("arrow", "rows"):
        names = {table: f"{table}_{how}_{int(native)}" for table in TABLES}
        target(postgres.dsn, names)
        applier = PostgresApplier(postgres.dsn, f"same-{how}-{native}", names)
        applier.start()
        for window in reading.arrow:
            applier.apply(window if how == "arrow" else window.to_window())
        applier.close()
        found[how] = (*stored(postgres.dsn, names, f"same-{how}-{native}"), applier.applied)
    assert found["arrow"] == found["rows"]
    assert reading.consumer.native is native
    assert len(staged) > 6  # by Arrow's kernels (a table with whitespace keys: as rows)
    assert found["arrow"][0] == (str(writer.markers[-1]),)
    assert all(len(rows) > 10 for rows in found["arrow"][1].values())
    # and `highwater apply`'s loop (pipelined) from both consumers: the same tables at the end
    ends = {}
    for columnar in (False, True):
        names = {table: f"{table}_loop_{int(columnar)}_{int(native)}" for table in TABLES}
        target(postgres.dsn, names)
        changefeed = f"loop-{columnar}-{native}"
        applier = PostgresApplier(postgres.dsn, changefeed, names)
        applier.start()
        options = {"native": native} if columnar else {}
        consumer = ChangefeedConsumer(
            out, f"a-{uuid.uuid4()}", on_bad=lambda b: None, columnar=columnar, **options
        )
        with consumer:
            apply(consumer, applier, until=writer.markers[-1])
        applier.close()
        ends[columnar] = stored(postgres.dsn, names, changefeed)
    assert ends[True] == ends[False]
    assert ends[True][1] == found["arrow"][1]
