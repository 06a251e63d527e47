"""Debezium's transaction topics and data partitions as the driver reads them from Kafka.

The transaction feed's reading, apart from its rule: each transaction topic's BEGIN and END
events after its log's offset, up to the topic's end now, into the log (a topic trimmed past
that offset, or one of several partitions, stops the changefeed: no marker could be trusted
then); the data partitions' end offsets, where the rule needs them; and the transaction
places of a data partition's range, read again as the executors read them (what a killed run
committed after its checkpoint). One consumer does all of it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import TopicPartition

from schemas.errors import SourceError
from schemas.hlc import Hlc

from ..batch import PartitionSeen, count_transaction, range_reader, read_range, watermarks
from ..ledger import SourcePartition
from ..sources import Adapter, BadRecord, Change, WireReader, commit_time_of, transaction_event
from .new_tables import NewTables
from .transactions import TransactionLog

log = logging.getLogger(__name__)


class TransactionReader:
    """The reader of a feed's transaction topics and data partitions (see the module)."""

    def __init__(
        self,
        client: Mapping[str, Any],
        wires: Mapping[str, WireReader],
        new: Mapping[str, NewTables] | None = None,
    ) -> None:
        self.consumer = range_reader(client, "highwater-transactions")
        self._wires = dict(wires)  # a transaction topic in Avro -> its reader
        self._new = new or {}  # a whole database's tables the ENDs may name first
        self._checked: set[str] = set()

    def read(self, topic: str, tx_log: TransactionLog) -> None:
        """The topic's records after the log's offset, up to its end now."""
        if not self._there(topic):
            return
        sp = SourcePartition(topic, 0)
        low, high = watermarks(self.consumer, TopicPartition(topic, 0), 10)
        if tx_log.offset is not None and low > tx_log.offset:
            raise SourceError(
                f"transaction topic {topic!r} was trimmed to offset {low}, past offset "
                f"{tx_log.offset} where this changefeed reads it again: the transactions in "
                "between cannot be counted, so no marker could be trusted (keep the "
                "transaction topic's retention above the changefeed's lag)"
            )
        start = max(low, tx_log.offset or 0)
        for message in read_range(self.consumer, sp, start, high):
            try:
                event = transaction_event(message.value(), self._wires.get(topic))
            except BadRecord as exc:
                log.warning("%s@%d: not a transaction event: %s", sp, message.offset(), exc)
                tx_log.skipped(message.offset())
                continue
            if event.status == "END":
                if topic in self._new:
                    self._new[topic].meet(event.counts, tx_log)
                tx_log.ended(event.id, event.counts, event.time, message.offset())
            else:
                tx_log.began(event.id, event.time, message.offset())

    def _there(self, topic: str) -> bool:
        """Whether the topic is there to read; one with several partitions is an error."""
        if topic in self._checked:
            return True
        found = self.consumer.list_topics(topic, timeout=10).topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            return False  # not created yet: the connector has not committed a transaction
        if len(found.partitions) > 1:
            raise SourceError(
                f"transaction topic {topic!r} has {len(found.partitions)} partitions: its order "
                "is the commit order only on one (give Debezium's transaction topic one "
                "partition, e.g. a topic.creation group with partitions=1)"
            )
        self._checked.add(topic)
        return True

    def ends(self, partitions: list[SourcePartition]) -> dict[SourcePartition, int]:
        """The partitions' end offsets now."""
        ends = {}
        for sp in partitions:
            ends[sp] = watermarks(self.consumer, TopicPartition(sp.topic, sp.partition), 10)[1]
        return ends

    def counted(
        self,
        sp: SourcePartition,
        start: int | None,
        stop: int,
        *,
        source: Adapter,
        commits: Mapping[str, Mapping[str, Hlc]],
    ) -> PartitionSeen:
        """The transaction places of ``sp`` from ``start`` (None: its first) up to ``stop``."""
        low = watermarks(self.consumer, TopicPartition(sp.topic, sp.partition), 10)[0]
        if start is not None and low > start:
            raise SourceError(
                f"{sp} was trimmed to offset {low}, past offset {start} where the changes the run "
                "before wrote after its checkpoint begin: their transactions cannot be counted, "
                "so no marker could be trusted"
            )
        seen = PartitionSeen(sp, stop, None)
        times = commits.get(sp.topic, {})
        for message in read_range(self.consumer, sp, max(low, start or 0), stop):
            try:
                item = source.decode(message.key(), message.value())
            except Exception as exc:  # counted for its transaction, as the executors do
                count_transaction(seen, exc)
                continue
            if isinstance(item, Change) and item.tx is not None:
                seen.saw(item.tx, commit_time_of(item, times))
        return seen

    def close(self) -> None:
        """Release the consumer."""
        self.consumer.close()
