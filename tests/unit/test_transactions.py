"""Debezium's resolved times (``TransactionLog``) against the marker promise, over simulated feeds.

A simulated PostgreSQL commits transactions over two tables in commit-time order; Debezium
writes each change to its table's topic partition (by key) and an END per transaction to the
transaction topic, after a snapshot of rows with no transaction. The driver reads in any
interleaving: partitions at their own pace (one may be held back for long), END events
before or after the changes they count, batches reported as the executors report them (rows
at or below the partition's floor dropped, not counted), and crashes that resume from
:meth:`TransactionLog.record` with the data offsets a checkpoint kept, or without them (the
budget fallback: data read again from the start). Checked at every step:

* no unread change has a time at or below the resolved time (the marker promise);
* the resolved time never goes backwards;
* once everything is read, the resolved time is the last transaction's last change.

Then a connector killed and resumed, and one that starts over (a new snapshot after losing
events in flight): what a new snapshot settles (``resnapshots.py``), and, as negative
controls, what it must not (a read written before the END, a transaction of the new stream).
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.batch.contract import BatchResult, PartitionSeen
from pipeline.core.ledger.frontier import Frontier, SourcePartition
from pipeline.core.resolved.resnapshots import look
from pipeline.core.resolved.transaction_feed import TransactionFeed
from pipeline.core.resolved.transactions import TransactionLog, just_below
from pipeline.core.sources.debezium import in_commit, transaction_event, transaction_key
from schemas.errors import SourceError
from schemas.hlc import ZERO, Hlc

pytestmark = pytest.mark.unit

COLLECTIONS = {"public.orders": "pg.public.orders", "public.customers": "pg.public.customers"}
PARTITIONS = [SourcePartition(t, p) for t in sorted(COLLECTIONS.values()) for p in range(2)]
MS = 1_000_000


@dataclass(frozen=True)
class Event:
    """One change on a data partition: its transaction place (None: a snapshot read)."""

    tx: tuple[str, int] | None
    ts: Hlc


@dataclass(frozen=True)
class End:
    """One END event."""

    id: str
    counts: dict[str, int]
    time: Hlc


def feed(
    seed: int, transactions: int, snapshot: int
) -> tuple[dict[SourcePartition, list[Event]], list[End]]:
    """What Debezium writes: the partitions' changes and the transaction topic's ENDs."""
    rng = random.Random(seed)
    logs: dict[SourcePartition, list[Event]] = {sp: [] for sp in PARTITIONS}
    micros = 1_700_000_000_000_000
    for _ in range(snapshot):
        logs[rng.choice(PARTITIONS)].append(Event(None, Hlc(micros * 1000, 0)))
    ends = []
    for n in range(transactions):
        micros += rng.choice([1, 7, 400, 1500])  # commits a microsecond to milliseconds apart
        tx_id, counts = f"{n}:{micros}", {"public.orders": 0, "public.customers": 0, "other.t": 1}
        for order in range(1, rng.randint(0, 5) + 1):
            collection = rng.choice(list(COLLECTIONS))
            counts[collection] += 1
            sp = SourcePartition(COLLECTIONS[collection], rng.randint(0, 1))
            logs[sp].append(Event((tx_id, order), Hlc(micros * 1000, order)))
        ends.append(End(tx_id, counts, Hlc(micros // 1000 * MS, 0)))
    return logs, ends


class Driver:
    """The driver's side: what was read, the log, crashes and resumes."""

    def __init__(self, logs: dict[SourcePartition, list[Event]], ends: list[End]) -> None:
        self.logs, self.ends = logs, ends
        self.log = TransactionLog(COLLECTIONS)
        self.read = dict.fromkeys(PARTITIONS, 0)  # next offset per data partition
        self.ever = dict.fromkeys(PARTITIONS, 0)  # read before a resume went back: not news
        self.resolved = ZERO

    def check(self) -> None:
        resolved = self.log.resolved(self.read)
        assert resolved >= self.resolved, "the resolved time went backwards"
        self.resolved = resolved
        for sp, events in self.logs.items():
            unread = [e.ts for e in events[max(self.read[sp], self.ever[sp]) :]]
            assert not unread or min(unread) > resolved, f"{sp}: unread {min(unread)} <= {resolved}"

    def read_end(self) -> None:
        offset = self.log.offset or 0
        if offset < len(self.ends):
            end = self.ends[offset]
            self.log.ended(end.id, end.counts, end.time, offset)
            if self.log.needs_horizon():
                self.log.set_horizon({sp: len(events) for sp, events in self.logs.items()})

    def read_batch(self, sp: SourcePartition, count: int) -> None:
        """Up to ``count`` records of ``sp``, as one batch's summary reports them."""
        floor = self.resolved
        start = self.read[sp]
        events = self.logs[sp][start : start + count]
        by_tx: dict[str, list[object]] = {}
        for event in events:
            if event.tx is None or event.ts <= floor:
                continue  # a snapshot read, or at or below the floor: dropped, not counted
            entry = by_tx.setdefault(event.tx[0], [[], event.ts, event.ts])
            entry[0].append(event.tx[1])  # type: ignore[union-attr]
            entry[2] = event.ts
        for tx_id, (orders, low, high) in by_tx.items():
            self.log.saw(tx_id, orders, low, high)  # type: ignore[arg-type]
        self.read[sp] = start + len(events)
        self.ever[sp] = max(self.ever[sp], self.read[sp])

    def crash(self, keep_offsets: bool) -> None:
        """Resume from a checkpoint written now (with or without the data offsets)."""
        record = self.log.record(with_seen=keep_offsets)
        self.log = TransactionLog.restore(COLLECTIONS, record)
        if not keep_offsets:  # read from the start again; rows at or below the floor drop
            self.read = dict.fromkeys(PARTITIONS, 0)

    def done(self) -> bool:
        return (self.log.offset or 0) >= len(self.ends) and all(
            self.read[sp] >= len(e) for sp, e in self.logs.items()
        )


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    transactions=st.integers(0, 25),
    snapshot=st.integers(0, 6),
    held=st.sampled_from([None, *PARTITIONS]),
)
def test_no_unread_change_is_ever_at_or_below_the_resolved_time(
    seed: int, transactions: int, snapshot: int, held: SourcePartition | None
) -> None:
    logs, ends = feed(seed, transactions, snapshot)
    driver = Driver(logs, ends)
    rng = random.Random(seed + 1)
    steps = 0
    while not driver.done():
        steps += 1
        choice = rng.random()
        if choice < 0.3:
            driver.read_end()
        elif choice < 0.33:
            driver.crash(keep_offsets=rng.random() < 0.7)
        else:
            open_ = [sp for sp in PARTITIONS if sp != held or steps > 200]
            driver.read_batch(rng.choice(open_), rng.randint(1, 4))
        driver.check()
    driver.check()
    times = [e.ts for sp_events in logs.values() for e in sp_events if e.tx is not None]
    assert driver.resolved == max([*times, *(e.time for e in ends)], default=ZERO)


def test_a_held_back_partition_of_a_two_table_transaction_holds_the_marker() -> None:
    log = TransactionLog(COLLECTIONS)
    t1, t2 = Hlc(1_700_000_000_001_000_000, 0), Hlc(1_700_000_000_002_000_000, 0)
    log.ended("1:1", {"public.orders": 0, "public.customers": 0}, t1, 0)  # nothing of ours
    log.set_horizon({})
    log.ended("2:2", {"public.orders": 2, "public.customers": 1}, t2, 1)
    log.saw("2:2", [1, 3], Hlc(t2.wall + 5000, 1), Hlc(t2.wall + 5000, 3))  # orders: 2 of 2
    assert log.resolved({}) == t1  # customers' event is held back: t2 stays unresolved
    assert log.waiting_for() == "2:2 (2 of 3 events read)"
    assert log.in_flight()
    log.saw("2:2", [2], Hlc(t2.wall + 5000, 2), Hlc(t2.wall + 5000, 2))
    assert log.resolved({}) == Hlc(t2.wall + 5000, 3)
    assert not log.in_flight()


def test_a_change_read_again_counts_once() -> None:
    log = TransactionLog(COLLECTIONS, started=True)
    ts = Hlc(1_700_000_000_001_000_000, 0)
    log.ended("7:1", {"public.orders": 2}, ts, 0)
    log.saw("7:1", [1], Hlc(ts.wall, 1), Hlc(ts.wall, 1))
    log.saw("7:1", [1], Hlc(ts.wall, 1), Hlc(ts.wall, 1))  # Kafka Connect sent it twice
    assert log.resolved({}) == ZERO


def test_the_snapshot_is_read_to_its_horizon_before_anything_resolves() -> None:
    log, sp = TransactionLog(COLLECTIONS), PARTITIONS[0]
    ts = Hlc(1_700_000_000_001_000_000, 0)
    log.ended("1:1", {}, ts, 0)
    assert log.needs_horizon()
    log.set_horizon({sp: 5})  # the snapshot's reads lie before offset 5
    assert log.resolved({sp: 4}) == ZERO
    assert log.resolved({sp: 5}) == ts
    assert log.record()["horizon"] is None


def test_the_record_round_trips_and_resumes_where_the_first_incomplete_end_lies() -> None:
    log = TransactionLog(COLLECTIONS, started=True)
    ts = Hlc(1_700_000_000_001_000_000, 0)
    log.ended("1:1", {"public.orders": 1}, ts, 3)
    log.ended("2:2", {"public.orders": 2}, Hlc(ts.wall + MS, 0), 5)
    log.saw("1:1", [1], Hlc(ts.wall + 10, 1), Hlc(ts.wall + 10, 1))
    log.saw("2:2", [2], Hlc(ts.wall + MS + 10, 2), Hlc(ts.wall + MS + 10, 2))
    assert log.resolved({}) == Hlc(ts.wall + 10, 1)
    record = log.record()
    assert record["offset"] == 5
    assert record["seen"] == {
        "2:2": ["2", str(Hlc(ts.wall + MS + 10, 2)), str(Hlc(ts.wall + MS + 10, 2))]
    }
    again = TransactionLog.restore(COLLECTIONS, record)
    again.ended("2:2", {"public.orders": 2}, Hlc(ts.wall + MS, 0), 5)
    again.saw("2:2", [1], Hlc(ts.wall + MS + 10, 1), Hlc(ts.wall + MS + 10, 1))
    assert again.resolved({}) == Hlc(ts.wall + MS + 10, 2)


def test_end_times_are_the_commit_times_of_binlog_changes_and_a_resend_may_have_none() -> None:
    """A binlog change sent again before its END was read counts, without a time."""
    log = TransactionLog(COLLECTIONS, started=True)
    ts = Hlc(1_700_000_001_000 * MS, 0)
    log.ended("0-1-7", {"public.orders": 2}, ts, 3)
    log.ended("0-1-8", {"public.orders": 1}, Hlc(ts.wall + 1000 * MS, 0), 4)
    assert log.commit_times() == {"0-1-7": ts, "0-1-8": Hlc(ts.wall + 1000 * MS, 0)}
    log.saw("0-1-7", [900], None, None)  # a re-send: its commit time not looked up
    assert log.record()["seen"] == {"0-1-7": ["900", None, None]}
    again = TransactionLog.restore(COLLECTIONS, log.record())
    again.ended("0-1-7", {"public.orders": 2}, ts, 3)  # read again from where it resumes
    again.ended("0-1-8", {"public.orders": 1}, Hlc(ts.wall + 1000 * MS, 0), 4)
    assert again.resolved({}) == ZERO  # incomplete: one of two events read
    again.saw("0-1-7", [950], Hlc(ts.wall, 950), Hlc(ts.wall, 950))
    assert again.resolved({}) == Hlc(ts.wall, 950)  # complete: passed, and known by id still
    assert again.commit_times()["0-1-7"] == ts


def test_a_binlog_commit_a_second_below_the_one_before_it_is_raised_to_it() -> None:
    """MariaDB's END times are whole seconds of the COMMIT's start: the order is the topic's."""
    log = TransactionLog(COLLECTIONS, started=True)
    second = Hlc(1_700_000_002_000 * MS, 0)
    log.ended("0-1-7", {"public.orders": 1}, second, 3)
    log.ended("0-1-8", {"public.orders": 1}, Hlc(second.wall - 1000 * MS, 0), 4)  # one below
    assert log.commit_times() == {"0-1-7": second, "0-1-8": second}
    log.saw("0-1-7", [900], Hlc(second.wall, 900), Hlc(second.wall, 900))
    assert log.resolved({}) == just_below(Hlc(second.wall - 1000 * MS, 0))  # below its own END
    log.saw("0-1-8", [950], Hlc(second.wall, 950), Hlc(second.wall, 950))  # after it: above
    assert log.resolved({}) == Hlc(second.wall, 950)
    assert log.record()["passed"] == {"0-1-7": str(second), "0-1-8": str(second)}


def test_just_below() -> None:
    assert just_below(Hlc(5, 3)) == Hlc(5, 2)
    assert just_below(Hlc(5, 0)) == Hlc(4, 9_999_999_999)
    assert just_below(ZERO) == ZERO


@pytest.mark.parametrize("schemas", [True, False])
def test_transaction_events_as_debezium_writes_them(schemas: bool) -> None:
    end = {
        "status": "END",
        "id": "571:53195832",
        "event_count": 2,
        "data_collections": [
            {"data_collection": "public.orders", "event_count": 1},
            {"data_collection": "public.customers", "event_count": 1},
        ],
        "ts_ms": 1700000000123,
    }
    body = {"schema": {"type": "struct"}, "payload": end} if schemas else end
    event = transaction_event(json.dumps(body).encode())
    assert (event.status, event.id) == ("END", "571")  # PostgreSQL: the xid, not the event's LSN
    assert event.counts == {"public.orders": 1, "public.customers": 1}
    assert event.time == Hlc(1_700_000_000_123_000_000, 0)
    begin = transaction_event(
        json.dumps(
            {
                "status": "BEGIN",
                "id": "x",
                "event_count": None,
                "data_collections": None,
                "ts_ms": 1,
            }
        ).encode()
    )
    assert begin.status == "BEGIN"


def test_a_later_commit_with_an_earlier_time_caps_what_resolves_once_it_is_known() -> None:
    # PostgreSQL takes the commit time before the commit record: two concurrent commits can
    # come out a few microseconds the other way round
    log = TransactionLog(COLLECTIONS, started=True)
    a, b = Hlc(1_700_000_000_002_000_000, 0), Hlc(1_700_000_000_001_000_000, 0)
    log.ended("1:a", {"public.orders": 1}, a, 0)
    log.ended("2:b", {"public.orders": 1}, b, 1)  # after a in commit order, earlier in time
    log.saw("1:a", [1], Hlc(a.wall + 10, 1), Hlc(a.wall + 10, 1))
    assert log.resolved({}) == just_below(b)  # not a's time: b's change lies below it
    log.saw("2:b", [1], Hlc(b.wall + 10, 1), Hlc(b.wall + 10, 1))
    assert log.resolved({}) == Hlc(a.wall + 10, 1)


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ("733:26386552", "733"),  # PostgreSQL: xid and the LSN of the event (seen on a real feed)
        ("3e11fa47-71ca-11e1-9e33-c80aa9429562:23", "3e11fa47-71ca-11e1-9e33-c80aa9429562:23"),
        ("0000002d:00000da8:0003", "0000002d:00000da8:0003"),  # SQL Server's commit LSN
        ("mysql-bin.000003:1234", "mysql-bin.000003:1234"),
    ],
)
def test_a_transaction_is_named_alike_in_its_changes_and_its_end(given: str, key: str) -> None:
    assert transaction_key(given) == key


class _Trimmed:
    """A transaction topic whose first offsets are gone."""

    def list_topics(self, topic: str, timeout: float) -> object:
        partition = type("P", (), {})()
        found = type("T", (), {"error": None, "partitions": {0: partition}})()
        return type("M", (), {"topics": {topic: found}})()

    def get_watermark_offsets(self, _tp: object, timeout: float) -> tuple[int, int]:
        return 50, 80

    def close(self) -> None:
        pass


def test_a_transaction_topic_trimmed_past_where_the_log_resumes_stops_the_changefeed() -> None:
    log = TransactionLog(COLLECTIONS, offset=40, started=True)  # resumes at END offset 40
    feed = TransactionFeed({"bootstrap.servers": "127.0.0.1:9"}, {"pg.transaction": log}, [])
    feed.reader.consumer.close()
    feed.reader.consumer = _Trimmed()
    with pytest.raises(
        SourceError, match=r"'pg.transaction' was trimmed to offset 50, past offset 40"
    ):
        feed.advance(Frontier([SourcePartition("pg.public.orders", 0)]))


def test_a_snapshot_whose_time_passes_an_incomplete_transaction_stops_the_changefeed() -> None:
    """The scan's counts must show every transaction at or below its time read whole."""
    log = TransactionLog(COLLECTIONS)
    log.ended("100", {"public.orders": 2}, Hlc(5 * MS, 0), 0)
    log.ended("101", {"public.customers": 1}, Hlc(9 * MS, 0), 1)  # the last commit listed
    feed = TransactionFeed(
        {"bootstrap.servers": "127.0.0.1:9"}, {"pg.transaction": log}, PARTITIONS
    )
    feed.reader.read = lambda _topic, _log: None  # type: ignore[method-assign] - read above
    statement = just_below(Hlc(9 * MS, 0))
    frontier = Frontier(PARTITIONS)
    log.saw("100", [1], Hlc(5 * MS, 1), Hlc(5 * MS, 1))  # one of its two changes in the scan
    with pytest.raises(SourceError, match=r"transaction 100 \(1 of 2 events read\)"):
        feed.check_snapshot(statement, frontier)
    log.saw("100", [2], Hlc(5 * MS, 2), Hlc(5 * MS, 2))
    feed.check_snapshot(statement, frontier)  # 101 after the snapshot's time may wait
    assert log.waiting_for() == "101 (0 of 1 events read)"
    feed.close()


# -- a connector that restarts: what Debezium sends again ------------------------------------


@dataclass(frozen=True)
class Sent:
    """One record Debezium sends: a change (``sp`` its partition) or a BEGIN/END (``sp`` None)."""

    sp: SourcePartition | None
    tx: str
    place: int  # a change's LSN (unique in the history); END: its count
    ts: Hlc  # a change's time; BEGIN/END: the commit's millisecond
    status: str = ""  # BEGIN, END, or "" for a change


def history(rng: random.Random, transactions: int) -> list[tuple[str, Hlc, list[Sent]]]:
    """Committed transactions: id, END time, changes (a key's versions on one partition)."""
    micros, lsn, out = 1_700_000_000_000_000, 1_000, []
    for n in range(transactions):
        micros += rng.choice([1, 7, 400, 1500, 250_000])  # some further apart than RECENT
        changes = []
        for _ in range(rng.randint(1, 6)):
            lsn += rng.randint(1, 50)
            collection = rng.choice(list(COLLECTIONS))
            sp = SourcePartition(COLLECTIONS[collection], rng.randint(0, 1))
            changes.append(Sent(sp, str(n), lsn, Hlc(micros * 1000, lsn)))
        out.append((str(n), Hlc(micros // 1000 * MS, 0), changes))
    return out


def run_from(
    committed: list[tuple[str, Hlc, list[Sent]]], start: tuple[int, int], binlog: bool
) -> list[Sent]:
    """What a connector run sends, resuming at change ``start`` (transaction, change)."""
    records = []
    first, skip = start
    for tx_id, end, changes in committed[first:]:
        rest = changes[skip:]  # after a restart inside it, only what follows is counted
        skip = 0
        if not rest and not binlog:
            continue  # BEGIN goes out with its first change: none, no BEGIN and no END
        # (a binlog connector reads its transaction again from its start: BEGIN, END with 0)
        # a binlog's BEGIN carries its first statement's time: it may lie below earlier ENDs
        begin = Hlc(end.wall - 1_000 * MS, 0) if binlog and int(tx_id) % 2 else end
        records.append(Sent(None, tx_id, 0, begin, "BEGIN"))
        records.extend(rest)
        records.append(Sent(None, tx_id, len(rest), end, "END"))
    return records


class Connect:
    """Kafka Connect running Debezium: sends, is killed, resumes from its flushed offset."""

    def __init__(
        self, committed: list[tuple[str, Hlc, list[Sent]]], rng: random.Random, binlog: bool
    ) -> None:
        self.committed, self.rng, self.binlog = committed, rng, binlog
        self.topics: dict[SourcePartition | None, list[Sent]] = {sp: [] for sp in PARTITIONS}
        self.topics[None] = []
        self.pending = run_from(committed, (0, 0), binlog)
        self.sent: list[tuple[int, int]] = []  # where each change of this run lies (tx, n)
        self.start = (0, 0)

    def send(self, count: int) -> None:
        """``count`` more records delivered, in the order sent."""
        for record in self.pending[:count]:
            self.topics[record.sp].append(record)
        self.pending = self.pending[count:]

    def kill(self) -> None:
        """SIGKILL: records in flight are lost, and the run resumes at its last flushed offset.

        The flushed offset is a change already delivered (Connect commits only acknowledged
        records), at or before the last one; what follows it is sent again.
        """
        delivered = [r for topic in self.topics.values() for r in topic if not r.status]
        places = {
            (tx_id, c.place): (i, j)
            for i, (tx_id, _, cs) in enumerate(self.committed)
            for j, c in enumerate(cs)
        }
        done = sorted({places[(r.tx, r.place)] for r in delivered})
        if not done:
            return
        flushed = self.rng.choice([*done[-4:], done[-1]])  # up to a few changes back
        resume = (flushed[0], flushed[1] + 1)
        if resume[1] >= len(self.committed[resume[0]][2]) and not self.binlog:
            resume = (resume[0] + 1, 0)  # (a binlog connector reads the transaction again)
        self.pending = run_from(self.committed, resume, self.binlog)


class Executors:
    """The batches' side: each partition read in order, re-sends dropped by position.

    ``binlog``: a change's time is its transaction's commit time (``in_commit``), which the
    log gives once its END was read; a change before its END ends the batch there.
    """

    def __init__(self, topics: dict[SourcePartition | None, list[Sent]], binlog: bool) -> None:
        self.topics, self.binlog = topics, binlog
        self.read = dict.fromkeys(PARTITIONS, 0)
        self.latest: dict[SourcePartition, int] = {}
        self.emitted: dict[SourcePartition, list[Sent]] = {sp: [] for sp in PARTITIONS}

    def time(self, record: Sent, commits: dict[str, Hlc]) -> Hlc | None:
        """The change's time (None: a binlog change whose END was not read)."""
        if not self.binlog:
            return record.ts
        commit = commits.get(record.tx)
        return None if commit is None else in_commit(commit, record.place)

    def batch(self, log: TransactionLog, sp: SourcePartition, count: int, floor: Hlc) -> None:
        start, commits = self.read[sp], log.commit_times()
        records = self.topics[sp][start : start + count]
        by_tx: dict[str, list[Any]] = {}
        read = 0
        for record in records:
            resent = record.place <= self.latest.get(sp, -1)
            ts = self.time(record, commits)
            if ts is None and not resent:
                break  # deferred: the rest of the partition waits for the END
            entry = by_tx.setdefault(record.tx, [[], ts, ts])
            entry[0].append(record.place)
            if ts is not None:
                entry[1] = ts if entry[1] is None else min(entry[1], ts)
                entry[2] = ts if entry[2] is None else max(entry[2], ts)
            read += 1
            if resent:
                continue  # sent again: dropped
            self.latest[sp] = record.place
            assert ts is not None
            if ts > floor:
                self.emitted[sp].append(replace(record, ts=ts))
        for tx_id, (places, low, high) in by_tx.items():
            log.saw(tx_id, places, low, high)
        self.read[sp] = start + read


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    transactions=st.integers(1, 20),
    kills=st.integers(0, 4),
    held=st.sampled_from([None, *PARTITIONS]),
    crashes=st.integers(0, 3),
    binlog=st.booleans(),
)
def test_a_connector_killed_and_resumed_never_breaks_the_promise_nor_freezes_the_marker(
    *,
    seed: int,
    transactions: int,
    kills: int,
    held: SourcePartition | None,
    crashes: int,
    binlog: bool,
) -> None:
    """Re-sent changes are never news, and every transaction resolves in the end.

    Checked at every step: no change of the history that was not read yet lies at or below
    the resolved time; nothing is emitted twice or out of its partition's commit order; a
    transaction's commit time (a binlog change's time), once given, stays what it was across
    the changefeed's own restarts (the log restored from its record, the transaction topic
    read again from where the record says) and rises with the commit order; once everything
    is sent and read, the resolved time is the last change's and nothing is stuck.
    """
    rng = random.Random(seed)
    committed = history(rng, transactions)
    connect, log = Connect(committed, rng, binlog), TransactionLog(COLLECTIONS, started=True)
    executors, tx_read, resolved = Executors(connect.topics, binlog), 0, ZERO
    kills_left, crashes_left = kills, crashes
    commits: dict[str, Hlc] = {}  # each transaction's commit time, as first given
    for step in range(10_000):
        choice = rng.random()
        if choice < 0.3 and connect.pending:
            connect.send(rng.randint(1, 5))
        elif choice < 0.35 and kills_left:
            kills_left -= 1
            connect.kill()
        elif choice < 0.38 and crashes_left:  # the changefeed resumes from a checkpoint now
            crashes_left -= 1
            log = TransactionLog.restore(COLLECTIONS, log.record())
            tx_read = log.offset or 0
        elif choice < 0.55 and tx_read < len(connect.topics[None]):
            record = connect.topics[None][tx_read]
            if record.status == "BEGIN":
                log.began(record.tx, record.ts, tx_read)
            else:
                counts = {"public.orders": record.place, "public.customers": 0}
                log.ended(record.tx, counts, record.ts, tx_read)
            tx_read += 1
            if log.needs_ends():
                log.take_ends({sp: len(connect.topics[sp]) for sp in PARTITIONS})
        else:
            ready = [sp for sp in PARTITIONS if sp != held or step > 300]
            executors.batch(log, rng.choice(ready), rng.randint(1, 4), resolved)
        now = log.resolved(executors.read)
        assert now >= resolved, "the resolved time went backwards"
        resolved = now
        for tx_id, commit in log.commit_times().items():
            assert commits.setdefault(tx_id, commit) == commit, f"{tx_id}: commit time changed"
        seen = {r.place for sp in PARTITIONS for r in connect.topics[sp][: executors.read[sp]]}
        times = log.commit_times()  # a binlog change's time is known once its END was read
        unread = [
            ts
            for _, _, cs in committed
            for c in cs
            if c.place not in seen and (ts := executors.time(c, times)) is not None
        ]
        assert not unread or min(unread) > resolved, f"unread {min(unread)} <= {resolved}"
        sent = not connect.pending and not kills_left and tx_read == len(connect.topics[None])
        if sent and all(executors.read[sp] == len(connect.topics[sp]) for sp in PARTITIONS):
            break
    in_order = [commits[tx_id] for tx_id, _, _ in committed if tx_id in commits]
    assert in_order == sorted(in_order), "commit times out of the commit order"
    for sp, emitted in executors.emitted.items():
        places = [r.place for r in emitted]
        assert places == sorted(set(places)), f"{sp}: a change emitted twice or out of order"
        times = [r.ts for r in emitted]
        assert times == sorted(times), f"{sp}: times out of the commit order"
    # (a binlog change waits for a commit time: none for a last transaction whose END was lost)
    changes = [c for tx_id, _, cs in committed for c in cs if not binlog or tx_id in commits]
    assert {r.place for rs in executors.emitted.values() for r in rs} == {c.place for c in changes}
    assert log.stuck(executors.read) is None
    # what resolves: up to the last transaction whose END came (a restart right after a
    # transaction's last change sends nothing of it again, and the END it lost never comes)
    last = max((int(r.tx) for r in connect.topics[None] if r.status == "END"), default=-1)
    times = {r.place: r.ts for rs in executors.emitted.values() for r in rs}
    ended = [times[c.place] for _, _, cs in committed[: last + 1] for c in cs]
    assert resolved == max(ended, default=ZERO), log.waiting_for()


class _Ends:
    """Data partitions that end at offset 5."""

    def get_watermark_offsets(self, _tp: object, timeout: float) -> tuple[int, int]:
        return 0, 5

    def close(self) -> None:
        pass


def test_a_transaction_that_cannot_complete_is_named_and_clears_once_it_does() -> None:
    """Never a silent freeze: read past where the partitions ended, still short, it is stuck."""
    now = [0.0]
    log = TransactionLog(COLLECTIONS, started=True)
    feed = TransactionFeed(
        {"bootstrap.servers": "127.0.0.1:9"},
        {"pg.transaction": log},
        PARTITIONS,
        clock=lambda: now[0],
    )
    feed.reader.consumer.close()
    feed.reader.consumer = _Ends()
    feed.reader.read = lambda _topic, _log: None  # type: ignore[method-assign] - fed below
    frontier = Frontier(PARTITIONS)
    log.ended("100", {"public.orders": 2}, Hlc(5 * MS, 0), 0)
    log.saw("100", [24_000_001], Hlc(5 * MS, 1), Hlc(5 * MS, 1))  # one of its two changes
    feed.advance(frontier)
    now[0] = 11.0  # waiting for longer than STUCK_CHECK: the partitions' ends are taken
    feed.advance(frontier)
    assert feed.stuck == {}  # not read up to them yet
    waits = "transaction 100 (1 of 2 events read) of 'pg.transaction', waiting 11 s"
    assert feed.waiting_for() == dict.fromkeys(feed.logs["pg.transaction"].topics, waits)
    for sp in PARTITIONS:
        frontier.forward(sp, resolved=None, next_offset=5)
    feed.advance(frontier)
    assert feed.warnings() == [
        "transaction 100 (1 of 2 events read) of 'pg.transaction' cannot complete: "
        "markers wait for it"
    ]
    assert frontier.high_water() < Hlc(5 * MS, 0)
    log.saw("100", [24_000_002], Hlc(5 * MS, 2), Hlc(5 * MS, 2))  # it came after all
    feed.advance(frontier)
    assert (feed.stuck, frontier.high_water()) == ({}, Hlc(5 * MS, 2))
    assert feed.waiting_for() == {}  # passed: nothing waited for
    feed.close()


# -- a connector that starts over: a new snapshot settles what ENDed before it ---------------

ORDERS = [sp for sp in PARTITIONS if sp.topic == "pg.public.orders"]
T_TIME = Hlc(5 * MS, 0)  # T: ENDed by the old run, 14 events counted, 6 of them delivered
N_TIME = Hlc(9 * MS, 0)  # N: the new stream's, after the new snapshot


class _Written:
    """Data partitions that end where the test says (``ends``, moved as the test writes)."""

    def __init__(self, ends: dict[SourcePartition, int]) -> None:
        self.ends = ends

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, self.ends[SourcePartition(tp.topic, tp.partition)]

    def close(self) -> None:
        pass


def restarting(
    ends: dict[SourcePartition, int],
) -> tuple[TransactionFeed, TransactionLog, Frontier, list[float]]:
    """A feed over ``PARTITIONS`` (ends as ``ends`` says), its log, frontier and clock."""
    now = [0.0]
    log = TransactionLog(COLLECTIONS, started=True)
    feed = TransactionFeed(
        {"bootstrap.servers": "127.0.0.1:9"},
        {"pg.transaction": log},
        PARTITIONS,
        clock=lambda: now[0],
    )
    feed.reader.consumer.close()
    feed.reader.consumer = _Written(ends)
    feed.reader.read = lambda _topic, _log: None  # type: ignore[method-assign] - fed below
    return feed, log, Frontier(PARTITIONS), now


def batch(
    feed: TransactionFeed,
    frontier: Frontier,
    to: dict[SourcePartition, int],
    rereads: dict[SourcePartition, int] | None = None,
) -> None:
    """A batch read each partition of ``to`` up to there (its last snapshot read at ``rereads``).

    As the coordinator has it (``Rounds.write``): the frontier moved, the feed told, advanced.
    """
    rereads = rereads or {}
    result = BatchResult.of(
        [PartitionSeen(sp, o, None, reread=rereads.get(sp)) for sp, o in to.items()]
    )
    result.forward(frontier)
    feed.saw(result)
    feed.advance(frontier)


def t_stuck(
    feed: TransactionFeed, log: TransactionLog, frontier: Frontier, now: list[float]
) -> None:
    """T ENDs with 14 events, 6 delivered (the rest died with Connect), and is reported stuck.

    The partitions read up to 8; T's 6 events at 8 and 9.
    """
    log.ended("T", {"public.orders": 10, "public.customers": 4}, T_TIME, 0)
    feed.advance(frontier)  # T is marked: the partitions end at 10
    log.saw("T", range(1, 7), Hlc(5 * MS, 1), Hlc(5 * MS, 6))
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 10))
    now[0] = 11.0  # waited STUCK_CHECK: the partitions' ends taken
    feed.advance(frontier)
    feed.advance(frontier)
    assert feed.warnings() == [
        "transaction T (6 of 14 events read) of 'pg.transaction' cannot complete: "
        "markers wait for it"
    ]
    assert frontier.high_water() < T_TIME


@pytest.mark.parametrize("snapshot", [True, False])
def test_a_new_snapshot_settles_a_transaction_ended_before_it_and_the_markers_move_on(
    snapshot: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Connect SIGKILLed with T's END delivered, 8 of its events not, and no offset flushed.

    It starts over: a new snapshot's reads, then a new stream. T's missing events never come;
    a read of the snapshot beyond where the partitions ended once T was read settles T, and
    R passes it once the partitions are read up to where they ended then. Without a snapshot
    read (``snapshot`` False: the negative control) T stays stuck as before.
    """
    ends = dict.fromkeys(PARTITIONS, 10)
    feed, log, frontier, now = restarting(ends)
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 8))  # caught up
    t_stuck(feed, log, frontier, now)
    ends.update(dict.fromkeys(PARTITIONS, 16))  # the new snapshot's reads at 10-15
    with caplog.at_level(logging.INFO, "pipeline.core.resolved.resnapshots"):
        batch(feed, frontier, {ORDERS[0]: 13}, {ORDERS[0]: 12} if snapshot else {})
    said = [r.getMessage() for r in caplog.records if r.name.endswith("resnapshots")]
    assert frontier.high_water() < T_TIME  # not before the partitions are read up to 16
    if snapshot:
        assert feed.stuck == {}
        (text,) = said
        assert "T (6 of 14 events read)" in text
        assert "pg.public.orders/0@12" in text
        assert "pg.public.customers/1@16" in text
    ends.update(dict.fromkeys(PARTITIONS, 20))  # more of them written
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 15))
    assert frontier.high_water() < T_TIME  # one read short of where they ended
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 20))
    if not snapshot:  # the negative control: stuck, as without the rule
        assert frontier.high_water() < T_TIME
        assert feed.warnings() == [
            "transaction T (6 of 14 events read) of 'pg.transaction' cannot complete: "
            "markers wait for it"
        ]
        assert said == []
        return
    assert frontier.high_water() == Hlc(5 * MS, 6)  # T passed: its events read count as usual
    assert feed.stuck == {}
    # the new stream's transactions complete by their counts, as ever
    log.ended("N1", {"public.orders": 2}, N_TIME, 1)
    log.ended("N2", {"public.orders": 2}, Hlc(10 * MS, 0), 2)
    ends.update(dict.fromkeys(ORDERS, 24))
    feed.advance(frontier)
    log.saw("N1", [1, 2], Hlc(9 * MS, 1), Hlc(9 * MS, 2))
    log.saw("N2", [1], Hlc(10 * MS, 1), Hlc(10 * MS, 1))
    batch(feed, frontier, dict.fromkeys(ORDERS, 24))
    assert frontier.high_water() == Hlc(9 * MS, 2)  # N1 passed; N2 waits for its event
    assert log.waiting_for() == "N2 (1 of 2 events read)"


def test_a_snapshot_read_written_before_a_transaction_ended_does_not_settle_it() -> None:
    """The negative control of a changefeed that lags: a read it meets late is an old one.

    T ENDed, one of its three events lost in flight; Connect resumed from an offset it had
    flushed before T and will send that event again. The changefeed, far behind, meets the
    initial snapshot's reads only now, after T's END was read: they lie below where the
    partitions ended then (T's mark), so they settle nothing (measured against where the
    changefeed had read when T's END came, 5, the read at 7 would have passed T).
    """
    ends = dict.fromkeys(PARTITIONS, 30)
    feed, log, frontier, now = restarting(ends)
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 5))  # the initial snapshot's reads: 0-9
    log.ended("T", {"public.orders": 3}, T_TIME, 0)
    log.saw("T", [1, 2], Hlc(5 * MS, 1), Hlc(5 * MS, 2))
    feed.advance(frontier)  # T is marked: the partitions end at 30
    batch(feed, frontier, {ORDERS[0]: 8}, {ORDERS[0]: 7})  # an initial snapshot's read
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 30))
    assert frontier.high_water() < T_TIME
    now[0] = 11.0
    feed.advance(frontier)
    feed.advance(frontier)
    assert feed.warnings() == [
        "transaction T (2 of 3 events read) of 'pg.transaction' cannot complete: "
        "markers wait for it"
    ]
    log.saw("T", [3], Hlc(5 * MS, 3), Hlc(5 * MS, 3))  # sent again by the resumed connector
    feed.advance(frontier)
    assert (feed.stuck, frontier.high_water()) == ({}, Hlc(5 * MS, 3))


def test_a_transaction_of_the_new_stream_is_not_settled_by_the_snapshot_before_it() -> None:
    """The negative control of a new-stream transaction read after its snapshot's reads.

    T is settled by the new snapshot. N, streamed after it, ENDs with one of its two events
    lost when Connect is killed again (it resumes from an offset flushed after the snapshot,
    and will send it again). The changefeed reads the snapshot's reads only after N's END:
    one batch capped short of the partitions' ends (``max_offsets_per_trigger``), then the
    rest. Those reads were written before N's END was read, below N's mark: N waits for its
    event. (Marked with where the changefeed had read when N's END came, 13, the read at 15
    would have passed N, its event still to come; marked with where the batch after it read
    to, 16, the read at 19 would have.)
    """
    ends = dict.fromkeys(PARTITIONS, 10)
    feed, log, frontier, now = restarting(ends)
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 8))
    t_stuck(feed, log, frontier, now)
    ends.update(dict.fromkeys(PARTITIONS, 20))  # the new snapshot's reads at 10-19
    batch(feed, frontier, {ORDERS[0]: 13}, {ORDERS[0]: 12})  # settles T (read up to 20)
    assert feed.stuck == {}
    log.ended("N", {"public.orders": 2}, N_TIME, 1)
    ends[ORDERS[1]] = 21  # N's first event at 20 of orders/1; its second lost
    now[0] = 12.0
    feed.advance(frontier)  # N is marked: 20, and 21 on orders/1
    batch(feed, frontier, dict.fromkeys(PARTITIONS, 16), dict.fromkeys(PARTITIONS, 15))
    log.saw("N", [1], Hlc(9 * MS, 1), Hlc(9 * MS, 1))
    batch(
        feed,
        frontier,
        {**dict.fromkeys(PARTITIONS, 20), ORDERS[1]: 21},
        dict.fromkeys(PARTITIONS, 19),
    )
    feed.advance(frontier)  # a second later, quiet
    assert frontier.high_water() == Hlc(5 * MS, 6)  # T passed, N not
    assert log.waiting_for() == "N (1 of 2 events read)"
    log.saw("N", [2], Hlc(9 * MS, 2), Hlc(9 * MS, 2))  # sent again by the resumed connector
    feed.advance(frontier)
    assert frontier.high_water() == Hlc(9 * MS, 2)


class Snapshotted(Executors):
    """The executors, where a new snapshot's reads come too: not counted, their offsets said."""

    def batch(self, log: TransactionLog, sp: SourcePartition, count: int, floor: Hlc) -> None:
        start = self.read[sp]
        records = self.topics[sp][start : start + count]
        changes = next((i for i, r in enumerate(records) if r.status == "READ"), len(records))
        if changes or not records:  # the changes before the first read, as ever
            super().batch(log, sp, changes, floor)
            return
        reads = next((i for i, r in enumerate(records) if r.status != "READ"), len(records))
        log.resnapshots.saw(sp, start + reads - 1)  # the summary's reread
        self.read[sp] = start + reads


def start_over(connect: Connect, rng: random.Random) -> None:
    """Connect SIGKILLed with no offset flushed: it snapshots again, then streams anew.

    The records in flight are delivered, changes among them lost at random (a transaction's
    END may reach the topic without all its changes); the new run sends a snapshot's reads,
    then the transactions committed after every one the old run sent any of.
    """
    for record in connect.pending[: rng.randint(1, 8)]:
        if record.status or rng.random() < 0.5:
            connect.topics[record.sp].append(record)
    sent = [r for topic in connect.topics.values() for r in topic]
    after = max((int(r.tx) for r in sent), default=-1) + 1
    reads = [Sent(sp, "", 0, ZERO, "READ") for sp in PARTITIONS if rng.random() < 0.6]
    connect.pending = [*(reads or [Sent(PARTITIONS[0], "", 0, ZERO, "READ")])]
    connect.pending.extend(run_from(connect.committed, (after, 0), binlog=False))


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    transactions=st.integers(1, 20),
    kills=st.integers(0, 3),
    held=st.sampled_from([None, *PARTITIONS]),
)
def test_a_connector_that_starts_over_never_breaks_the_promise_and_the_marker_moves_on(
    *, seed: int, transactions: int, kills: int, held: SourcePartition | None
) -> None:
    """Killed and resumed from flushed offsets a few times, then started over once.

    Checked at every step, the rule's driver in between (``look`` after each step, as the feed
    advances): no change delivered or still to be sent is unread at or below the resolved
    time (the changes lost in flight before the new snapshot are neither: they never come),
    and it never goes backwards. Once everything is sent and read, no transaction waits and
    the resolved time is at or above every change of a transaction whose END was delivered.
    (The changefeed reads the transaction topic while Connect restarts: its restart takes
    seconds, an advance a second at most.)
    """
    rng = random.Random(seed)
    committed = history(rng, transactions)
    connect, log = Connect(committed, rng, binlog=False), TransactionLog(COLLECTIONS, started=True)
    executors, tx_read, resolved = Snapshotted(connect.topics, binlog=False), 0, ZERO
    kills_left, over = kills, False

    def ends() -> dict[SourcePartition, int]:
        return {sp: len(connect.topics[sp]) for sp in PARTITIONS}

    def read_transaction() -> None:
        nonlocal tx_read
        record = connect.topics[None][tx_read]
        if record.status == "BEGIN":
            log.began(record.tx, record.ts, tx_read)
        else:
            counts = {"public.orders": record.place, "public.customers": 0}
            log.ended(record.tx, counts, record.ts, tx_read)
        tx_read += 1
        if log.needs_ends():
            log.take_ends(ends())

    for step in range(10_000):
        choice = rng.random()
        if choice < 0.3 and connect.pending:
            connect.send(rng.randint(1, 5))
        elif choice < 0.35 and kills_left and not over:
            kills_left -= 1
            connect.kill()
        elif choice < 0.37 and not over and step > 20:
            over = True
            start_over(connect, rng)
            while tx_read < len(connect.topics[None]):  # an advance while Connect restarts
                read_transaction()
            log.resolved(executors.read)
            look("t", log, ends)
        elif choice < 0.55 and tx_read < len(connect.topics[None]):
            read_transaction()
        else:
            ready = [sp for sp in PARTITIONS if sp != held or step > 300]
            executors.batch(log, rng.choice(ready), rng.randint(1, 4), resolved)
        now = log.resolved(executors.read)
        look("t", log, ends)
        assert now >= resolved, "the resolved time went backwards"
        resolved = now
        seen = {
            r.place
            for sp in PARTITIONS
            for r in connect.topics[sp][: executors.read[sp]]
            if not r.status
        }
        coming = [r for sp in PARTITIONS for r in connect.topics[sp] if not r.status]
        coming += [r for r in connect.pending if r.sp is not None and not r.status]
        unread = [r.ts for r in coming if r.place not in seen]
        assert not unread or min(unread) > resolved, f"unread {min(unread)} <= {resolved}"
        sent = not connect.pending and tx_read == len(connect.topics[None])
        if sent and all(executors.read[sp] == len(connect.topics[sp]) for sp in PARTITIONS):
            break
    assert log.waiting_for() is None
    ended = {r.tx for r in connect.topics[None] if r.status == "END"}
    delivered = [r.ts for sp in PARTITIONS for r in connect.topics[sp] if r.tx in ended]
    assert resolved >= max(delivered, default=ZERO)
