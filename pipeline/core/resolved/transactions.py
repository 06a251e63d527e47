"""Resolved times for Debezium sources, from its transaction metadata (pure, on the driver).

Debezium writes no resolved markers. With ``provide.transaction.metadata=true`` it writes,
on one transaction topic and in commit order, a BEGIN and an END event per transaction, the
END with its event count per table (``data_collections``), and every change carries its
transaction's id. A :class:`TransactionLog` (one per transaction topic) puts the two together:

* :meth:`~TransactionLog.ended` (and :meth:`~TransactionLog.began`): the transaction topic's
  events, in its order (the commit order);
* :meth:`~TransactionLog.saw`: the changes the executors read from the data topics (per
  transaction: their *places*, each change's own position in the source, and their lowest
  and highest time), from each batch's summaries, re-sent changes included;
* :meth:`~TransactionLog.resolved`: the time R below which nothing is unread. A transaction
  is *complete* once every event it counts for the followed tables was read; R is the highest
  time of the longest complete prefix of the ENDed transactions, kept below every time known
  of the first incomplete one (its END's time and the changes of it already read), and it
  never goes backwards. So a marker at R never passes a transaction one of whose events is
  still unread, whichever partition holds it back.

**A connector that restarts** (Kafka Connect killed, redeployed, rebalanced) sends again
what followed its last flushed offset: changes (same positions, so they count once here and
the executors drop them as re-sends), and the BEGIN/END of the transactions among them, whose
counts start over where it resumed. So an END read again never stands for a new transaction:
the END of a transaction already passed is ignored (known by id for
:data:`~.passed.RECENT` of commit time, older ones by their time: ``passed.py``), and an END of
one still waiting keeps the highest count read.
A transaction whose BEGIN or END was read twice is *re-sent*: its last END may count only
the events after the restart, so it is complete once that many were read and every data
partition was read up to where it ended when that END was read. A transaction that stays
incomplete although the data partitions were read past where they ended when it was found
waiting is *stuck* (:meth:`~TransactionLog.stuck`): its events are lost upstream; the feed
reports it by name, and R stays below it, unless the connector started over.

A connector killed before it flushed any offset **starts over**: a new snapshot, then a stream
from the snapshot's point, after every transaction the old run sent. Those of its events in
flight when it died never come (their effect is in the snapshot). The rule
(``resnapshots.py``): a snapshot read at an offset of a data partition at or beyond where that
partition ended once a transaction's BEGIN or END had been read (its *mark*) was written
after it, so its snapshot holds it; such a transaction (every one waiting, ENDed or only
begun, whose mark a read passes) is *settled*: complete once every data partition was read
up to where they end when the read is noticed, whatever its count. A transaction of the new
stream is read after that snapshot's reads were written, so its mark lies beyond them and
only its count completes it. A stuck transaction no snapshot covers stays stuck.

A transaction whose whole millisecond lies at or below the resolved time (a ``cursor`` the
changefeed started at) is passed without counting.

**Commit times** (:meth:`~TransactionLog.commit_times`): a binlog change (MySQL, MariaDB) takes
its transaction's time from here, its END's time raised to the one before it in the topic
(a binlog's END times are whole seconds and may go back one), so they follow the commit order.

What it rests on: the source commits in the order the transaction topic lists its
transactions, and a later commit does not carry an earlier commit time by more than
:data:`~.passed.RECENT` (PostgreSQL takes the commit time just before writing the commit record, a
binlog's END time is its COMMIT statement's start in whole seconds; a
later transaction with an earlier time than one already resolved would be caught only as
far as its END or its changes are known).

**Debezium's own snapshot** (``op: r``) carries no transaction. Its records precede the
stream on every partition, so when the first END is read the data partitions' end offsets
are taken as a *horizon*: R stays at zero until every partition was read up to it. Its reads
lie below every mark, so they settle nothing; a snapshot taken again later does (above).

The state a resume needs (:meth:`~TransactionLog.record`): where to read the transaction
topic again (the first BEGIN of the transactions not yet passed: what a restart of the
connector sent again of them is read again, so they count as re-sent again), what was read
of the transactions in flight, the BEGINs read without their END, the transactions passed
lately, and the horizon while it stands. Without the in-flight part (a checkpoint that gave
its offsets up for its byte budget) the data topics are read from their start again, so
counting starts over and stays exact.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from schemas.hlc import ZERO, Hlc

from ..ledger import (
    SourcePartition,
    TransactionLogRecord,
    numbers_to_ranges,
    ranges_to_numbers,
    read_part,
)
from .passed import MILLISECOND, Passed
from .resnapshots import Resnapshots

LOGICAL_TOP = 9_999_999_999  # the highest logical part an HLC carries on the wire
# an END's time is its commit time in milliseconds (MILLISECOND): its events lie within the
# millisecond that follows; RECENT: how long a passed transaction is known by id (passed.py)


def just_below(ts: Hlc) -> Hlc:
    """The highest time below ``ts``."""
    if ts.logical:
        return Hlc(ts.wall, ts.logical - 1)
    return Hlc(ts.wall - 1, LOGICAL_TOP) if ts.wall else ZERO


@dataclass
class Seen:
    """What was read of one transaction: its events' places, lowest and highest time.

    A place is the event's own position in the source (PostgreSQL's LSN, a binlog's
    position and row), so an event Debezium sends again after a restart counts once.
    """

    places: set[int] = field(default_factory=set)
    low: Hlc | None = None
    high: Hlc | None = None

    def add(self, places: Iterable[int], low: Hlc | None, high: Hlc | None) -> None:
        """More events of it (a place read twice counts once; a time None: not known).

        (A binlog change sent again before its transaction's END was read has no time.)
        """
        self.places.update(places)
        if low is not None:
            self.low = low if self.low is None else min(self.low, low)
        if high is not None:
            self.high = high if self.high is None else max(self.high, high)

    def to_json(self) -> list[Any]:
        """``["1-3,5", "<low>", "<high>"]`` (null: no time known)."""
        times = [None if ts is None else str(ts) for ts in (self.low, self.high)]
        return [numbers_to_ranges(sorted(self.places)), *times]

    @classmethod
    def from_json(cls, data: list[Any]) -> Seen:
        """Read :meth:`to_json`'s form."""
        low, high = (None if text is None else Hlc.parse(text) for text in data[1:3])
        return cls(set(ranges_to_numbers(data[0])), low, high)


class SeenEvents(dict[str, Seen]):
    """What was read of each transaction, by id, until it is passed (or known to be)."""

    def add(self, tx_id: str, places: Iterable[int], low: Hlc | None, high: Hlc | None) -> None:
        """Events of a transaction read from the data topics."""
        self.setdefault(tx_id, Seen()).add(places, low, high)

    def forget(self, top: Hlc, waiting: Container[str]) -> None:
        """Forget the transactions read wholly at or below ``top`` whose END no one waits for."""
        for tx_id in [t for t, s in self.items() if s.high is not None and s.high <= top]:
            if tx_id not in waiting:
                del self[tx_id]


@dataclass
class Ended:
    """One transaction's END event (the last read of it): its events in the followed tables.

    ``resent``: Debezium sent the transaction again (its BEGIN or END was read twice: the
    connector restarted inside it or after it). A re-sent END counts only the events sent
    after the restart, so its count alone cannot tell that the transaction was read whole:
    it is complete once that many were read *and* every data partition was read up to where
    it ended when the END was read (``ends``). ``ends`` is also taken when a transaction is
    found waiting at the head of the log: read past them and still incomplete, it is stuck.
    """

    id: str
    events: int
    time: Hlc  # the END's own time (Debezium's ts_ms): no event of it is below
    offset: int  # where a resume reads the transaction topic again: its first BEGIN read
    # (else its END), so what a restart sent again of it is read again and it is re-sent again
    resent: bool = False
    ends: dict[SourcePartition, int] | None = None  # the data partitions' ends, when taken
    commit: Hlc = ZERO  # its time, raised to the commit before it's: see :meth:`commit_times`
    settled: bool = False  # by a new snapshot (``resnapshots.py``): complete once read to ends


class Begun(NamedTuple):
    """A transaction whose BEGIN was read and its END not yet."""

    begins: int  # how many times its BEGIN was read (more than once: sent again)
    time: Hlc  # its commit's millisecond
    first: int  # the offset of its first BEGIN: a resume reads the topic again from there
    offset: int  # the offset of its last BEGIN


class TransactionLog:
    """One transaction topic's transactions, and the resolved time they allow."""

    def __init__(
        self,
        collections: Mapping[str, str],
        *,
        resolved: Hlc = ZERO,
        offset: int | None = None,
        seen: Mapping[str, Seen] | None = None,
        horizon: Mapping[SourcePartition, int] | None = None,
        started: bool = False,
        open_: Mapping[str, Begun] | None = None,
        passed: Mapping[str, Hlc] | None = None,
    ) -> None:
        """A log of the tables ``collections`` names.

        ``collections``: Debezium's name of each followed table (``public.orders``) -> its
        data topic. The rest restores :meth:`record`'s state.
        """
        self.collections = dict(collections)
        self._resolved = resolved
        self._passed = resolved  # the highest time of the transactions passed
        self.offset = offset  # the next offset to read of the transaction topic
        self._ended: deque[Ended] = deque()  # read, not yet passed, in commit order
        self._waiting: dict[str, Ended] = {}  # the same, by id
        self._seen = SeenEvents(seen or {})
        self.horizon: dict[SourcePartition, int] | None = None if horizon is None else {**horizon}
        self.started = started or horizon is not None
        self._open: dict[str, Begun] = dict(open_ or {})  # BEGINs read without their END
        # the transactions passed lately (their END's time), to know their END if sent again
        self._lately = Passed(passed)
        self._last_commit = self._lately.latest or ZERO  # the commit time of the latest END read
        self.resends = 0  # BEGIN/END events read again (the connector restarted)
        self.resnapshots = Resnapshots()  # which transactions a new snapshot settles

    @property
    def topics(self) -> list[str]:
        """The data topics the log resolves."""
        return sorted(set(self.collections.values()))

    def began(self, tx_id: str, time: Hlc, offset: int) -> None:
        """A BEGIN event, at ``offset`` of the transaction topic."""
        self.offset = offset + 1
        begun = self._open.get(tx_id)
        if begun is not None and offset <= begun.offset:
            return  # read before a resume of ours: counted then
        waiting = self._waiting.get(tx_id)
        if waiting is not None:
            waiting.resent, waiting.ends = True, None  # its END will come again
        elif begun is not None:
            self._open[tx_id] = Begun(begun.begins + 1, time, begun.first, offset)
        elif tx_id not in self._lately:  # by id: a binlog's BEGIN carries an older event's time
            self._open[tx_id] = Begun(1, time, offset, offset)
            return
        self.resends += 1

    def ended(self, tx_id: str, counts: Mapping[str, int], time: Hlc, offset: int) -> None:
        """An END event, at ``offset`` of the transaction topic (read in order)."""
        self.offset = offset + 1
        events = sum(n for name, n in counts.items() if name in self.collections)
        begun = self._open.pop(tx_id, None)
        resent = begun is not None and begun.begins > 1
        waiting = self._waiting.get(tx_id)
        first = offset if begun is None else begun.first  # where a resume reads it again
        if waiting is not None:  # ENDed before: the most it ever counted is its whole
            waiting.events = max(waiting.events, events)
            waiting.resent, waiting.ends = True, None
        elif self._lately.again(tx_id, time):
            pass  # complete already: what is sent again of it is dropped as re-sent
        elif resent:
            self._wait(Ended(tx_id, events, time, first, resent))
        else:  # sent once: every transaction before it in commit order was sent before it
            self.resends += self.cut([t for t, b in self._open.items() if b.offset < offset])
            self._wait(Ended(tx_id, events, time, first))
            return
        self.resends += 1

    def cut(self, ids: list[str]) -> int:
        """BEGINs read without their END (``ids``) that will never END; returns how many.

        Debezium sends one transaction at a time, BEGIN to END, in commit order, and after a
        restart sends again from where it resumed, before anything new. A transaction begun
        and not ended when a transaction never seen before ENDs lost its END when the
        connector was killed, and the connector resumed after its last change, so its END
        never comes: it waits as one sent again, with no count, until every data partition
        was read up to where it ended once this was seen (all of it was sent before that).
        Only BEGINs before that END: a resume reads the topic again from the first BEGIN not
        passed, and the BEGINs its record kept may lie after that END. (A new snapshot after
        them cuts them too: ``resnapshots.py``.)
        """
        for cut in ids:
            begun = self._open.pop(cut)
            self._wait(Ended(cut, 0, begun.time, begun.first, resent=True))
        return len(ids)

    def skipped(self, offset: int) -> None:
        """A record of the transaction topic that is not a transaction event (unreadable)."""
        self.offset = offset + 1

    def saw(self, tx_id: str, places: Iterable[int], low: Hlc | None, high: Hlc | None) -> None:
        """Events of a transaction read from the data topics."""
        self._seen.add(tx_id, places, low, high)

    def commit_times(self) -> dict[str, Hlc]:
        """The commit time of each transaction read and not passed, and of those passed lately.

        A binlog change's commit time (``Change.order``): its END's time, raised to the commit
        time of the END before it in the topic (see the module's **Commit times**); the binlog
        positions below the second (the logical part) keep them apart.
        """
        return {**self._lately.times, **{entry.id: entry.commit for entry in self._ended}}

    def needs_horizon(self) -> bool:
        """True when the first END was just read: the snapshot's end is to be fixed now."""
        return not self.started and bool(self._ended)

    def set_horizon(self, ends: Mapping[SourcePartition, int]) -> None:
        """The data partitions' end offsets as the first END was read (see the module)."""
        self.horizon = dict(ends)
        self.started = True

    def needs_ends(self) -> bool:
        """Whether a re-sent transaction waits for the data partitions' ends (:class:`Ended`)."""
        return any(e.ends is None for e in self._ended if e.resent)

    def take_ends(self, ends: Mapping[SourcePartition, int]) -> None:
        """The data partitions' end offsets now, for the re-sent transactions waiting for them."""
        for entry in self._ended:
            if entry.ends is None and entry.resent:
                entry.ends = dict(ends)

    def head(self) -> Ended | None:
        """The first transaction not passed (its ``ends``, set by the caller: :meth:`stuck`)."""
        return self._ended[0] if self._ended else None

    def unpassed(self) -> tuple[list[Ended], list[str]]:
        """The ENDed transactions not passed (in commit order), and the BEGINs without END."""
        return list(self._ended), list(self._open)

    def resolved(self, read: Mapping[SourcePartition, int | None]) -> Hlc:
        """The resolved time now, with the data partitions read up to ``read`` (next offsets).

        Passes the complete transactions at the head of the log (see the module).
        """
        if self.horizon is not None:
            if not _reached(read, self.horizon):
                return self._resolved
            self.horizon = None
        if not self.started:
            return self._resolved
        top = self._passed
        capped = None
        while self._ended:
            head = self._ended[0]
            seen = self._seen.get(head.id)
            if not self._complete(head, read):
                capped = head.time if seen is None or seen.low is None else min(head.time, seen.low)
                break
            self._ended.popleft()  # passed: remembered for a while, should its END come again
            del self._waiting[head.id]
            self._lately.add(head.id, head.commit)
            self._seen.pop(head.id, None)
            top = max(top, head.time, seen.high if seen is not None and seen.high else ZERO)
        self._passed = top
        if capped is not None:  # what is known of the first incomplete one stays unresolved
            top = min(top, just_below(capped))
        self._resolved = max(self._resolved, top)
        self._seen.forget(top, self._waiting)
        return self._resolved

    def complete_through(self, time: Hlc, read: Mapping[SourcePartition, int | None]) -> bool:
        """Whether every transaction ENDed at or below ``time`` was read whole.

        ``read`` as for :meth:`resolved`. Not ``resolved() >= time``: a later transaction still
        waiting caps what resolves at the last one passed, though none of its events lies at or
        below ``time`` (the first incomplete one ENDs above it).
        """
        self.resolved(read)
        return self.horizon is None and (not self._ended or self._ended[0].time > time)

    def in_flight(self) -> bool:
        """Whether an ENDed transaction waits for events, or events wait for their END."""
        return bool(self._ended) or bool(self._seen)

    def waiting_for(self, entry: Ended | None = None) -> str | None:
        """The first transaction still incomplete (or ``entry``), for logs: ``id (n of m ...)``."""
        head = entry or (self._ended[0] if self._ended else None)
        if head is None:
            return None
        seen = self._seen.get(head.id)
        again = ", sent again" if head.resent else ""
        return f"{head.id} ({len(seen.places) if seen else 0} of {head.events} events read{again})"

    def stuck(self, read: Mapping[SourcePartition, int | None]) -> str | None:
        """The first transaction, if it cannot complete: :meth:`waiting_for`'s text, else None.

        Stuck: every data partition was read past where it ended when the caller took the
        first transaction's ``ends`` (:meth:`head`), and events of it are still missing
        (lost upstream, or a count that does not match what was written).
        """
        head = self._ended[0] if self._ended else None
        if head is None or head.ends is None or not _reached(read, head.ends):
            return None
        return None if self._complete(head, read) else self.waiting_for()

    def restart_offset(self) -> int | None:
        """Where a resume reads the topic again: its first BEGIN not passed (open: the record)."""
        return min(e.offset for e in self._ended) if self._ended else self.offset

    def record(self, *, with_seen: bool = True) -> dict[str, Any]:
        """The state a resume needs (``with_seen``: False when data offsets are given up).

        Its form is :class:`.records.TransactionLogRecord`.
        """
        return TransactionLogRecord(
            offset=self.restart_offset(),
            resolved=self._resolved,
            seen={t: s.to_json() for t, s in sorted(self._seen.items())} if with_seen else {},
            horizon=None
            if self.horizon is None
            else {f"{sp.topic}/{sp.partition}": o for sp, o in sorted(self.horizon.items())},
            started=self.started,
            open={t: tuple(b) for t, b in sorted(self._open.items())},
            passed=dict(self._lately.times),  # in the order passed
        ).model_dump(mode="json")

    @classmethod
    def restore(cls, collections: Mapping[str, str], record: Mapping[str, Any]) -> TransactionLog:
        """A log as :meth:`record` left it."""
        return cls(collections, **restored(record))

    def _complete(self, head: Ended, read: Mapping[SourcePartition, int | None]) -> bool:
        """Whether every event of ``head`` was read (see :class:`Ended`)."""
        if head.commit.wall + MILLISECOND - 1 <= self._resolved.wall:
            return True  # all of it at or below the resolved time (a cursor): dropped unread
        # (by its commit time, at or above its own: one a restart cut has only its BEGIN's,
        # which for a binlog is its first statement's, below its commit)
        seen = self._seen.get(head.id)  # settled by a new snapshot: whatever its count
        if not head.settled and len(seen.places if seen is not None else ()) < head.events:
            return False
        waits = head.resent or head.settled  # for every partition read up to its ends
        return not waits or (head.ends is not None and _reached(read, head.ends))

    def _wait(self, entry: Ended) -> None:
        entry.commit = self._last_commit = max(entry.time, self._last_commit)
        self._ended.append(entry)
        self._waiting[entry.id] = entry


def _reached(
    read: Mapping[SourcePartition, int | None], ends: Mapping[SourcePartition, int]
) -> bool:
    """Whether every partition of ``ends`` was read up to its end offset there."""
    return all((read.get(sp) or 0) >= end for sp, end in ends.items())


def restored(record: Mapping[str, Any]) -> dict[str, Any]:
    """A log's checkpoint record (:meth:`TransactionLog.record`) read back: its state.

    The keyword arguments :class:`TransactionLog` restores it from; a record that is not one
    is refused as :func:`~.ledger.read_part` refuses a part of the checkpoint record.
    """
    state = read_part(TransactionLogRecord, record, "checkpoint's transaction log")
    horizon = state.horizon
    return {
        "resolved": state.resolved,
        "offset": state.offset,
        "seen": {
            t: Seen(set(ranges_to_numbers(places)), low, high)
            for t, (places, low, high) in state.seen.items()
        },
        "horizon": None
        if horizon is None
        else {_partition(name): o for name, o in horizon.items()},
        "started": state.started,
        "open_": {t: Begun(*b) for t, b in state.open.items()},
        "passed": dict(state.passed),
    }


def _partition(name: str) -> SourcePartition:
    topic, _, number = name.rpartition("/")
    return SourcePartition(topic, int(number))
