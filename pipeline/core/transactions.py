"""Resolved times for Debezium sources, from its transaction metadata (pure, on the driver).

Debezium writes no resolved markers. With ``provide.transaction.metadata=true`` it writes,
on one transaction topic and in commit order, an END event per transaction with its event
count per table (``data_collections``), and every change carries its transaction's id and
its place in it (``total_order``). A :class:`TransactionLog` (one per transaction topic)
puts the two together:

* :meth:`~TransactionLog.ended`: the END events, in the topic's order (the commit order);
* :meth:`~TransactionLog.saw`: the changes the executors read from the data topics (per
  transaction: which ``total_order`` places, their lowest and highest time), from each
  batch's summaries;
* :meth:`~TransactionLog.resolved`: the time R below which nothing is unread. A transaction
  is *complete* once every event it counts for the followed tables was read; R is the highest
  time of the longest complete prefix of the ENDed transactions, kept below every time known
  of the first incomplete one (its END's time and the changes of it already read), and it
  never goes backwards. So a marker at R never passes a transaction one of whose events is
  still unread, whichever partition holds it back.

A transaction whose whole millisecond lies at or below the resolved time (a ``cursor`` the
changefeed started at) is passed without counting: its changes are dropped as at or below
the floor, so they are never counted.

What it rests on: the source commits in the order the transaction topic lists its
transactions, and a later commit does not carry an earlier commit time (PostgreSQL takes the
commit time just before writing the commit record; a later transaction with an earlier time
than one already resolved would be caught only as far as its END or its changes are known).

**Debezium's own snapshot** (``op: r``) carries no transaction. Its records precede the
stream on every partition, so when the first END is read the data partitions' end offsets
are taken as a *horizon*: R stays at zero until every partition was read up to it.

The state a resume needs (:meth:`~TransactionLog.record`): where to read the transaction
topic again (the first END not yet passed), what was read of the transactions in flight,
and the horizon while it stands. Without the in-flight part (a checkpoint that gave its
offsets up for its byte budget) the data topics are read from their start again, so
counting starts over and stays exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from schemas.hlc import ZERO, Hlc

from .checkpoint import numbers_to_ranges, ranges_to_numbers
from .frontier import SourcePartition

LOGICAL_TOP = 9_999_999_999  # the highest logical part an HLC carries on the wire
MILLISECOND = 1_000_000  # an END's time is its commit time in milliseconds: its events lie
# within the millisecond that follows


def just_below(ts: Hlc) -> Hlc:
    """The highest time below ``ts``."""
    if ts.logical:
        return Hlc(ts.wall, ts.logical - 1)
    return Hlc(ts.wall - 1, LOGICAL_TOP) if ts.wall else ZERO


@dataclass
class Seen:
    """What was read of one transaction: its events' places, lowest and highest time."""

    orders: set[int] = field(default_factory=set)
    low: Hlc | None = None
    high: Hlc | None = None

    def add(self, orders: Iterable[int], low: Hlc, high: Hlc) -> None:
        """More events of it (a place read twice counts once)."""
        self.orders.update(orders)
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def to_json(self) -> list[Any]:
        """``["1-3,5", "<low>", "<high>"]``."""
        return [numbers_to_ranges(sorted(self.orders)), str(self.low), str(self.high)]

    @classmethod
    def from_json(cls, data: list[Any]) -> Seen:
        """Read :meth:`to_json`'s form."""
        return cls(set(ranges_to_numbers(data[0])), Hlc.parse(data[1]), Hlc.parse(data[2]))


@dataclass(frozen=True)
class Ended:
    """One END event: the transaction, its events in the followed tables, its time."""

    id: str
    events: int
    time: Hlc  # the END's own time (Debezium's ts_ms): no event of it is below
    offset: int  # where it lies in the transaction topic


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
    ) -> None:
        """A log of the tables ``collections`` names.

        ``collections``: Debezium's name of each followed table (``public.orders``) -> its
        data topic. The rest restores :meth:`record`'s state.
        """
        self.collections = dict(collections)
        self._resolved = resolved
        self._passed = resolved  # the highest time of the transactions passed
        self.offset = offset  # the next offset to read of the transaction topic
        self._ended: list[Ended] = []  # read, not yet passed, in commit order
        self._seen: dict[str, Seen] = dict(seen or {})
        self.horizon: dict[SourcePartition, int] | None = None if horizon is None else {**horizon}
        self.started = started or horizon is not None

    @property
    def topics(self) -> list[str]:
        """The data topics the log resolves."""
        return sorted(set(self.collections.values()))

    def ended(self, tx_id: str, counts: Mapping[str, int], time: Hlc, offset: int) -> None:
        """An END event, at ``offset`` of the transaction topic (read in order)."""
        events = sum(n for name, n in counts.items() if name in self.collections)
        self._ended.append(Ended(tx_id, events, time, offset))
        self.offset = offset + 1

    def skipped(self, offset: int) -> None:
        """A record of the transaction topic that is not an END (BEGIN, or unreadable)."""
        self.offset = offset + 1

    def saw(self, tx_id: str, orders: Iterable[int], low: Hlc, high: Hlc) -> None:
        """Events of a transaction read from the data topics."""
        self._seen.setdefault(tx_id, Seen()).add(orders, low, high)

    def needs_horizon(self) -> bool:
        """True when the first END was just read: the snapshot's end is to be fixed now."""
        return not self.started and bool(self._ended)

    def set_horizon(self, ends: Mapping[SourcePartition, int]) -> None:
        """The data partitions' end offsets as the first END was read (see the module)."""
        self.horizon = dict(ends)
        self.started = True

    def resolved(self, read: Mapping[SourcePartition, int | None]) -> Hlc:
        """The resolved time now, with the data partitions read up to ``read`` (next offsets).

        Passes the complete transactions at the head of the log (see the module).
        """
        if self.horizon is not None:
            if any((read.get(sp) or 0) < end for sp, end in self.horizon.items()):
                return self._resolved
            self.horizon = None
        if not self.started:
            return self._resolved
        top = self._passed
        capped = None
        while self._ended:
            head = self._ended[0]
            seen = self._seen.get(head.id)
            below = head.time.wall + MILLISECOND - 1 <= self._resolved.wall  # all at or below
            if not below and len(seen.orders if seen is not None else ()) < head.events:
                capped = head.time if seen is None or seen.low is None else min(head.time, seen.low)
                break
            self._ended.pop(0)
            self._seen.pop(head.id, None)
            top = max(top, head.time, seen.high if seen is not None and seen.high else ZERO)
        self._passed = top
        if capped is not None:  # what is known of the first incomplete one stays unresolved
            top = min(top, just_below(capped))
        self._resolved = max(self._resolved, top)
        waiting = {e.id for e in self._ended}
        for tx_id in [t for t, s in self._seen.items() if s.high is not None and s.high <= top]:
            if tx_id not in waiting:
                del self._seen[tx_id]
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

    def waiting_for(self) -> str | None:
        """The first transaction still incomplete, for logs: ``id (n of m events read)``."""
        if not self._ended:
            return None
        head = self._ended[0]
        seen = self._seen.get(head.id)
        return f"{head.id} ({len(seen.orders) if seen else 0} of {head.events} events read)"

    def restart_offset(self) -> int | None:
        """Where a resume reads the transaction topic again: the first END not passed."""
        return self._ended[0].offset if self._ended else self.offset

    def record(self, *, with_seen: bool = True) -> dict[str, Any]:
        """The state a resume needs (``with_seen``: False when data offsets are given up)."""
        return {
            "offset": self.restart_offset(),
            "resolved": str(self._resolved),
            "seen": {t: s.to_json() for t, s in sorted(self._seen.items())} if with_seen else {},
            "horizon": None
            if self.horizon is None
            else {f"{sp.topic}/{sp.partition}": o for sp, o in sorted(self.horizon.items())},
            "started": self.started,
        }

    @classmethod
    def restore(cls, collections: Mapping[str, str], record: Mapping[str, Any]) -> TransactionLog:
        """A log as :meth:`record` left it."""
        horizon = record.get("horizon")
        return cls(
            collections,
            resolved=Hlc.parse(record["resolved"]),
            offset=record.get("offset"),
            seen={t: Seen.from_json(s) for t, s in (record.get("seen") or {}).items()},
            horizon=None
            if horizon is None
            else {_partition(name): int(o) for name, o in horizon.items()},
            started=bool(record.get("started")),
        )


def _partition(name: str) -> SourcePartition:
    topic, _, number = name.rpartition("/")
    return SourcePartition(topic, int(number))
