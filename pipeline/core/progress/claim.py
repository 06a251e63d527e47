"""Exactly-once delivery, the driver's part: a run's generation and its claim of the partitions.

Under ``delivery: exactly_once`` a task's rows of a batch (each of its source partitions' rows)
are written in one Kafka transaction, each partition's progress record after its rows
(``Pieces.java``), under the transactional id of the task's first partition: every id a task can
use is a partition's, so the claim below fences every task of an earlier run before it reads
anything (step 2 opens all the ids first). A task of an earlier run that opens its id later
reads its first partition, the id's own, before it writes anything: if the claim committed
that partition it finds the newer generation and stops; if not, it fenced the claim's
producer of that id, whose commit then fails and the whole claim is taken again (all ids
opened, all progress read: what that task committed meanwhile included). The progress records
live in the changefeed's compacted progress topic (``checkpoint.progress_topic``), key
``rows/<topic>/<partition>`` in partition :func:`slot` of it.

At a run's start :meth:`Claim.take`, after the driver's own writer fenced earlier instances:

1. gives the run a **generation** one above any seen, committed through that writer (a start
   that lost the race to another is fenced there);
2. opens every partition's transactional id (fencing any task of an earlier run or instance
   still holding one, and aborting its open transaction), reads the committed progress, and
   commits it again with this generation (the *claim*): a task of an older instance that opens
   the id afterwards reads the newer generation and writes nothing. Had a newer instance
   claimed a partition first, this one stops. A task of the run before (its driver not yet
   stopped by the fence) may open an id after the claim did, fencing the claim's producer:
   the claim is then taken again (open, read, commit), unless a newer generation is what
   fenced it.

The committed progress is where each partition resumes (:meth:`Claim.overlay`): at or past
the checkpoint's, so what a killed run committed after its last checkpoint is not written again.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pipeline.config import ChangefeedConfig
from schemas.errors import ConfigError, FencedError, RecordError, SinkError
from schemas.hlc import Hlc
from sinks.admin import ensure_topics, partition_counts, transaction_state
from sinks.compacted import COMPACTED, CompactedTopic
from sinks.producer import AcknowledgedProducer, Record

from ..batch import DeliveryOptions
from ..ledger import Backfill, Frontier, GenerationRecord, ProgressRecord, SourcePartition, decode

log = logging.getLogger(__name__)

GENERATION_KEY = "generation"
CLAIM_ATTEMPTS = 5  # a claim an earlier run's task fenced is taken again (Claim.take)
TAKEN = "another instance of this changefeed took over its writes"


# What a transactional id and a progress record are for: the stream's rows of a partition, or
# an initial scan's chunks of it (a scan runs beside the stream, so the two never fence).
KINDS = ("rows", "scan")


def progress_key(sp: SourcePartition, kind: str = "rows") -> str:
    """The key of a source partition's progress record (``kind``: :data:`KINDS`)."""
    return f"{kind}/{sp.topic}/{sp.partition}"


def slot(key: str, slots: int) -> int:
    """The progress topic's partition of ``key`` (``Progress.slot`` in Java: CRC-32)."""
    return zlib.crc32(key.encode()) % slots


def transactional_prefix(config: ChangefeedConfig) -> str:
    """The prefix of a changefeed's row transactional ids (``Delivery.transactionalId``)."""
    return f"highwater-{config.changefeed_id}"


def transactional_id(config: ChangefeedConfig, sp: SourcePartition, kind: str = "rows") -> str:
    """The transactional id of a source partition's rows (or scan chunks)."""
    return f"{transactional_prefix(config)}-{kind}-{sp.topic}-{sp.partition}"


@dataclass(frozen=True)
class Claim:
    """A run's hold on its partitions' writes: its generation, and what was committed."""

    generation: int
    committed: Mapping[SourcePartition, ProgressRecord]  # the stream's rows
    topic: str
    prefix: str
    scanned: Mapping[SourcePartition, ProgressRecord] = field(default_factory=dict)  # chunks

    def options(self, kind: str = "rows", scan_time: Hlc | None = None) -> dict[str, str]:
        """The writer options that make the Java side write exactly once (``Delivery.java``).

        ``kind`` ``scan``: an initial scan's chunks, at the snapshot time ``scan_time``.
        """
        return self.delivery(kind, scan_time).options()

    def delivery(self, kind: str = "rows", scan_time: Hlc | None = None) -> DeliveryOptions:
        """Exactly once for this run's writes of ``kind`` (:meth:`options`, as a model)."""
        return DeliveryOptions(self.prefix, self.topic, self.generation, kind, scan_time)

    @classmethod
    def take(
        cls,
        config: ChangefeedConfig,
        client: Mapping[str, Any],
        writer: AcknowledgedProducer,
        partitions: list[SourcePartition],
    ) -> Claim:
        """Claim every partition for this run (module doc); raises :class:`FencedError`.

        A cluster whose transactions cannot work is refused first, naming ``delivery``.
        """
        check_transactions(config, client)
        topic = config.effective_progress_topic
        ensure_topics(
            client,
            {topic: max(1, len(partitions))},
            replication_factor=config.checkpoint.replication_factor,
            topic_config=COMPACTED,
        )
        store = CompactedTopic(client, topic, producer=writer)
        try:
            generation = 1 + _highest(store)
            store.put(GENERATION_KEY, GenerationRecord(generation=generation).encode())
            for attempt in range(1, CLAIM_ATTEMPTS + 1):
                try:
                    claim = cls._once(config, client, store, partitions, generation)
                    break
                except FencedError:
                    # a task of an earlier run (its driver not stopped yet) opened an id after
                    # this claim did: claim again, unless a newer run is what fenced it
                    if attempt == CLAIM_ATTEMPTS or _highest(store) > generation:
                        raise
                    log.warning(
                        "changefeed %s: a task of an earlier run opened a partition's "
                        "transactional id while run generation %d claimed it; claiming again",
                        config.changefeed_id,
                        generation,
                    )
        finally:
            store.close()
        committed = claim.committed
        log.info(
            "changefeed %s: exactly-once run generation %d, %d partition(s) claimed (%d with "
            "committed progress)",
            config.changefeed_id,
            generation,
            len(partitions),
            sum(1 for r in committed.values() if r.next_offset is not None),
        )
        return claim

    @classmethod
    def _once(
        cls,
        config: ChangefeedConfig,
        client: Mapping[str, Any],
        store: CompactedTopic,
        partitions: list[SourcePartition],
        generation: int,
    ) -> Claim:
        """Open every partition's ids (fencing their holders), then read and commit the progress.

        In that order: once an id is open no earlier holder commits under it, so what is read
        is what the claim commits again (raises :class:`FencedError` if one was opened since).
        """
        topic = store.topic
        producers = {
            (sp, kind): AcknowledgedProducer(
                client, timeout=30.0, transactional_id=transactional_id(config, sp, kind)
            )
            for sp in partitions
            for kind in KINDS
        }
        try:
            with ThreadPoolExecutor(16) as pool:  # each fences the id's earlier holders
                list(pool.map(_opened, producers.values()))
            records = store.read_all()
            committed = _committed(records, topic, partitions, "rows")
            scanned = _committed(records, topic, partitions, "scan")
            prefix = transactional_prefix(config)
            claim = cls(generation, committed, topic, prefix, scanned)
            claim._commit(producers, partition_counts(client, [topic])[topic])
        finally:
            for producer in producers.values():
                producer.close()
        return claim

    def _commit(
        self, producers: Mapping[tuple[SourcePartition, str], AcknowledgedProducer], slots: int
    ) -> None:
        """Each partition's committed progress again, with this run's generation."""
        for sp, record in [*self.committed.items(), *self.scanned.items()]:
            if record.generation > self.generation:
                raise FencedError(
                    f"{TAKEN}: source partition {sp} was claimed by run generation "
                    f"{record.generation} (this run is generation {self.generation})"
                )

        def claim(place: tuple[SourcePartition, str]) -> None:
            sp, kind = place
            old = (self.committed if kind == "rows" else self.scanned).get(sp)
            record = ProgressRecord(
                topic=sp.topic, partition=sp.partition, next_offset=None, generation=self.generation
            )
            if old is not None:
                record = old.model_copy(update={"generation": self.generation})
            key = progress_key(sp, kind)
            producers[place].send(
                [Record(self.topic, record.encode(), key.encode(), slot(key, slots))],
                f"claiming {sp} in {self.topic!r}",
            )

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(claim, producers))

    def scanned_chunks(
        self, backfill: Backfill, time: Hlc
    ) -> tuple[Backfill, list[tuple[SourcePartition, int | None, int]]]:
        """``backfill`` with the chunks of its scan (at ``time``) committed already, done.

        And those chunks' ranges, not read again (as :meth:`overlay`'s).
        """
        skipped: list[tuple[SourcePartition, int | None, int]] = []
        for chunk in backfill.pending():
            record = self.scanned.get(chunk.partition)
            if record is not None and record.time == time and record.next_offset == chunk.end:
                log.info("initial scan: %s was committed before the restart", chunk.partition)
                backfill = backfill.finished(chunk, 0)
                skipped.append((chunk.partition, chunk.start, chunk.end))
        return backfill, skipped

    def newer(self, client: Mapping[str, Any]) -> int | None:
        """A generation above this run's that the progress topic names, else None.

        Asked when a write failed: a newer instance's claim fences this run's row producers
        (the tasks fail in Spark, ``Pieces.java``), and then this run must stop, not retry.
        """
        store = CompactedTopic(client, self.topic)
        try:
            found = _highest(store)
        finally:
            store.close()
        return found if found > self.generation else None

    def overlay(self, frontier: Frontier) -> list[tuple[SourcePartition, int | None, int]]:
        """Move ``frontier`` to what was committed (never back): where each partition resumes.

        Returns the ranges it moved over (from None: the partition's start), which the run
        does not read again: what resolves Debezium's partitions counts them again
        (:meth:`.transaction_feed.TransactionFeed.recount`).
        """
        skipped = []
        for sp, record in self.committed.items():
            if record.next_offset is None or sp not in frontier:
                continue
            before = frontier[sp].offset
            frontier.forward(
                sp,
                resolved=record.resolved,
                next_offset=record.next_offset,
                position=record.position,
            )
            if before is None or before < record.next_offset:
                skipped.append((sp, before, record.next_offset))
        return skipped


def check_transactions(config: ChangefeedConfig, client: Mapping[str, Any]) -> None:
    """Refuse, naming ``delivery``, a sink cluster whose transaction coordinators cannot work."""
    problem = transaction_state(client).problem()
    if problem is not None:
        raise ConfigError(
            [("delivery", f"{_UNUSABLE} at {client['bootstrap.servers']}: {problem}")]
        )


_UNUSABLE = "exactly_once needs Kafka transactions, and the sink cluster cannot run them"


def _opened(producer: AcknowledgedProducer) -> None:
    """Open a partition's transactional id; a coordinator that never answers names ``delivery``."""
    try:
        producer.connect()
    except FencedError:
        raise
    except SinkError as exc:
        raise ConfigError([("delivery", f"{_UNUSABLE}: {exc}")]) from exc


def _highest(store: CompactedTopic) -> int:
    """The highest run generation the progress topic names (0: none yet)."""
    return max(_generations(store.read_all(), store.topic), default=0)


def _generations(records: Mapping[str, bytes], topic: str) -> list[int]:
    """Every generation the progress topic names (its generation record's, its claims')."""
    found = []
    for key, value in records.items():
        where = f"topic {topic}, key {key!r}"
        try:
            if key == GENERATION_KEY:
                found.append(decode(GenerationRecord, value, where=where).generation)
            elif key.startswith(tuple(f"{kind}/" for kind in KINDS)):
                found.append(decode(ProgressRecord, value, where=where).generation)
        except RecordError as exc:  # a record we cannot read: its generation is unknown
            log.warning("%s", exc)
    return found


def _committed(
    records: Mapping[str, bytes], topic: str, partitions: list[SourcePartition], kind: str
) -> dict[SourcePartition, ProgressRecord]:
    """Each partition's committed progress record of ``kind``, where there is one."""
    committed = {}
    for sp in partitions:
        key = progress_key(sp, kind)
        value = records.get(key)
        if value is not None:
            committed[sp] = decode(ProgressRecord, value, where=f"topic {topic}, key {key!r}")
    return committed
