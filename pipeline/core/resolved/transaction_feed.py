"""Debezium's transaction topics, read on the driver, turned into resolved times.

One :class:`~.transactions.TransactionLog` per transaction topic (``sources[i].transactions``)
holds the rule; this module feeds it (reading Kafka through ``transaction_reader.py``): the
topic's BEGIN and END events, read up to the topic's end after every batch and once a second
while the sources are quiet, the transaction
places and snapshot reads the executors read (each batch's summaries), and the data
partitions' end offsets where the rule needs them (a transaction the connector sent again; one
that has waited :data:`STUCK_CHECK` seconds; one not marked yet, and a new snapshot's read:
``resnapshots.py``). The END times it read are also the commit times of binlog
changes (MySQL, MariaDB): :meth:`TransactionFeed.commit_times` for a batch's plan, and
:meth:`TransactionFeed.await_commits` for a batch that met a change before its END. What a log
resolves becomes the resolved time of every partition of its data topics in the frontier, so
the coordinator's checkpoints and markers follow it as they follow a native source's markers.
A transaction that waits on and on is watched by ``waits.py``: one that cannot complete is
reported (:attr:`TransactionFeed.stuck`), logged, in the job status' warnings and a gauge.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any

from pipeline.config import ChangefeedConfig
from schemas.errors import SourceError
from schemas.hlc import ZERO, Hlc

from ..batch import BatchAbandoned, BatchPlan, BatchResult, Deferred
from ..ledger import Frontier, SourcePartition
from ..sources import Adapter, WireReader, adapter
from .new_tables import NewTables
from .resnapshots import look
from .transaction_reader import TransactionReader
from .transactions import TransactionLog
from .waits import STUCK_CHECK, Waits

log = logging.getLogger(__name__)

AWAIT_POLL = 0.2  # seconds between reads of the transaction topics while a batch waits for one


def transaction_wires(config: ChangefeedConfig) -> dict[str, WireReader]:
    """Each transaction topic whose sources name a registry -> the reader of its Avro."""
    registries = config.registries
    wires = {
        d.transactions: WireReader.of(d.schema_registry.client_config())
        for d in config.databases
        if d.schema_registry is not None and d.transactions is not None
    }
    return wires | {
        s.transactions: WireReader.of(registries[s.topic])
        for s in config.sources
        if s.transactions is not None and s.topic in registries
    }


class TransactionFeed:
    """The transaction logs of a changefeed's Debezium sources, and their topics' reader."""

    def __init__(
        self,
        client: Mapping[str, Any],
        logs: Mapping[str, TransactionLog],
        partitions: list[SourcePartition],
        *,
        wires: Mapping[str, WireReader] | None = None,
        clock: Callable[[], float] = time.monotonic,
        adapters: Mapping[str, Adapter] | None = None,
        new: Mapping[str, NewTables] | None = None,
    ) -> None:
        self.logs = dict(logs)
        self.new = dict(new or {})  # a whole database's tables met before the run reads them
        for tx, tables in self.new.items():
            tables.restore(self.logs[tx])
        self._adapters = dict(adapters or {})  # each data topic's, for :meth:`recount`
        self._clock = clock
        self.waits = Waits(clock)  # what each log's head waits for, and what is stuck
        self._by_source = {t: log for log in self.logs.values() for t in log.topics}
        self._partitions = {
            tx: [sp for sp in partitions if sp.topic in log.topics] for tx, log in self.logs.items()
        }
        self.reader = TransactionReader(client, wires or {}, self.new)

    @property
    def stuck(self) -> dict[str, str]:
        """Transaction topic -> its stuck transaction (``waits.py``)."""
        return self.waits.stuck

    @classmethod
    def of(
        cls,
        config: ChangefeedConfig,
        client: Mapping[str, Any],
        partitions: list[SourcePartition],
        records: Mapping[str, Mapping[str, Any]],
    ) -> TransactionFeed | None:
        """The feed of ``config``'s transaction topics, each log as ``records`` kept it."""
        topics = config.transaction_topics
        if config.unmarked_sources:
            log.warning(
                "%s: Debezium topics without 'transactions' (the connector's transaction "
                "metadata topic): their rows flow, but no resolved marker can be promised for "
                "them, so the changefeed sends none and its high-water mark stays where it is",
                ", ".join(config.unmarked_sources),
            )
        if not topics:
            return None
        logs = {
            tx: TransactionLog.restore(collections, records[tx])
            if tx in records
            else TransactionLog(collections)
            for tx, collections in topics.items()
        }
        new = {
            d.transactions: NewTables.of(config, d.transactions, records.get(d.transactions, {}))
            for d in config.databases
            if d.transactions is not None
        }
        adapters = {
            s.topic: adapter(s.format, config.registries.get(s.topic))
            for s in config.sources
            if s.transactions is not None
        }
        wires = transaction_wires(config)
        return cls(client, logs, partitions, wires=wires, adapters=adapters, new=new)

    def appeared(self) -> set[str]:
        """The topics of a whole database's tables an END named that the run does not read."""
        return {t for tables in self.new.values() for t in tables.topics()}

    def saw(self, result: BatchResult) -> None:
        """The transaction places a batch read."""
        for seen in result.partitions:
            tx_log = self._by_source.get(seen.partition.topic)
            if tx_log is None:
                continue
            if seen.reread is not None:  # a snapshot's read: a new snapshot settles (look)
                tx_log.resnapshots.saw(seen.partition, seen.reread)
            for tx_id, (orders, low, high) in seen.transactions.items():
                tx_log.saw(tx_id, orders, low, high)

    def recount(self, skipped: Iterable[tuple[SourcePartition, int | None, int]]) -> None:
        """Count the transaction places of ranges a killed run read after its checkpoint.

        Exactly once: a resumed run starts each partition after the rows the run before
        committed (``progress.Claim.overlay``), past the checkpoint the logs were restored
        from. The changes in between are read here, as the executors read them (every
        change of a transaction counts, a re-sent or undecodable one too), so the
        transactions they belong to can complete (and an initial scan's chunks committed
        after it, likewise). (From None: the partition's start.)
        """
        commits = self.commit_times()  # a binlog change's time: its END's, read by now
        for sp, start, stop in skipped:
            tx_log = self._by_source.get(sp.topic)
            if tx_log is None:
                continue
            source = self._adapters[sp.topic]
            seen = self.reader.counted(sp, start, stop, source=source, commits=commits)
            for tx_id, (places, first, last) in seen.transactions.items():
                tx_log.saw(tx_id, places, first, last)
            count = len(seen.transactions)
            log.info("%s: %d transactions counted at offsets %s-%d", sp, count, start, stop)

    def read(self) -> None:
        """Read the transaction topics to their end."""
        for tx, tx_log in self.logs.items():
            self.reader.read(tx, tx_log)

    def commit_times(self) -> dict[str, Mapping[str, Hlc]]:
        """Each data topic -> its transactions' commit times (binlog changes'), read up to now."""
        self.read()
        out: dict[str, Mapping[str, Hlc]] = {}
        for tx_log in self.logs.values():
            times = tx_log.commit_times()  # one map for a log's topics: pickled once
            out.update(dict.fromkeys(tx_log.topics, times))
        return out

    def settle(
        self, plan: BatchPlan, rests: list[Deferred], stopping: Callable[[], bool]
    ) -> tuple[BatchPlan, list[Deferred]]:
        """The rests that wait for a transaction's END, and ``plan`` with the END times."""
        ends = [r for r in rests if r.waits_for]
        return (self.await_commits(plan, ends, stopping), ends) if ends else (plan, [])

    def await_commits(
        self, plan: BatchPlan, rests: list[Deferred], stopping: Callable[[], bool] = lambda: False
    ) -> BatchPlan:
        """``plan`` with the END times of the transactions ``rests`` wait for, once read.

        Reads the transaction topics until every one is there (Debezium writes a
        transaction's END after its changes; after a restart inside it, again). While one
        is missing for long (the connector down mid-transaction), says so every
        :data:`STUCK_CHECK`. A stop asked for meanwhile abandons the batch
        (:class:`~.batch.BatchAbandoned`): not checkpointed, it runs again on resume.
        """
        started = said = self._clock()
        while True:
            if stopping():
                raise BatchAbandoned(
                    f"stopped while waiting for the END of transaction {rests[0].waits_for}"
                )
            commits = self.commit_times()
            missing = [r for r in rests if r.waits_for not in commits.get(r.partition.topic, {})]
            if not missing:
                return replace(plan, commits=commits)
            now = self._clock()
            if now - said >= STUCK_CHECK:
                said = now
                log.warning(
                    "waiting %.0f s for the END of transaction %s (its change at %s@%d has no "
                    "commit time until then; is the connector down?)",
                    now - started,
                    missing[0].waits_for,
                    missing[0].partition,
                    missing[0].start,
                )
            time.sleep(AWAIT_POLL)

    def advance(self, frontier: Frontier) -> bool:
        """Read the transaction topics to their end; True if a resolved time rose."""
        rose = False
        for tx, tx_log in self.logs.items():
            self.reader.read(tx, tx_log)
            partitions = self._partitions[tx]
            if tx_log.needs_horizon():
                tx_log.set_horizon(self.reader.ends(partitions))
            read = {sp: frontier[sp].offset for sp in partitions}
            resolved = tx_log.resolved(read)
            for sp in partitions:
                if resolved > frontier[sp].resolved:
                    frontier.resolve(sp, resolved)
                    rose = True
            if tx_log.needs_ends():  # a re-sent transaction: complete once read to here
                tx_log.take_ends(self.reader.ends(partitions))
            ends = partial(self.reader.ends, partitions)
            if look(tx, tx_log, ends):  # a new snapshot's reads
                self.stuck.pop(tx, None)  # the first settled: logged there, not as "complete"
            self.waits.watch(tx, tx_log, read, ends)
        return rose

    def warnings(self) -> list[str]:
        """The stuck transactions, for the job status."""
        return self.waits.warnings()

    def check_snapshot(self, time: Hlc, frontier: Frontier) -> None:
        """After an initial scan at ``time``: every transaction at or below it was read whole.

        The scan read each data partition up to the end offsets taken just after the
        transaction topic's last END (``statement.last_commit``), and its chunks' places
        were counted here (:meth:`saw`). Should a change of a transaction at or below
        ``time`` lie beyond those offsets (the connector's producer delivered the END before
        it), the snapshot lacks it: the changefeed stops, naming the transaction, rather than
        promise a marker at ``time``. Debezium's own snapshot precedes its first END, so it
        lies before those offsets: they are the log's horizon.
        """
        if time == ZERO:
            return  # no transaction yet: the scan emitted every change as a change
        for tx, tx_log in self.logs.items():
            self.reader.read(tx, tx_log)
            read = {sp: frontier[sp].offset or 0 for sp in self._partitions[tx]}
            if tx_log.needs_horizon():
                tx_log.set_horizon(read)
            if not tx_log.complete_through(time, read):
                raise SourceError(
                    f"the initial scan at {time} is not consistent: transaction "
                    f"{tx_log.waiting_for()} of {tx!r} has changes beyond the end offsets the "
                    "scan read (the connector's producer delivered its END first); create the "
                    "changefeed again to take a new snapshot"
                )

    def quiet(self) -> bool:
        """True when no transaction waits for events (see :meth:`in_flight`)."""
        return not self.in_flight()

    def stuck_topics(self) -> tuple[Mapping[str, str], list[str]]:
        """(the stuck transaction per topic, every transaction topic), for the metrics."""
        return self.stuck, list(self.logs)

    def waiting_for(self) -> dict[str, str]:
        """Per data topic, the transaction its markers wait for now, if any (``waits.py``)."""
        return self.waits.waiting_for(self.logs)

    def in_flight(self) -> bool:
        """Whether a transaction waits for events.

        A high-water mark standing still then means a stalled partition; with none waiting,
        the source is quiet.
        """
        return any(tx_log.in_flight() for tx_log in self.logs.values())

    def records(self) -> dict[str, dict[str, Any]]:
        """Each log's state, for the checkpoint record."""
        records = {tx: tx_log.record() for tx, tx_log in self.logs.items()}
        for tx, tables in self.new.items():  # read by ``NewTables.of`` and ``start.py``
            records[tx]["appeared"] = sorted(tables.names)
        return records

    def close(self) -> None:
        """Release the reader."""
        self.reader.close()
