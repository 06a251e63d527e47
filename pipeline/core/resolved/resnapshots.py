"""A new snapshot of the source settles the transactions ENDed before it (``transactions.py``).

Kafka Connect killed before it flushed an offset starts Debezium over: a new snapshot (``op: r``
reads of every table it captures), then a stream from the snapshot's point. Events of a
transaction the old run ENDed that were still in flight when it died (its END delivered, some
of its changes not) never come: the new stream begins after that transaction, and its effects
are in the snapshot. Such a transaction would wait for them forever, and the markers with it.
What tells it, on the driver:

* **marks**: each transaction read and not passed (ENDed, or a BEGIN without its END yet) is
  marked, at the first :func:`look` after it was read, with the data partitions' end offsets
  then (``reader.ends``): whatever lies at or beyond them there was written after its BEGIN
  or END was read;
* **snapshot reads**: each batch's summary says where its last snapshot read lies on each
  partition (``PartitionSeen.reread``, from the Python loop, which reads every PostgreSQL and
  binlog snapshot read);
* **the rule**: a read at offset ``o`` of partition ``p`` with ``o >= mark[p]`` was written
  after the transaction's BEGIN or END could be read, so it was sent after them (below), and
  its snapshot began after the transaction committed (a Debezium task snapshots, then
  streams; the transaction was streamed, and PostgreSQL and binlogs stream a transaction
  only once it committed): it holds the transaction's effects, and the stream after it
  begins past the transaction, whose missing events no restart sends again. The
  transaction is *settled*: complete once every data partition was read up to the end
  offsets taken when the read is noticed, whatever its count (every event the old run
  delivered is in the partitions before the new run's first read, so below those ends). Its
  events read still count as usual; R passes it once it is complete, and it is no longer
  reported stuck.

A transaction of the new stream is never settled by the snapshot it follows: its BEGIN and END
are written after every read of that snapshot, so its mark lies beyond them.

Why the partitions' end offsets, not how far the changefeed read them: a changefeed that lags
reads old records well after the transaction topic's newest END, so a read it meets beyond
where it had read when the END came may be one written long before (an older snapshot, the
initial one): a transaction marked so would pass on a snapshot that does not hold it, its
events still to come. Nor the offsets the next batch reads to: ``max_offsets_per_trigger``
and ``available_now`` end a batch short of the partitions' ends, an END read while a batch is
planned or waits for its rests (``commit_times``, ``await_commits``) comes after that batch's
ranges were fixed, and a partition whose batch stopped at a deferral or a bad record ends
short of its range. The ends are one ``reader.ends`` call per :func:`look` that finds a
transaction not marked yet (while transactions stream, about one per batch and per quiet
second's advance), the same ends then serving a settlement.

What it rests on, beyond what ``transactions.py`` rests on: what Connect's producer sent
before an END is in the data partitions once that END can be read (the re-sent rule of
``transactions.py`` rests on it too); a snapshot read comes from a snapshot of every table
(an incremental snapshot's reads, ``source.snapshot: incremental``, interleave with the
stream and would settle a transaction on the evidence of one chunk); and the marks are not
in the checkpoint: a resumed changefeed marks the transactions it reads again at its first
look, later than they were (a snapshot written while it was down settles nothing then; such
a transaction stays stuck, as before this rule).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import TYPE_CHECKING

from ..ledger import SourcePartition

if TYPE_CHECKING:
    from .transactions import TransactionLog

log = logging.getLogger(__name__)

Ends = Mapping[SourcePartition, int]


class Resnapshots:
    """One transaction topic's marks, and the snapshot reads reported since the last look."""

    def __init__(self) -> None:
        self.marks: dict[str, Ends] = {}  # transaction id -> the partitions' ends once read
        self.reads: dict[SourcePartition, int] = {}  # the last snapshot read per partition

    def saw(self, partition: SourcePartition, offset: int) -> None:
        """A batch's last snapshot read on ``partition`` (``PartitionSeen.reread``)."""
        self.reads[partition] = max(offset, self.reads.get(partition, offset))

    def covered(self, ids: Iterable[str]) -> tuple[list[str], tuple[SourcePartition, int] | None]:
        """Those of ``ids`` a read reported since the last look lies at or beyond the mark of.

        With the read that settles the first of them. The reads are forgotten: a mark taken
        after a read lies beyond it, so the read settles nothing more later.
        """
        reads, self.reads = self.reads, {}
        settled: list[str] = []
        first: tuple[SourcePartition, int] | None = None
        for tx_id in ids if reads else ():
            mark = self.marks.get(tx_id, {})
            past = [(sp, o) for sp, o in reads.items() if sp in mark and o >= mark[sp]]
            if past:
                settled.append(tx_id)
                first = first or past[0]
        return settled, first

    def mark(self, ids: Iterable[str], ends: Callable[[], Ends]) -> None:
        """Mark ``ids`` (every transaction read and not passed) not marked yet; forget the rest.

        ``ends``: the data partitions' end offsets now, asked for only if one is new.
        """
        marks = self.marks
        self.marks = {tx_id: marks[tx_id] if tx_id in marks else ends() for tx_id in ids}


def look(topic: str, tx_log: TransactionLog, take_ends: Callable[[], Ends]) -> bool:
    """Settle what the snapshot reads reported since the last look settle, then mark the new.

    After the transaction topic was read and R computed (``TransactionFeed.advance``).
    ``take_ends``: the data partitions' end offsets now (taken once here, if needed). Returns
    whether the first transaction waiting was settled (no longer to be reported stuck).
    """
    ends = cache(take_ends)
    snapshots = tx_log.resnapshots
    ended, begun = tx_log.unpassed()
    settling, read = snapshots.covered([*(e.id for e in ended if not e.settled), *begun])
    if settling:
        ids = set(settling)
        tx_log.cut([tx_id for tx_id in begun if tx_id in ids])  # their END never comes
        ended, begun = tx_log.unpassed()
        settled = [entry for entry in ended if entry.id in ids]
        for entry in settled:
            entry.settled, entry.ends = True, dict(ends())
        log.info(
            "%s: the source was snapshotted again after %s were read (a read of the new "
            "snapshot at %s@%d): each is complete once every data partition is read up to %s, "
            "whatever its count",
            topic,
            ", ".join(str(tx_log.waiting_for(entry)) for entry in settled),
            *(read or ("?", -1)),
            ", ".join(f"{sp}@{o}" for sp, o in sorted(ends().items())),
        )
    snapshots.mark([*(entry.id for entry in ended), *begun], ends)
    return bool(settling) and ended[0].settled
