"""Before a changefeed emits anything: its topics and encoders, then where it starts.

:func:`open_outputs` creates the missing output, dead-letter and internal topics, registers
or publishes the Avro schemas (``evolution.py`` evolves them), and opens the clients a run
writes through; every one of them is handed to the caller's ``ExitStack`` to be closed. The
changefeed's own records (checkpoints and markers on the sink cluster, safepoint and status
beside the sources) go through a transactional producer named after the changefeed (one
per cluster when the sink is a cluster of its own): opening it fences every earlier
instance of the changefeed, whose next write of those records fails (contract §5.8, one
writer). :func:`find_start` then decides where the changefeed starts:

* **resume**: from its checkpoint record alone, refusing when records it still needs were
  deleted from the sources, and a config that changed what the output depends on
  (``update.py``); tables the config added start with a scan of their own;
* **create**: its statement time and start (contract §7), refusing a snapshot over a trimmed
  change log.

Either way the changefeed's safepoint is held at the restart position before anything is
read, and a start below the GC safe point is refused, naming topics, partitions and times.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from encoders.base import Context, Encoder
from pipeline.config import ChangefeedConfig
from schemas.errors import ConfigError, HighwaterError, SourceError
from schemas.hlc import ZERO, Hlc
from sinks.admin import (
    DurabilityWatch,
    cluster_metadata,
    ensure_topics,
    partition_counts,
    topic_configs,
)
from sinks.compacted import CompactedTopic, producer_limit
from sinks.producer import AcknowledgedProducer
from sinks.resolved import ResolvedBroadcaster

from ..batch import BatchPlan, BatchWriter, batch_writer, client_config
from ..evolution import SchemaEvolution
from ..ledger import Backfill, Checkpoint, CheckpointStore, Frontier, Progress, SourcePartition
from ..operators import JobStatus, SpecStore, StatusPublisher, check_update, identified
from ..progress import ChangefeedSafepoint, Claim, Position, SafepointRegistry, retention_warnings
from ..resolved import InStream, Resolver, TransactionFeed, transaction_wires
from ..scan import statement_time

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outputs:
    """What a run writes through, and what it found on the source cluster."""

    schemas: SchemaEvolution  # each source topic's encoder, its schema as it evolves
    checkpoints: CheckpointStore
    broadcaster: ResolvedBroadcaster
    status: StatusPublisher
    specs: SpecStore  # the desired states (jobs topic), for on_error: pause
    safepoint: ChangefeedSafepoint | None  # (safepoints.enabled)
    source: Mapping[str, Any]  # the source cluster's client settings
    partitions: list[SourcePartition]  # every partition of every source topic
    source_configs: Mapping[str, Mapping[str, str | None]]  # each source topic's settings
    restored: Checkpoint | None  # None: a new changefeed
    shape: Mapping[str, Any]  # the config's shape with its clusters' ids, as checkpoints keep it
    replicas: DurabilityWatch  # the relied-on topics' replicas, re-read while the run goes on
    writer: BatchWriter  # how every batch is written (the walk, or the loop alone)
    claim: Claim | None = None  # delivery: exactly_once: the run's generation, what was committed


def open_outputs(config: ChangefeedConfig, resources: ExitStack) -> Outputs:
    """Create missing topics, make the encoders, open the clients; read the checkpoint."""
    sink, source = client_config(config.sink_kafka), client_config(config.kafka)
    replication = config.sink.replication_factor
    ensure_topics(
        sink,
        dict.fromkeys(config.routes.values(), config.sink.partitions),
        replication_factor=replication,
    )
    if config.on_error != "fail":  # pause: where resume --skip-bad-record puts the record
        ensure_topics(sink, {config.effective_dlq_topic: 1}, replication_factor=replication)
    budget = config.checkpoint.frontier_checkpoint_max_bytes  # a record of that size must fit
    sink_writer, source_writer = _writers(config, sink, source, budget, resources)
    checkpoint_topic = _compacted(
        sink, config.checkpoint.topic, config, resources, sink_writer, max_value_bytes=budget
    )
    schemas = SchemaEvolution.open(config, sink, source, resources)
    broadcaster = _broadcaster(config, sink, schemas.encoders, sink_writer, resources)
    partitions, source_configs = _source_topics(source, list(config.routes))
    safepoint, warnings = None, []
    if config.safepoints.enabled:
        safepoint = _safepoint(config, source, resources, source_writer)
        warnings = retention_warnings(source_configs)
    checkpoints = CheckpointStore(checkpoint_topic, config.changefeed_id, budget)
    restored = checkpoints.load()
    jobs = _compacted(source, config.jobs.topic, config, resources, source_writer)
    previous = jobs.get(config.changefeed_id) if restored is not None else None
    exactly_once = config.delivery == "exactly_once"
    claim = Claim.take(config, sink, sink_writer, partitions) if exactly_once else None
    replicas, clusters = _clusters(config, sink, source)
    warnings.extend(schemas.warnings)
    for warning in [*warnings, *replicas.warnings()]:
        log.warning("%s", warning)
    status = StatusPublisher(
        jobs,
        config.changefeed_id,
        warnings=warnings,
        replication=replicas.warnings(),
        safepoint=safepoint,
        scan=_previous_scan(config, previous),
    )
    status.schemas = schemas.status() or None
    status.delivery, status.output = config.delivery, config.output_description()
    status.generation = None if claim is None else claim.generation
    return Outputs(
        schemas=schemas,
        checkpoints=checkpoints,
        broadcaster=broadcaster,
        status=status,
        specs=SpecStore(jobs),
        safepoint=safepoint,
        source=source,
        partitions=partitions,
        source_configs=source_configs,
        restored=restored,
        shape=identified(config.shape, clusters),
        replicas=replicas,
        writer=_batch_writer(config, schemas, claim),
        claim=claim,
    )


def _batch_writer(
    config: ChangefeedConfig, schemas: SchemaEvolution, claim: Claim | None
) -> BatchWriter:
    """How the run's batches are written: the walk or the loop, at least or exactly once."""
    plan = BatchPlan.of(config, schemas.encoders, thresholds={})
    return batch_writer(config, plan, {} if claim is None else claim.options())


def _writers(
    config: ChangefeedConfig,
    sink: Mapping[str, Any],
    source: Mapping[str, Any],
    budget: int,
    resources: ExitStack,
) -> tuple[AcknowledgedProducer, AcknowledgedProducer]:
    """The driver's transactional writers: (the sink cluster's, the source cluster's).

    One cluster (the usual case): one writer for all, so one fence decides the winner. Two
    clusters: the sink's fence is taken first; two instances started at the same moment may
    each end up holding one cluster's, and then both stop (neither writes).
    """
    sink_writer = _writer(config, {**sink, **producer_limit(budget)}, "sink", resources)
    if config.sink.kafka is None or config.sink_kafka == config.kafka:
        return sink_writer, sink_writer
    return sink_writer, _writer(config, source, "source", resources)


def _broadcaster(
    config: ChangefeedConfig,
    sink: Mapping[str, Any],
    encoders: Mapping[str, Encoder],
    writer: AcknowledgedProducer,
    resources: ExitStack,
) -> ResolvedBroadcaster:
    """The resolved-marker broadcaster over every output topic, each marker its encoder's."""
    by_output = {config.routes[topic]: e for topic, e in encoders.items()}
    broadcaster = ResolvedBroadcaster(
        sink,
        list(by_output),
        lambda ts, topic: by_output[topic].resolved(ts, Context(topic)),
        producer=writer,
    )
    resources.callback(broadcaster.close)
    return broadcaster


def _source_topics(
    source: Mapping[str, Any], topics: list[str]
) -> tuple[list[SourcePartition], dict[str, dict[str, str | None]]]:
    """Every partition of the source topics, and each topic's settings (read once)."""
    try:
        counts = partition_counts(source, topics)
    except Exception as exc:
        raise SourceError(f"cannot describe the source topics: {exc}") from exc
    partitions = [SourcePartition(t, p) for t, n in counts.items() for p in range(n)]
    return partitions, topic_configs(source, topics)


def _clusters(
    config: ChangefeedConfig, sink: Mapping[str, Any], source: Mapping[str, Any]
) -> tuple[DurabilityWatch, dict[str, str | None]]:
    """One look at each cluster, once every topic is made: its topics' replicas, its id.

    Returns the replica watch (checked once) and the cluster ids the checkpoint's shape
    records beside each address.
    """
    source_cluster = cluster_metadata(source)
    sink_cluster = source_cluster if config.sink.kafka is None else cluster_metadata(sink)
    on_sink, on_source = relied_on(config)
    if config.sink.kafka is None:
        watched, read = [(source, on_sink + on_source)], [source_cluster]
    else:
        watched, read = [(sink, on_sink), (source, on_source)], [sink_cluster, source_cluster]
    replicas = DurabilityWatch(watched, config.metrics.replication_check_interval.total_seconds())
    replicas.check(read)
    clusters = {
        "kafka": source_cluster.cluster_id,
        "sink.kafka": None if config.sink.kafka is None else sink_cluster.cluster_id,
    }
    return replicas, clusters


def relied_on(config: ChangefeedConfig) -> tuple[list[str], list[str]]:
    """The topics a run relies on: on the sink cluster, and on the source cluster."""
    sink = [*config.routes.values(), config.checkpoint.topic]
    if config.delivery == "exactly_once":
        sink.append(config.effective_progress_topic)
    if config.on_error != "fail":
        sink.append(config.effective_dlq_topic)
    if config.encoder.format == "avro" and config.encoder.schema_registry is None:
        sink.append(config.encoder.schema_topic)
    source = [*config.routes, config.jobs.topic]
    if config.safepoints.enabled:
        source.append(config.safepoints.topic)
    return sink, source


def _previous_scan(config: ChangefeedConfig, record: bytes | None) -> Mapping[str, Any] | None:
    """The last run's scan numbers from its job status (an unreadable record is reported)."""
    if record is None:
        return None
    try:
        return JobStatus.decode(record).scan
    except HighwaterError as exc:
        log.warning(
            "topic %s, key %r: %s; the status is written anew",
            config.jobs.topic,
            config.changefeed_id,
            exc,
        )
        return None


def _writer(
    config: ChangefeedConfig, client: Mapping[str, Any], cluster: str, resources: ExitStack
) -> AcknowledgedProducer:
    """The changefeed's fencing producer on one cluster, opened (earlier instances fenced)."""
    writer = AcknowledgedProducer(
        client, timeout=60.0, linger_ms=5, transactional_id=writer_id(config, cluster)
    )
    resources.callback(writer.close)
    writer.connect()
    return writer


def writer_id(config: ChangefeedConfig, cluster: str) -> str:
    """The transactional id of a changefeed's writes on one cluster.

    ``sink``: the sink cluster (the only one, usually); ``source``: the source cluster when
    the sink is another.
    """
    return f"highwater-{config.changefeed_id}-{cluster}"


def _compacted(
    client: Mapping[str, Any],
    topic: str,
    config: ChangefeedConfig,
    resources: ExitStack,
    writer: AcknowledgedProducer,
    *,
    max_value_bytes: int | None = None,
) -> CompactedTopic:
    store = CompactedTopic(client, topic, max_value_bytes=max_value_bytes, producer=writer)
    resources.callback(store.close)
    store.ensure(config.checkpoint.replication_factor)
    return store


def _safepoint(
    config: ChangefeedConfig,
    source: Mapping[str, Any],
    resources: ExitStack,
    writer: AcknowledgedProducer,
) -> ChangefeedSafepoint:
    registry = SafepointRegistry(
        source, config.safepoints.topic, config.safepoints.cluster, producer=writer
    )
    resources.callback(registry.close)
    registry.ensure(config.checkpoint.replication_factor)
    ttl = config.safepoints.gc_ttl.total_seconds()
    return ChangefeedSafepoint(registry, config.changefeed_id, ttl)


def resolver_of(
    config: ChangefeedConfig,
    outputs: Outputs,
    skipped: Iterable[tuple[SourcePartition, int | None, int]] = (),
) -> Resolver:
    """Debezium's transaction feed where ``config`` names transaction topics, else in-stream.

    A resumed changefeed's transaction logs start as its checkpoint kept them, and count
    what the run before committed after it (``skipped``: ``Position.skipped``).
    """
    records = {} if outputs.restored is None else outputs.restored.transactions
    feed = TransactionFeed.of(config, outputs.source, outputs.partitions, records)
    if feed is None:
        return InStream()
    feed.recount(skipped)
    return feed


def find_start(config: ChangefeedConfig, outputs: Outputs) -> Position:
    """Where the changefeed starts: resumed or created, its safepoint held, its data there."""
    restored = outputs.restored
    if restored is None:
        outputs.checkpoints.write_shape(outputs.shape)
        position, start_offsets = create(config, outputs)
        _committed(outputs, position)
        if position.backfill is not None:
            check_history_complete(start_offsets, outputs.source_configs)
        _hold_safepoint(outputs, position)
        if position.backfill is None:
            check_sources_hold(outputs, position)
        return position
    shape = outputs.checkpoints.load_shape()
    if shape is None or shape != outputs.shape:
        if shape is not None:  # refuses what the output cannot follow, naming it
            update = check_update(shape, outputs.shape)
            log.info("changefeed %s: config updated: %s", config.changefeed_id, update.describe())
        outputs.checkpoints.write_shape(outputs.shape)
    position = Position.restored(restored, outputs.partitions)
    added = tuple(t for t in config.routes if restored.topics and t not in restored.topics)
    if added:  # known from the record itself: a crash before its scan was recorded adds again
        position = add_tables(config, outputs, position, added)
    _committed(outputs, position)
    log.info(
        "changefeed %s: resuming at high-water %s (checkpoint level %s%s)",
        config.changefeed_id,
        restored.high_water,
        restored.level,
        "" if position.backfill is None else ", initial scan unfinished",
    )
    _hold_safepoint(outputs, position)
    check_sources_hold(outputs, position)
    return position


def _committed(outputs: Outputs, position: Position) -> None:
    """Exactly once: each partition resumes where its committed rows end (progress/claim.py).

    A scan chunk committed before the restart (and not yet in the checkpoint) is done.
    What the run does not read again for either is ``position.skipped``.
    """
    claim = outputs.claim
    if claim is None:
        return
    position.skipped = claim.overlay(position.frontier)
    backfill = position.backfill
    time = None if backfill is None else backfill.time or position.statement_time
    if backfill is not None and time is not None:
        position.backfill, chunks = claim.scanned_chunks(backfill, time)
        position.skipped.extend(chunks)


def create(
    config: ChangefeedConfig, outputs: Outputs
) -> tuple[Position, Mapping[SourcePartition, int]]:
    """A new changefeed's position, and the sources' first offsets (when it read them).

    * ``cursor`` without a scan: every change after the cursor, from the first offsets;
    * no scan: every change after the statement time, from the first offsets (the floor
      mechanism drops what is at or below it);
    * a scan: the snapshot at the statement time (the cursor, or the sources' high-water
      mark), then the stream from the offsets the statement time was read at, each
      partition's floor at its latest marker there (the scan emitted everything before).
    """
    cursor, mode, partitions = config.cursor, config.scan_mode, outputs.partitions
    if cursor is not None and mode == "no":
        position = Position(Frontier(partitions, start=cursor), cursor)
        start_offsets: Mapping[SourcePartition, int] = {}
    else:
        found = statement_time(
            outputs.source,
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


def add_tables(
    config: ChangefeedConfig, outputs: Outputs, position: Position, topics: tuple[str, ...]
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
    new = [sp for sp in outputs.partitions if sp.topic in topics]
    found = statement_time(
        outputs.source,
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
        check_history_complete(found.start_offsets, outputs.source_configs)
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


def check_sources_hold(outputs: Outputs, position: Position) -> None:
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
    gc = _gc_safe_point(outputs)
    consumer = Consumer({**outputs.source, "group.id": "highwater-offset-check"})
    gone = []
    try:
        for sp, progress in sorted(position.frontier.progress().items()):
            low, _high = consumer.get_watermark_offsets(
                TopicPartition(sp.topic, sp.partition), timeout=30
            )
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


def _gc_safe_point(outputs: Outputs) -> Hlc:
    """The cluster's GC safe point as the safepoint's hold read it (zero without safepoints).

    The hold is set first, so GC cannot have moved past what it read since.
    """
    return ZERO if outputs.safepoint is None else outputs.safepoint.gc_safe_point


def _hold_safepoint(outputs: Outputs, position: Position) -> None:
    """Hold GC at the restart position before reading anything (refused below GC)."""
    if outputs.safepoint is None:
        return
    restart = position.restart_time()
    counts: dict[str, int] = {}
    for sp in outputs.partitions:
        counts[sp.topic] = counts.get(sp.topic, 0) + 1
    topics = ", ".join(f"{t} partitions 0-{n - 1}" for t, n in sorted(counts.items()))

    def gone(gc: Hlc) -> str:
        return f"source changes after {restart} up to {gc} on {topics} may be gone"

    outputs.safepoint.start(
        restart, position.needed_offsets(), gone, check=position.backfill is None
    )
