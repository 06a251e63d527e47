"""The job status: what an operator reads about a changefeed without its logs.

One JSON record per changefeed in a compacted topic (``jobs.topic``, default
``_highwater_jobs``), keyed by changefeed id, written by the driver at every checkpoint,
after every initial-scan chunk and at every change of state:

    {"changefeed_id": "orders", "state": "scanning", "high_water": "<hlc>",
     "statement_time": "<hlc>", "last_marker": null,
     "scan": {"chunks_done": 3, "chunks_total": 12, "records_done": …, "records_total": …,
              "rows": …, "rows_per_second": …, "eta_seconds": …},
     "error": null, "safepoint": {"service_id": …, "safepoint": "<hlc>", "expires_at": …},
     "warnings": [], "updated_at": "<RFC 3339>", "metrics_url": "http://host:port/metrics",
     "schemas": {"orders": {"version": "id 7 of subject orders-value", "columns": […],
                            "changed_at": "<hlc>", "added": ["vip"]}}}

States: ``scanning`` (initial scan), ``running`` (streaming), ``stopped`` (asked to, or an
``available_now`` drain ended), ``finished`` (``end_time`` reached, or ``initial_scan: only``
done), ``failed`` (``error`` says why).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from schemas.errors import HighwaterError
from schemas.hlc import Hlc
from sinks.compacted import CompactedTopic

from ..batch import BatchResult
from ..ledger import (
    OutputFields,
    PartitionStatus,
    SafepointFields,
    ScanProgress,
    StatusRecord,
    TableSchemaStatus,
    read_part,
    records,
)
from ..progress import ChangefeedSafepoint, Position

RECENT = 100_000  # timings a run's stats keep (benchmarks and tests read them)

log = logging.getLogger(__name__)

# how an error names the parts of the status (they are validated when it is written)
_SAFEPOINT, _SCHEMA = "job status's safepoint", "job status's schema"
_OUTPUT, _PARTITION = "job status's output", "job status's partition"
SHOWN_PARTITIONS = 1000  # the job status's partitions: those furthest behind, at most


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class JobStatus:
    """One changefeed's status record."""

    changefeed_id: str
    state: str
    high_water: Hlc | None = None
    statement_time: Hlc | None = None
    last_marker: Hlc | None = None
    scan: Mapping[str, Any] | None = None
    error: str | None = None
    safepoint: Mapping[str, Any] | None = None  # the changefeed's own (core/safepoints.py)
    warnings: list[str] = field(default_factory=list)  # e.g. a source topic's retention
    updated_at: str = field(default_factory=_now)
    metrics_url: str | None = None  # the run's Prometheus endpoint
    # Avro: per table, its output schema's version, columns and last change (evolution.py)
    schemas: Mapping[str, Any] | None = None
    delivery: str | None = None  # at_least_once or exactly_once
    generation: int | None = None  # exactly once: the run's generation
    output: Mapping[str, Any] | None = None  # where and how it writes (records.OutputFields)
    # each source partition ({topic, partition, resolved, offset, waits_for}), as published
    partitions: list[Mapping[str, Any]] | None = None
    rows: int | None = None  # rows this run wrote so far (the console's rows/s)

    def encode(self) -> bytes:
        """The record's bytes (:class:`.records.StatusRecord`)."""
        return StatusRecord(
            changefeed_id=self.changefeed_id,
            state=self.state,
            high_water=self.high_water,
            statement_time=self.statement_time,
            last_marker=self.last_marker,
            scan=None if self.scan is None else dict(self.scan),
            error=self.error,
            safepoint=None
            if self.safepoint is None
            else read_part(SafepointFields, self.safepoint, _SAFEPOINT),
            warnings=tuple(self.warnings),
            updated_at=self.updated_at,
            metrics_url=self.metrics_url,
            schemas=None
            if self.schemas is None
            else {t: read_part(TableSchemaStatus, v, _SCHEMA) for t, v in self.schemas.items()},
            delivery=self.delivery,
            generation=self.generation,
            output=None if self.output is None else read_part(OutputFields, self.output, _OUTPUT),
            partitions=None
            if self.partitions is None
            else tuple(read_part(PartitionStatus, p, _PARTITION) for p in self.partitions),
            rows=self.rows,
        ).encode()

    @classmethod
    def decode(cls, data: bytes, *, where: str | None = None) -> JobStatus:
        """Parse a status record (``where``: its topic and key, for the error)."""
        record = records.decode(StatusRecord, data, where=where)
        dumped = record.model_dump(
            mode="json", include={"scan", "safepoint", "schemas", "output", "partitions"}
        )
        for partition in dumped["partitions"] or ():  # as written: its later fields only if set
            for name in ("offset", "waits_for"):
                if partition[name] is None:
                    del partition[name]
        return cls(
            changefeed_id=record.changefeed_id,
            state=record.state,
            high_water=record.high_water,
            statement_time=record.statement_time,
            last_marker=record.last_marker,
            scan=dumped["scan"],
            error=record.error,
            safepoint=dumped["safepoint"],
            warnings=list(record.warnings),
            updated_at=record.updated_at,
            metrics_url=record.metrics_url,
            schemas=dumped["schemas"],
            delivery=record.delivery,
            generation=record.generation,
            output=dumped["output"],
            partitions=dumped["partitions"],
            rows=record.rows,
        )


@dataclass
class ChangefeedStats:
    """What a run did, for logs, the job status and benchmarks."""

    batches: int = 0
    rows: int = 0
    duplicates: int = 0
    resent: int = 0  # changes an upstream sent again, dropped
    bad: int = 0
    scan_rows: int = 0
    # the last RECENT checkpoints, markers and batches (a run may go on for months)
    checkpoint_seconds: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT))
    markers: deque[tuple[float, Hlc]] = field(  # (wall seconds, marker)
        default_factory=lambda: deque(maxlen=RECENT)
    )
    # per batch: (seconds writing it, seconds of the whole foreachBatch call on the driver)
    batch_seconds: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=RECENT))
    stream_started: float | None = None  # time.perf_counter() when the streaming query started
    stream_ended: float | None = None  # ... when it ended, its last checkpoint and marker out

    def count(self, result: BatchResult, *, scan: bool = False) -> None:
        """Add a batch's (or, with ``scan``, an initial-scan chunk's) numbers."""
        if scan:
            self.scan_rows += result.emitted
        else:
            self.batches += 1
            self.rows += result.emitted
        self.duplicates += result.duplicates
        self.resent += result.resent
        self.bad += result.bad


class StatusPublisher:
    """Writes one changefeed's status record; keeps its state and its scan's numbers."""

    def __init__(
        self,
        jobs: CompactedTopic,
        changefeed_id: str,
        *,
        warnings: list[str],
        replication: list[str] | None = None,
        safepoint: ChangefeedSafepoint | None = None,
        scan: Mapping[str, Any] | None = None,
    ) -> None:
        self.jobs = jobs
        self.safepoint = safepoint  # the changefeed's own, as it stands when published
        self.changefeed_id = changefeed_id
        self.warnings = warnings  # found at the start (e.g. a source topic's retention)
        self.replication = replication or []  # as the last look at the topics' replicas found
        self.transactions: list[str] = []  # Debezium: transactions that cannot complete
        self.lagging: list[str] = []  # source partitions lagging by more than the threshold
        self.stuck: str | None = None  # the high-water standing still with records coming
        self.waiting_for: Mapping[str, str] = {}  # Debezium: per topic, what markers wait for
        self.rows: int | None = None  # rows this run wrote so far
        self.state = "scanning"
        self.scan = scan  # a previous run's scan numbers, until this run scans
        self.progress: ScanProgress | None = None  # this run's scan
        self.metrics_url: str | None = None  # this run's Prometheus endpoint
        self.schemas: Mapping[str, Any] | None = None  # Avro: each table's output schema
        self.delivery: str | None = None  # at_least_once or exactly_once
        self.generation: int | None = None  # exactly once: the run's generation
        self.output: Mapping[str, Any] | None = None  # where and how it writes, for consumers

    def publish(
        self,
        position: Position | None,
        last_marker: Hlc | None,
        state: str | None = None,
        *,
        error: str | None = None,
        best_effort: bool = False,
    ) -> None:
        """Write the record as things stand (``best_effort``: a failure is only logged)."""
        if state is not None:
            self.state = state
        held = None if self.safepoint is None else self.safepoint.current
        status = JobStatus(
            changefeed_id=self.changefeed_id,
            state=self.state,
            high_water=None if position is None else position.frontier.high_water(),
            statement_time=None if position is None else position.statement_time,
            last_marker=last_marker,
            scan=self.scan if self.progress is None else self.progress.to_json(),
            error=error,
            safepoint=None if held is None else held.to_json(),
            warnings=[
                *([self.stuck] if self.stuck else []),
                *self.warnings,
                *self.replication,
                *self.transactions,
                *self.lagging,
            ],
            metrics_url=self.metrics_url,
            schemas=self.schemas,
            delivery=self.delivery,
            generation=self.generation,
            output=self.output,
            partitions=None if position is None else _partitions(position, self.waiting_for),
            rows=self.rows,
        )
        try:
            self.jobs.put(self.changefeed_id, status.encode())
        except HighwaterError as exc:
            if not best_effort:
                raise
            log.warning("could not write the job status: %s", exc)


def _partitions(
    position: Position, waiting_for: Mapping[str, str] | None = None
) -> list[Mapping[str, Any]]:
    """Each source partition's resolved time and next offset, in topic and partition order.

    ``waiting_for``: per topic, what its markers wait for (Debezium's transaction).

    At most :data:`SHOWN_PARTITIONS`, those furthest behind (a job status stays well under
    Kafka's 1 MB a record however many partitions a changefeed reads).
    """
    progress = position.frontier.progress()
    behind = sorted(progress.items(), key=lambda item: item[1].resolved)[:SHOWN_PARTITIONS]
    waits = waiting_for or {}
    return [
        {
            "topic": sp.topic,
            "partition": sp.partition,
            "resolved": str(p.resolved),
            **({} if p.offset is None else {"offset": p.offset}),
            **({"waits_for": waits[sp.topic]} if sp.topic in waits else {}),
        }
        for sp, p in sorted(behind, key=lambda item: (item[0].topic, item[0].partition))
    ]
