"""GC of the source topics: trim what no safepoint needs any more (contract §8).

One GC pass (``highwater gc run``):

1. The **GC safe point** = min(now - ``gc_life_time``, every unexpired safepoint's time), never
   below the one recorded before (it never moves backwards).
2. For every partition of every managed source topic, the **trim offset**: records are read
   from the partition's first offset while they are at or below the GC safe point (rows by
   their time, markers by theirs, a record carrying nothing by the one before it); the first
   record above it, or one that does not decode, ends the prefix. The trim offset is the end
   of that prefix, lowered to the offset every unexpired changefeed safepoint resumes from on
   that partition. So no record above a safepoint's time, and nothing at or after a
   changefeed's checkpointed offset, is deleted.
3. Kafka's DeleteRecords trims each partition below its trim offset, and the new GC safe
   point is written to the safepoint topic.

The first two steps are pure functions (:func:`next_safe_point`, :func:`trim_offset`), so the
property that matters, *GC never deletes a needed record*, is tested over random safepoints,
TTLs and clocks without a broker. A source topic whose own retention could delete protected
data is reported (``pipeline.core.progress.safepoints.retention_warnings``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.core.batch.kafka_clients import range_reader, read_range, watermarks
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.progress.safepoints import Safepoint, SafepointRegistry, retention_warnings
from pipeline.core.sources import BadRecord, adapter, record_time
from schemas.errors import SafepointError, SourceError
from schemas.hlc import ZERO, Hlc
from sinks.admin import topic_configs

log = logging.getLogger(__name__)


def next_safe_point(now: float, life_time: float, held: Iterable[Safepoint], current: Hlc) -> Hlc:
    """The GC safe point at ``now`` (seconds).

    The lowest of now - ``life_time`` and every unexpired safepoint, never below ``current``.
    """
    candidate = Hlc(max(0, int((now - life_time) * 1e9)))
    for safepoint in held:
        if not safepoint.expired(now):
            candidate = min(candidate, safepoint.safepoint)
    return max(candidate, current)


def protected_offsets(held: Iterable[Safepoint], now: float) -> dict[SourcePartition, int]:
    """Per partition, the lowest offset an unexpired changefeed safepoint resumes from."""
    lowest: dict[SourcePartition, int] = {}
    for safepoint in held:
        if safepoint.expired(now):
            continue
        for sp, offset in safepoint.offsets.items():
            lowest[sp] = min(offset, lowest.get(sp, offset))
    return lowest


def trim_offset(
    records: Iterable[tuple[int, Hlc | None]], low: int, high: int, gc: Hlc, protect: int | None
) -> int:
    """Where to trim a partition: the end of its prefix of records at or below ``gc``.

    ``records`` are ``(offset, time)`` from ``low`` on, in offset order (time None: a record
    that does not decode, which ends the prefix); ``protect`` is the lowest offset a
    changefeed resumes from. The result is never above ``high`` nor ``protect``.
    """
    end = high
    for offset, ts in records:
        if ts is None or ts > gc:
            end = offset
            break
    else:
        end = high
    if protect is not None:
        end = min(end, protect)
    return max(low, end)


@dataclass
class GcReport:
    """What one GC pass did."""

    gc_safe_point: Hlc = ZERO
    previous: Hlc = ZERO
    trimmed: dict[SourcePartition, tuple[int, int]] = field(default_factory=dict)  # [from, to)
    warnings: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report, as ``highwater gc run`` prints it."""
        out = [f"GC safe point: {self.gc_safe_point} (was {self.previous})"]
        deleted = sum(b - a for a, b in self.trimmed.values())
        out.append(f"trimmed {deleted:,} records on {len(self.trimmed)} partitions")
        out += [f"  {sp}: offsets {a}..{b - 1}" for sp, (a, b) in sorted(self.trimmed.items())]
        out += [f"WARNING: {w}" for w in self.warnings]
        return out


def _times(
    consumer: Any,
    sp: SourcePartition,
    low: int,
    high: int,
    source_format: str,
    *,
    registry: Mapping[str, str] | None,
) -> Iterator[tuple[int, Hlc | None]]:
    """``(offset, time)`` of a partition's records from ``low`` to ``high``.

    ``registry``: the schema registry of Debezium's Avro records (without it, such records do
    not decode, and the first of them ends what may be trimmed).
    """
    decode = adapter(source_format, registry).decode
    last = ZERO
    for message in read_range(consumer, sp, low, high):
        try:
            item = decode(message.key(), message.value(), exact=False)  # times only
        except BadRecord:
            yield message.offset(), None
            continue
        # a record carrying nothing (Debezium's tombstone after a delete, a DDL event) stands
        # at the time of the record before it: trimming it with that one loses nothing
        last = record_time(item) or last
        yield message.offset(), last


class GarbageCollector:
    """GC passes over the managed source topics of one cluster."""

    def __init__(
        self,
        client: Mapping[str, Any],
        registry: SafepointRegistry,
        topics: Mapping[str, str],  # managed source topic -> its source format
        life_time: float,
        registries: Mapping[str, Mapping[str, str]] | None = None,  # topic -> Avro registry
    ) -> None:
        self.client = dict(client)
        self.registry = registry
        self.topics = dict(topics)
        self.life_time = life_time
        self.registries = dict(registries or {})

    def run_once(self) -> GcReport:
        """One pass: move the GC safe point, then trim below it."""
        now = self.registry.clock()
        state = self.registry.read()
        if state.unreadable:
            raise SafepointError(
                "GC trims nothing while safepoint records are unreadable (they may protect "
                f"data) in topic {self.registry.topic}: "
                + "; ".join(f"key {k!r}: {why}" for k, why in sorted(state.unreadable.items()))
                + "; rewrite or delete them"
            )
        held = list(state.safepoints.values())
        report = GcReport(previous=state.gc_safe_point)
        gc = next_safe_point(now, self.life_time, held, state.gc_safe_point)
        report.gc_safe_point = self.registry.advance_gc(gc)
        protect = protected_offsets(held, now)
        consumer = range_reader(self.client, "highwater-gc")
        targets: list[Any] = []
        try:
            found = {}
            for topic in self.topics:
                metadata = consumer.list_topics(topic, timeout=30).topics[topic]
                if metadata.error is not None:
                    report.warnings.append(f"topic {topic}: {metadata.error.str()}")
                else:
                    found[topic] = sorted(metadata.partitions)
            report.warnings += retention_warnings(topic_configs(self.client, list(found)))
            for topic, partitions in found.items():
                source_format = self.topics[topic]
                for p in partitions:
                    sp = SourcePartition(topic, p)
                    low, high = watermarks(consumer, TopicPartition(topic, p), 30)
                    wire = self.registries.get(topic)
                    records = _times(consumer, sp, low, high, source_format, registry=wire)
                    end = trim_offset(records, low, high, gc, protect.get(sp))
                    if end > low:
                        report.trimmed[sp] = (low, end)
                        targets.append(TopicPartition(topic, p, end))
        finally:
            consumer.close()
        if targets:
            admin = AdminClient(self.client)
            for tp, future in admin.delete_records(targets).items():
                try:
                    future.result(60)
                except Exception as exc:
                    raise SourceError(
                        f"DeleteRecords on {tp.topic}/{tp.partition} failed: {exc}"
                    ) from exc
        for line in report.lines():
            log.info("gc: %s", line)
        return report
