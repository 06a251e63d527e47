"""Before a changefeed emits anything: its topics, encoders and clients.

:func:`open_run` creates the missing output, dead-letter and internal topics, registers
or publishes the Avro schemas (``evolution.py`` evolves them), and opens the clients a run
writes through; every one of them is handed to the caller's ``ExitStack`` to be closed. The
changefeed's own records (checkpoints and markers on the sink cluster, safepoint and status
beside the sources) go through a transactional producer named after the changefeed (one
per cluster when the sink is a cluster of its own): opening it fences every earlier
instance of the changefeed, whose next write of those records fails (contract §5.8, one
writer). Its rows go through the run's one row sink (``batch/sink.py``), exactly once under
the run's claim. Where the changefeed starts is ``start.py``'s.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import AdminClient

from encoders.base import Context, Encoder
from pipeline.config import ChangefeedConfig
from schemas.errors import HighwaterError, SourceError
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

from ..batch import (
    BatchPlan,
    BatchWriter,
    RowSink,
    batch_writer,
    client_config,
    own_writer_settings,
)
from ..evolution import SchemaEvolution, written
from ..ledger import Checkpoint, CheckpointStore, SourcePartition
from ..operators import JobStatus, SpecStore, StatusPublisher, identified
from ..progress import (
    ChangefeedSafepoint,
    Claim,
    Position,
    SafepointRegistry,
    retention_warnings,
)
from ..resolved import InStream, Listed, Resolver, TransactionFeed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Opened:
    """What setup opened for a run: what it writes through, what it found on the clusters."""

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
    sink: RowSink  # where every row goes (at least or exactly once)
    writer: BatchWriter  # how every batch is written (the walk, or the loop alone), to ``sink``
    claim: Claim | None = None  # delivery: exactly_once: the run's generation, what was committed


def open_run(config: ChangefeedConfig, resources: ExitStack) -> Opened:
    """Create missing topics, make the encoders, open the clients; read the checkpoint."""
    sink, source = client_config(config.sink_kafka), client_config(config.kafka)
    replication = config.sink.replication_factor
    ensure_topics(
        sink,
        dict.fromkeys(config.routes.values(), config.sink.partitions),
        replication_factor=replication,
    )
    # pause: where resume --skip-bad-record puts the record; oversized_rows: dlq, its rows'
    if config.on_error != "fail" or config.oversized_rows == "dlq":
        ensure_topics(sink, {config.effective_dlq_topic: 1}, replication_factor=replication)
    budget = config.checkpoint.frontier_checkpoint_max_bytes  # a record of that size must fit
    sink_writer, source_writer = _writers(config, sink, source, budget, resources)
    checkpoint_topic = _compacted(
        sink, config.checkpoint.topic, config, resources, sink_writer, max_value_bytes=budget
    )
    schemas = SchemaEvolution.open(config, sink, source, resources)
    broadcaster = _broadcaster(config, sink, schemas.encoders, sink_writer, resources)
    partitions, source_configs = _source_topics(source, list(config.routes))
    safepoint, warnings = _safepoint(config, source, source_configs, resources, source_writer)
    checkpoints = CheckpointStore(checkpoint_topic, config.changefeed_id, budget)
    restored = checkpoints.load()
    jobs = _compacted(source, config.jobs.topic, config, resources, source_writer)
    previous = jobs.get(config.changefeed_id) if restored is not None else None
    exactly_once = config.delivery == "exactly_once"
    claim = Claim.take(config, sink, sink_writer, partitions) if exactly_once else None
    replicas, clusters = _clusters(config, sink, source)
    warnings.extend([*schemas.warnings, *config.sink.warnings()])
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
    status.delivery, status.output = config.delivery, config.output_description(written(schemas))
    status.generation = None if claim is None else claim.generation
    sink_of_rows = RowSink.of(config, claim)
    return Opened(
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
        sink=sink_of_rows,
        writer=_batch_writer(config, schemas, sink_of_rows),
        claim=claim,
    )


def _batch_writer(config: ChangefeedConfig, schemas: SchemaEvolution, sink: RowSink) -> BatchWriter:
    """How the run's batches are written to ``sink``: the walk or the loop."""
    plan = BatchPlan.of(config, schemas.encoders, thresholds={})
    return batch_writer(config, plan, sink)


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
    own = own_writer_settings(config.sink.producer_settings)  # the client id
    sink_writer = _writer(config, {**sink, **own, **producer_limit(budget)}, "sink", resources)
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
        headers=config.sink.extra_headers,
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
    if config.on_error != "fail" or config.oversized_rows == "dlq":
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
    source_configs: Mapping[str, Mapping[str, str | None]],
    resources: ExitStack,
    writer: AcknowledgedProducer,
) -> tuple[ChangefeedSafepoint | None, list[str]]:
    """The changefeed's safepoint (``safepoints.enabled``), and the source topics' warnings.

    A topic whose retention may delete what the safepoint holds is warned of.
    """
    if not config.safepoints.enabled:
        return None, []
    registry = SafepointRegistry(
        source, config.safepoints.topic, config.safepoints.cluster, producer=writer
    )
    resources.callback(registry.close)
    registry.ensure(config.checkpoint.replication_factor)
    ttl = config.safepoints.gc_ttl.total_seconds()
    safepoint = ChangefeedSafepoint(registry, config.changefeed_id, ttl)
    return safepoint, retention_warnings(source_configs)


def resolver_of(config: ChangefeedConfig, opened: Opened, position: Position) -> Resolver:
    """Debezium's transaction feed where ``config`` names transaction topics, else in-stream.

    Wrapped in a listing of the topics where it follows a TiCDC schema (``resolved/listed.py``).

    A resumed changefeed's transaction logs start as its checkpoint kept them, and count
    what the run before committed after it (``Position.skipped``).
    """
    records = {} if opened.restored is None else opened.restored.transactions
    feed = TransactionFeed.of(config, opened.source, opened.partitions, records)
    if feed is not None:
        feed.recount(position.skipped)
    admin = functools.cache(lambda: AdminClient(dict(opened.source)))  # one for the run
    return Listed.around(
        feed or InStream(),
        config,
        lambda: admin().list_topics(timeout=10).topics,
        position.frontier,
    )
