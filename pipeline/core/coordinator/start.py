"""Where a changefeed starts, once setup opened what its run writes through (``setup.py``).

:func:`find_start` decides it:

* **resume**: from its checkpoint record alone, refusing when records it still needs were
  deleted from the sources, and a config that changed what the output depends on
  (``update.py``); tables the config added start with a scan of their own, but a whole
  database's tables created while it ran, which are read from their start;
* **create**: its statement time and start (contract §7), refusing a snapshot over a trimmed
  change log.

Either way the changefeed's safepoint is held at the restart position before anything is
read, and a start below the GC safe point is refused, naming topics, partitions and times.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import Consumer, TopicPartition

from pipeline.config import ChangefeedConfig
from schemas.errors import ConfigError, SourceError
from schemas.hlc import ZERO, Hlc

from ..batch import watermarks
from ..ledger import Backfill, Checkpoint, Frontier, Progress, SourcePartition
from ..operators import check_update
from ..progress import Position
from ..resolved import transaction_wires
from ..scan import statement_time
from .setup import Opened

log = logging.getLogger(__name__)


def find_start(config: ChangefeedConfig, opened: Opened) -> Position:
    """Where the changefeed starts: resumed or created, its safepoint held, its data there."""
    restored = opened.restored
    if restored is None:
        opened.checkpoints.write_shape(opened.shape)
        position, start_offsets = create(config, opened)
        _committed(opened, position)
        if position.backfill is not None:
            check_history_complete(start_offsets, opened.source_configs)
        _hold_safepoint(opened, position)
        if position.backfill is None:
            check_sources_hold(opened, position)
        return position
    shape = opened.checkpoints.load_shape()
    if shape is None or shape != opened.shape:
        if shape is not None:  # refuses what the output cannot follow, naming it
            update = check_update(shape, opened.shape)
            log.info("changefeed %s: config updated: %s", config.changefeed_id, update.describe())
        opened.checkpoints.write_shape(opened.shape)
    position = Position.restored(restored, opened.partitions)
    added = tuple(t for t in config.routes if restored.topics and t not in restored.topics)
    if added:  # known from the record itself: a crash before its scan was recorded adds again
        position = _with_added(config, opened, position, restored, added)
    _committed(opened, position)
    log.info(
        "changefeed %s: resuming at high-water %s (checkpoint level %s%s)",
        config.changefeed_id,
        restored.high_water,
        restored.level,
        "" if position.backfill is None else ", initial scan unfinished",
    )
    _hold_safepoint(opened, position)
    check_sources_hold(opened, position)
    return position


def _committed(opened: Opened, position: Position) -> None:
    """Exactly once: each partition resumes where its committed rows end (progress/claim.py).

    A scan chunk committed before the restart (and not yet in the checkpoint) is done.
    What the run does not read again for either is ``position.skipped``.
    """
    claim = opened.claim
    if claim is None:
        return
    position.skipped = claim.overlay(position.frontier)
    backfill = position.backfill
    time = None if backfill is None else backfill.time or position.statement_time
    if backfill is not None and time is not None:
        position.backfill, chunks = claim.scanned_chunks(backfill, time)
        position.skipped.extend(chunks)


def create(
    config: ChangefeedConfig, opened: Opened
) -> tuple[Position, Mapping[SourcePartition, int]]:
    """A new changefeed's position, and the sources' first offsets (when it read them).

    * ``cursor`` without a scan: every change after the cursor, from the first offsets;
    * no scan: every change after the statement time, from the first offsets (the floor
      mechanism drops what is at or below it);
    * a scan: the snapshot at the statement time (the cursor, or the sources' high-water
      mark), then the stream from the offsets the statement time was read at, each
      partition's floor at its latest marker there (the scan emitted everything before).
    """
    cursor, mode, partitions = config.cursor, config.scan_mode, opened.partitions
    if cursor is not None and mode == "no":
        position = Position(Frontier(partitions, start=cursor), cursor)
        start_offsets: Mapping[SourcePartition, int] = {}
    else:
        found = statement_time(
            opened.source,
            config.formats,
            partitions,
            _snapshot_transactions(config),
            transaction_wires(config),
        )
        if cursor is not None and cursor > found.time:
            raise SourceError(
                f"cursor {cursor} is above the sources' high-water mark {found.time}: a "
                "snapshot there would not be consistent yet"
            )
        statement = cursor or found.time
        if config.end_time is not None and config.end_time < statement:
            raise ConfigError(
                [("end_time", f"is below the statement time {statement}: nothing could be emitted")]
            )
        start_offsets = found.start_offsets
        if mode == "no":
            position = Position(Frontier(partitions, start=statement), statement)
        else:
            floors = {
                sp: Progress(found.end_offsets[sp], max(statement, found.markers[sp]))
                for sp in partitions
            }
            backfill = Backfill.of(found.start_offsets, found.end_offsets)
            position = Position(Frontier.restore(floors), statement, backfill)
    log.info(
        "changefeed %s: new, statement time %s, initial scan %s",
        config.changefeed_id,
        position.statement_time,
        mode,
    )
    return position, start_offsets


def _snapshot_transactions(config: ChangefeedConfig) -> dict[str, str]:
    """Debezium source topic -> its transaction topic, when a snapshot is taken (a scan).

    Without a scan a Debezium source is read from its start (its own snapshot, ``op: r``,
    is there), at statement time zero.
    """
    if config.scan_mode == "no":
        return {}
    return {
        topic: tx for tx, tables in config.transaction_topics.items() for topic in tables.values()
    }


def _appeared(config: ChangefeedConfig, restored: Checkpoint) -> set[str]:
    """The source topics of tables created while the changefeed ran.

    Named by the record; an older record named Debezium's in its logs' records alone.
    """
    out = set(restored.appeared)
    for tx, record in restored.transactions.items():
        tables = config.transaction_topics.get(tx, {})
        out.update(tables[c] for c in record.get("appeared", ()) if c in tables)
    return out


def created_since(
    config: ChangefeedConfig, restored: Checkpoint, added: tuple[str, ...]
) -> set[str]:
    """Of ``added``, the topics of whole databases the record's run listed as configured now.

    That run took every topic of such a database there was; one it did not cover was created
    after it listed them, so its changes lie above the record's high-water mark (Debezium's
    END events and TiCDC's listings hold the mark below a table's first change until the
    record names it, ``resolved/new_tables.py``, ``resolved/listed.py``). So a kill between
    the run meeting a table and its next record loses none of the table's changes: the
    record did not name it in ``appeared``, but this finds it.
    """
    same = [d for d in config.databases if d.identity in restored.listed]
    return {t for t in added if any(d.takes(t) for d in same)}


def _with_added(
    config: ChangefeedConfig,
    opened: Opened,
    position: Position,
    restored: Checkpoint,
    added: tuple[str, ...],
) -> Position:
    """Topics the record does not cover, each from where it starts.

    A whole database's tables created since the run before listed its tables: from their
    start, above the record's high-water mark; the others (a widened pattern, a source
    added by hand) are added tables (:func:`add_tables`).
    """
    appeared = _appeared(config, restored) | created_since(config, restored, added)
    streamed = [sp for sp in opened.partitions if sp.topic in added and sp.topic in appeared]
    if streamed:
        position = _from_their_start(config, position, streamed, restored.high_water)
    topics = tuple(t for t in added if t not in appeared)
    return add_tables(config, opened, position, topics) if topics else position


def add_tables(
    config: ChangefeedConfig, opened: Opened, position: Position, topics: tuple[str, ...]
) -> Position:
    """Source topics an update added: they start at their own high-water mark, now.

    That time, T, is read as a new changefeed's statement time is, over their partitions
    alone: they get an initial scan at T (unless ``initial_scan`` is ``no``: then every
    change after T), checkpointed like any scan; the other tables go on where they were,
    without one. Their output topics never had a marker, so T may lie below the last one;
    the next marker waits until they are resolved past it.
    """
    if position.backfill is not None:
        raise ConfigError(
            [
                (
                    "sources",
                    f"cannot add {', '.join(topics)} while the initial scan is unfinished: run "
                    "the changefeed with its config as it was until the scan ends, then add them",
                )
            ]
        )
    new = [sp for sp in opened.partitions if sp.topic in topics]
    found = statement_time(
        opened.source,
        config.formats,
        new,
        _snapshot_transactions(config),
        transaction_wires(config),
    )
    progress = position.frontier.progress()
    backfill = None
    if config.scan_mode == "no":
        progress.update({sp: Progress(None, found.time) for sp in new})
    else:
        check_history_complete(found.start_offsets, opened.source_configs)
        progress.update(
            {sp: Progress(found.end_offsets[sp], max(found.time, found.markers[sp])) for sp in new}
        )
        backfill = Backfill.of(found.start_offsets, found.end_offsets, time=found.time)
    log.info(
        "changefeed %s: added %s at %s, initial scan %s",
        config.changefeed_id,
        ", ".join(topics),
        found.time,
        "no" if backfill is None else "yes",
    )
    return Position(Frontier.restore(progress), position.statement_time, backfill)


def _from_their_start(
    config: ChangefeedConfig, position: Position, streamed: list[SourcePartition], floor: Hlc
) -> Position:
    """Tables created while the changefeed ran: read from their start, above ``floor``.

    ``floor`` is the high-water mark of the record that named them, which their changes held
    below their first (Debezium: their transactions; TiCDC: the frontier held where the
    topics were last listed without them, ``resolved/listed.py``): a floor there drops
    nothing of theirs, and the high-water mark goes on from it as they are resolved.
    """
    progress = position.frontier.progress()
    progress.update({sp: Progress(None, floor) for sp in streamed})
    log.info(
        "changefeed %s: added %s, created since it started: read from the start",
        config.changefeed_id,
        ", ".join(sorted({sp.topic for sp in streamed})),
    )
    return Position(Frontier.restore(progress), position.statement_time, position.backfill)


def check_history_complete(
    start_offsets: Mapping[SourcePartition, int],
    source_configs: Mapping[str, Mapping[str, str | None]],
) -> None:
    """A snapshot needs every key's history: refuse one over a trimmed change log."""
    compacted = {
        topic
        for topic, settings in source_configs.items()
        if "compact" in (settings.get("cleanup.policy") or "")
    }
    gone = sorted(
        f"{sp} offsets 0..{low - 1}"
        for sp, low in start_offsets.items()
        if low > 0 and sp.topic not in compacted
    )
    if gone:
        raise SourceError(
            "the initial scan needs the whole change history, and records were deleted "
            "from the source topics (GC or retention): " + "; ".join(gone) + ". Use "
            "initial_scan: no, or a cursor, to start without a snapshot"
        )


def check_sources_hold(opened: Opened, position: Position) -> None:
    """Refuse to start or resume when source records the changefeed needs were deleted.

    A partition read from a checkpointed offset needs every record from there on (and, while
    the initial scan is unfinished, its pending chunk's range). A partition read from its
    beginning (a cursor, no scan, a checkpoint that kept no offsets, a partition the
    checkpoint does not know) needs every record above its floor: records deleted from its
    beginning are only known to be at or below the floor when the GC safe point says so (GC
    trims nothing above it, and a start below it is refused); anything else deleted them
    (retention, DeleteRecords by hand) and they may hold changes that would be skipped.
    """
    needed = position.needed()
    gc = _gc_safe_point(opened)
    consumer = Consumer({**opened.source, "group.id": "highwater-offset-check"})
    gone = []
    try:
        for sp, progress in sorted(position.frontier.progress().items()):
            low, _high = watermarks(consumer, TopicPartition(sp.topic, sp.partition), 30)
            if sp in needed:
                offset, what = needed[sp]
                if low > offset:
                    gone.append(f"{sp} offsets {offset}..{low - 1} ({what})")
            elif low > 0 and not (ZERO < gc <= progress.resolved):
                gone.append(
                    f"{sp} offsets 0..{low - 1} (read from the beginning for changes after "
                    f"{progress.resolved}; no GC safe point accounts for their deletion)"
                )
    finally:
        consumer.close()
    if gone:
        raise SourceError(
            "source data this changefeed needs was deleted from Kafka, so it cannot start or "
            "resume without losing changes: " + "; ".join(gone)
        )


def _gc_safe_point(opened: Opened) -> Hlc:
    """The cluster's GC safe point as the safepoint's hold read it (zero without safepoints).

    The hold is set first, so GC cannot have moved past what it read since.
    """
    return ZERO if opened.safepoint is None else opened.safepoint.gc_safe_point


def _hold_safepoint(opened: Opened, position: Position) -> None:
    """Hold GC at the restart position before reading anything (refused below GC)."""
    if opened.safepoint is None:
        return
    restart = position.restart_time()
    counts: dict[str, int] = {}
    for sp in opened.partitions:
        counts[sp.topic] = counts.get(sp.topic, 0) + 1
    topics = ", ".join(f"{t} partitions 0-{n - 1}" for t, n in sorted(counts.items()))

    def gone(gc: Hlc) -> str:
        return f"source changes after {restart} up to {gc} on {topics} may be gone"

    opened.safepoint.start(
        restart, position.needed_offsets(), gone, check=position.backfill is None
    )
