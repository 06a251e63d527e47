"""The statement time of a new changefeed: the sources' high-water mark when it is created.

Every change at or below it is already on the source topics (each partition's latest marker
promises so), which makes it the time of a consistent snapshot (initial scan, contract §7).
It is the lowest, over every source partition, of that partition's latest marker. The latest
marker sits near the end of a partition, so each partition is read backwards in growing
windows from its end offset (the offsets recorded with the time) until a marker turns up,
never the whole history. A Debezium partition has no markers: for a snapshot its time is
just below the last commit its transaction topic lists (:func:`last_commit`), read before
the data topics' end offsets; the scan proves it (``TransactionFeed.check_snapshot``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import TopicPartition

from schemas.errors import SourceError
from schemas.hlc import ZERO, Hlc

from ..batch import range_reader, read_range, watermarks
from ..ledger import SourcePartition
from ..resolved import just_below
from ..sources import BadRecord, Marker, WireReader, adapter, transaction_event

T = TypeVar("T")


@dataclass(frozen=True)
class StatementTime:
    """The statement time and, per partition, what the sources held when it was read.

    ``markers`` are each partition's latest marker (``time`` is their lowest);
    ``start_offsets``/``end_offsets`` the partition's first offset and the end offset read up
    to. Every change at or below a partition's latest marker lies before its end offset.
    """

    time: Hlc
    markers: Mapping[SourcePartition, Hlc]
    start_offsets: Mapping[SourcePartition, int]
    end_offsets: Mapping[SourcePartition, int]


def read_back(
    consumer: Any,
    sp: SourcePartition,
    low: int,
    high: int,
    pick: Callable[[Iterable[Any]], T | None],
) -> T | None:
    """What ``pick`` finds among the last records of ``sp`` before ``high`` (None: nothing).

    Reads back from ``high`` in windows of 1,000, 10,000, … records, each only the part
    before the previous one, until ``pick`` finds something in a window or ``low`` is reached:
    never the whole history when what is sought lies near the end.
    """
    window, stop = 1_000, high
    while stop > low:
        start = max(low, high - window)
        found = pick(read_range(consumer, sp, start, stop))
        if found is not None:
            return found
        window, stop = window * 10, start
    return None


def latest_marker(
    consumer: Any, sp: SourcePartition, low: int, high: int, source_format: str
) -> Hlc | None:
    """The highest marker among the last records of ``sp`` before ``high`` (None: none yet)."""
    decode = adapter(source_format).decode

    def highest(messages: Iterable[Any]) -> Hlc | None:
        found: Hlc | None = None
        for message in messages:
            if message.key() is None:
                try:
                    item = decode(None, message.value())
                except BadRecord:
                    continue  # on_error applies when the stream reads it
                if isinstance(item, Marker) and (found is None or item.resolved > found):
                    found = item.resolved
        return found

    return read_back(consumer, sp, low, high, highest)


def last_commit(consumer: Any, topic: str, wire: WireReader | None = None) -> Hlc:
    """Debezium: the time just below the last transaction its transaction topic ENDs.

    Every transaction ENDed before it committed in an earlier millisecond (END times are
    milliseconds, commit order is the topic's order), so its changes are at or below this
    time; the last one's, and any later one's, are above. ZERO: no transaction yet.
    """
    found = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if found is None or found.error is not None:
        return ZERO  # not created yet: the connector has not committed a transaction
    low, high = watermarks(consumer, TopicPartition(topic, 0), 30)

    def last_end(messages: Iterable[Any]) -> Hlc | None:
        ends = []
        for message in messages:
            try:
                event = transaction_event(message.value(), wire)
            except BadRecord:
                continue
            if event.status == "END":
                ends.append(event.time)
        return ends[-1] if ends else None

    last = read_back(consumer, SourcePartition(topic, 0), low, high, last_end)
    return ZERO if last is None else just_below(last)


def statement_time(
    client: Mapping[str, Any],
    formats: Mapping[str, str],
    partitions: list[SourcePartition],
    transactions: Mapping[str, str] | None = None,
    wires: Mapping[str, WireReader] | None = None,
) -> StatementTime:
    """The sources' high-water mark now; a partition without any marker yet is an error.

    ``transactions``: a Debezium source topic's transaction topic, for a snapshot of it
    (:func:`last_commit`, read before the data topics' end offsets); without, a Debezium
    partition's time is zero (all of it is read as changes). ``wires``: the readers of
    transaction topics in Avro.
    """
    consumer = range_reader(client, "highwater-statement-time")
    try:
        commits = {
            tx: last_commit(consumer, tx, (wires or {}).get(tx))
            for tx in set((transactions or {}).values())
        }
        starts: dict[SourcePartition, int] = {}
        ends: dict[SourcePartition, int] = {}
        times: dict[SourcePartition, Hlc | None] = {}
        for sp in partitions:
            low, high = watermarks(consumer, TopicPartition(sp.topic, sp.partition), 30)
            starts[sp], ends[sp] = low, high
            if adapter(formats[sp.topic]).in_band_markers:
                times[sp] = latest_marker(consumer, sp, low, high, formats[sp.topic])
            else:  # Debezium: its transaction topic says
                times[sp] = commits.get((transactions or {}).get(sp.topic, ""), ZERO)
    finally:
        consumer.close()
    missing = sorted(str(sp) for sp, t in times.items() if t is None)
    if missing:
        raise SourceError(
            "no resolved marker yet on " + ", ".join(missing) + ": the statement time (the "
            "sources' high-water mark) is not known; wait for the upstream's first markers"
        )
    markers = {sp: t for sp, t in times.items() if t is not None}
    return StatementTime(min(markers.values()), markers, starts, ends)
