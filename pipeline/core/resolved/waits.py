"""What Debezium's markers wait for: each transaction topic's first transaction not passed.

:class:`Waits` notices how long the head of each transaction log has waited for its events;
once it has waited :data:`STUCK_CHECK` seconds the data partitions' end offsets are taken
(:meth:`TransactionLog.stuck` needs them), and a transaction read past those ends and still
short of events is **stuck**: logged once, in the job status's warnings and a gauge, until it
completes after all. :meth:`Waits.waiting_for` names, per data topic, the transaction its
markers wait for now (the console's partitions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from ..ledger import SourcePartition
from .transactions import TransactionLog

log = logging.getLogger(__name__)

STUCK_CHECK = 10.0  # seconds a transaction waits before the data partitions' ends are taken


class Waits:
    """Per transaction topic: the head transaction and since when it waits, and what is stuck."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._waiting: dict[str, tuple[str, float]] = {}  # transaction topic -> (head, since)
        self.stuck: dict[str, str] = {}  # transaction topic -> its stuck transaction

    def watch(
        self,
        topic: str,
        tx_log: TransactionLog,
        read: Mapping[SourcePartition, int | None],
        ends: Callable[[], dict[SourcePartition, int]],
    ) -> None:
        """Notice a transaction that waits on and on, and report it once it is stuck."""
        head = tx_log.head()
        now = self._clock()
        if head is None:
            self._waiting.pop(topic, None)
        elif self._waiting.get(topic, ("", 0.0))[0] != head.id:
            self._waiting[topic] = (head.id, now)
        elif head.ends is None and now - self._waiting[topic][1] >= STUCK_CHECK:
            head.ends = ends()
        stuck = tx_log.stuck(read)
        if stuck is not None and self.stuck.get(topic) != stuck:
            log.warning(
                "%s: transaction %s cannot complete: every data partition was read past where "
                "it ended once the transaction had waited %.0f s, and its events are still "
                "missing (lost upstream?); no marker passes it",
                topic,
                stuck,
                STUCK_CHECK,
            )
            self.stuck[topic] = stuck
        elif stuck is None and topic in self.stuck:
            log.info("%s: transaction %s is complete after all", topic, self.stuck.pop(topic))

    def warnings(self) -> list[str]:
        """The stuck transactions, for the job status."""
        return [
            f"transaction {what} of {topic!r} cannot complete: markers wait for it"
            for topic, what in sorted(self.stuck.items())
        ]

    def waiting_for(self, logs: Mapping[str, TransactionLog]) -> dict[str, str]:
        """Per data topic, the transaction its markers wait for now (its log's head), if any."""
        now = self._clock()
        found = {}
        for tx, (_head, since) in self._waiting.items():
            what = logs[tx].waiting_for()
            for topic in logs[tx].topics if what is not None else ():
                found[topic] = f"transaction {what} of {tx!r}, waiting {now - since:.0f} s"
        return found
