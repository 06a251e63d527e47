"""The transactions a transaction log passed lately, to know their END should it come again.

A connector that restarts sends again the BEGIN and END events of the transactions after
its last flushed offset, some of which the log already passed. An END read again must never
stand for a new transaction: a transaction passed within :data:`RECENT` of commit time of the
latest one is known by its id (a commit's time may come out a little below an earlier
commit's), an older END only by its time (commits END in commit-time order). What is kept
here goes into the checkpoint record, oldest first, and gives the binlog changes of those
transactions their commit times still.
"""

from __future__ import annotations

from collections.abc import Mapping

from schemas.hlc import Hlc

MILLISECOND = 1_000_000  # an END's time is its commit time in milliseconds
# How long (commit time, ns) a passed transaction is known by id: a commit's time may come out
# a little below an earlier commit's (PostgreSQL takes it before writing the commit record; a
# binlog's END time is in whole seconds, its COMMIT statement's start), so only an END older
# than this behind the latest passed one is surely one sent again
RECENT = 2_000 * MILLISECOND


class Passed:
    """The transactions passed lately, by id, with their commit times (see the module)."""

    def __init__(self, passed: Mapping[str, Hlc] | None = None) -> None:
        self.times: dict[str, Hlc] = dict(passed or {})  # in the order passed
        self.latest = max(self.times.values(), default=None)  # the latest END passed

    def __contains__(self, tx_id: object) -> bool:
        return tx_id in self.times

    def again(self, tx_id: str, time: Hlc) -> bool:
        """Whether the transaction was passed already (its END read again).

        The transactions passed within ``RECENT`` of the latest one are known by id; an END
        older than that (commits END in commit-time order) can only be one sent again.
        """
        if tx_id in self.times:
            return True
        return self.latest is not None and time.wall < self.latest.wall - RECENT

    def add(self, tx_id: str, commit: Hlc) -> None:
        """A transaction just passed: remembered for a while, the oldest forgotten.

        Passed in commit order, so the oldest are first in ``times``.
        """
        self.times[tx_id] = commit
        self.latest = commit if self.latest is None else max(self.latest, commit)
        floor = self.latest.wall - RECENT
        stale = []
        for known, time in self.times.items():
            if time.wall >= floor:
                break
            stale.append(known)
        for known in stale:
            del self.times[known]
