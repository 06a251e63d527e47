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
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.ledger.frontier import Frontier, SourcePartition
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
    feed.close()
