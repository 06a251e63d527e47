"""A changefeed's metrics, in Prometheus' text format, served by the run itself.

Each run has a registry of its own (``prometheus_client``), every series labelled with its
``changefeed``, served on ``metrics.host``:``metrics.port`` (port 0: any free one); the job
status names the address (``metrics_url``), where the server finds it for its aggregate.

==========================================  ====================================================
``highwater_rows_emitted_total``            rows written to the output topics (scan included)
``highwater_bytes_emitted_total``           their keys' and values' bytes
``highwater_duplicates_dropped_total``      rows at or below a partition's floor, not written
``highwater_bad_records_total``             records that went where ``on_error`` says
``highwater_markers_sent_total``            resolved markers broadcast (each to every partition)
``highwater_schema_changes_total``          output schemas evolved (``schema_change_policy``)
``highwater_backfills_total``               tables emitted again at a schema change (``backfill``)
``highwater_batch_duration_seconds``        a micro-batch's write, Kafka acknowledgement included
``highwater_checkpoint_write_seconds``      a checkpoint record's write
``highwater_checkpoint_bytes``              the last checkpoint record's size
``highwater_high_water_lag_seconds``        now minus the high-water mark
``highwater_partition_lag_seconds``         now minus each source partition's resolved time
``highwater_lagging_partitions``            source partitions lagging by more than lagging_threshold
``highwater_stuck``                         1 while the high-water stands past stuck_threshold
                                            with records coming, else 0
``highwater_scan_chunks``                   the initial scan's chunks, ``done`` and ``total``
``highwater_scan_rows_total``               rows the initial scan wrote
``highwater_state``                         1 for the run's state, 0 for the others
``highwater_under_replicated_partitions``   per relied-on topic, its partitions out of sync or
                                            without a leader (re-read every 30 s by default)
==========================================  ====================================================
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

if TYPE_CHECKING:
    from sinks.admin import Durability

    from ..batch import BatchResult
    from ..ledger import Frontier, ScanProgress

STATES = ("scanning", "running", "paused", "stopped", "finished", "removed", "failed")
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class ChangefeedMetrics:
    """The series of one changefeed's run (and the HTTP endpoint serving them)."""

    def __init__(self, changefeed_id: str) -> None:
        self.registry = CollectorRegistry()
        self.changefeed_id = changefeed_id
        self._server: Any = None
        self.url: str | None = None
        self._counters()
        self._gauges()

    def _counter(self, name: str, doc: str) -> Any:
        return Counter(name, doc, ["changefeed"], registry=self.registry).labels(self.changefeed_id)

    def _histogram(self, name: str, doc: str) -> Any:
        family = Histogram(name, doc, ["changefeed"], buckets=_SECONDS, registry=self.registry)
        return family.labels(self.changefeed_id)

    def _counters(self) -> None:
        counter, histogram = self._counter, self._histogram
        self.rows = counter("highwater_rows_emitted", "Rows written to the output topics")
        self.bytes = counter("highwater_bytes_emitted", "Bytes of the rows' keys and values")
        self.duplicates = counter(
            "highwater_duplicates_dropped", "Rows at or below their partition's floor"
        )
        self.bad = counter("highwater_bad_records", "Records that went where on_error says")
        self.resent = counter(
            "highwater_resent_dropped",
            "Changes an upstream sent again (at or below a source position already read)",
        )
        self.markers = counter("highwater_markers_sent", "Resolved markers broadcast")
        self.schema_changes = counter(
            "highwater_schema_changes", "Output schemas evolved (schema_change_policy: evolve)"
        )
        self.backfills = counter(
            "highwater_backfills",
            "Tables emitted again at a schema change (schema_change_policy: backfill)",
        )
        self.scan_rows = counter("highwater_scan_rows", "Rows the initial scan wrote")
        self.row_transactions = Counter(
            "highwater_transactions",
            "Kafka transactions of the rows (delivery: exactly_once), by outcome",
            ["changefeed", "outcome"],
            registry=self.registry,
        )
        self.batch_seconds = histogram(
            "highwater_batch_duration_seconds", "A micro-batch's write, until Kafka acknowledged it"
        )
        self.checkpoint_seconds = histogram(
            "highwater_checkpoint_write_seconds", "A checkpoint record's write"
        )

    def _gauges(self) -> None:
        r, cf, names = self.registry, [self.changefeed_id], ["changefeed"]
        self.checkpoint_bytes = Gauge(
            "highwater_checkpoint_bytes", "The last checkpoint record's size", names, registry=r
        ).labels(*cf)
        self.high_water_lag = Gauge(
            "highwater_high_water_lag_seconds", "Now minus the high-water mark", names, registry=r
        ).labels(*cf)
        self.partition_lag = Gauge(
            "highwater_partition_lag_seconds",
            "Now minus the source partition's resolved time",
            [*names, "topic", "partition"],
            registry=r,
        )
        self.lagging = Gauge(
            "highwater_lagging_partitions",
            "Source partitions whose resolved time lags now by more than lagging_threshold",
            names,
            registry=r,
        ).labels(*cf)
        self.stuck_high_water = Gauge(
            "highwater_stuck",
            "1 while the high-water has stood still past stuck_threshold with records coming",
            names,
            registry=r,
        ).labels(*cf)
        self.scan_chunks = Gauge(
            "highwater_scan_chunks", "The initial scan's chunks", [*names, "of"], registry=r
        )
        self.under_replicated = Gauge(
            "highwater_under_replicated_partitions",
            "A relied-on topic's partitions out of sync or without a leader",
            [*names, "topic"],
            registry=r,
        )
        self.stuck = Gauge(
            "highwater_transactions_stuck",
            "Debezium transactions that cannot complete (markers wait for them)",
            [*names, "transactions"],
            registry=r,
        )
        self.state = Enum(
            "highwater_state", "The run's state", names, states=list(STATES), registry=r
        ).labels(*cf)

    def serve(self, host: str, port: int) -> str:
        """Serve ``/metrics`` on ``host:port`` (0: any free port); returns its URL.

        As prometheus_client's ``start_http_server``, but polled every 50 ms, not 500: a
        changefeed's stop waits for the server's shutdown.
        """
        server = make_server(
            host,
            port,
            make_wsgi_app(self.registry),
            _IPv6Server if ":" in host else ThreadingWSGIServer,
            handler_class=_Quiet,
        )
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self._server = server
        self.url = f"http://{host}:{server.server_port}/metrics"
        return self.url

    def close(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- what the coordinator reports ---------------------------------------------------------

    def batch(self, result: BatchResult, seconds: float | None, *, scan: bool = False) -> None:
        """A batch (or an initial-scan chunk, ``scan``) was written and acknowledged."""
        self.rows.inc(result.emitted)
        self.bytes.inc(result.bytes)
        self.duplicates.inc(result.duplicates)
        self.bad.inc(result.bad)
        self.resent.inc(result.resent)
        for outcome, count in (("committed", result.committed), ("aborted", result.aborted)):
            self.row_transactions.labels(self.changefeed_id, outcome).inc(count)
        if scan:
            self.scan_rows.inc(result.emitted)
        if seconds is not None:
            self.batch_seconds.observe(seconds)

    def checkpoint(self, seconds: float, size: int) -> None:
        """A checkpoint record of ``size`` bytes was written in ``seconds``."""
        self.checkpoint_seconds.observe(seconds)
        self.checkpoint_bytes.set(size)

    def lags(self, frontier: Frontier, now_nanos: int | None = None) -> None:
        """The high-water and per-partition lags as of now (wall clock)."""
        now = time.time_ns() if now_nanos is None else now_nanos
        progress = frontier.progress()
        if not progress:
            return
        self.high_water_lag.set(max(0, now - frontier.high_water().wall) / 1e9)
        for sp, p in progress.items():
            lag = max(0, now - p.resolved.wall) / 1e9
            self.partition_lag.labels(self.changefeed_id, sp.topic, str(sp.partition)).set(lag)

    def replicas(self, found: list[Durability]) -> None:
        """What the last look at the relied-on topics' replicas found."""
        for topic in found:
            self.under_replicated.labels(self.changefeed_id, topic.topic).set(
                topic.under_replicated
            )

    def transactions(self, stuck: Mapping[str, str], topics: Iterable[str]) -> None:
        """Per transaction topic, whether a transaction of it cannot complete."""
        for topic in topics:
            self.stuck.labels(self.changefeed_id, topic).set(1 if topic in stuck else 0)

    def scan(self, progress: ScanProgress) -> None:
        """The initial scan's progress."""
        self.scan_chunks.labels(self.changefeed_id, "done").set(progress.chunks_done)
        self.scan_chunks.labels(self.changefeed_id, "total").set(progress.chunks_total)


class _Quiet(WSGIRequestHandler):
    """No access log on stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _IPv6Server(ThreadingWSGIServer):
    address_family = socket.AF_INET6
