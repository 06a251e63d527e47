"""The demo behind the README's first command: a living changefeed on the embedded default.

Starts (or reuses) an embedded broker named ``demo``, writes generated ``orders`` changes to
a source topic, and starts the changefeed with ``spark-submit`` through ``highwater run``:
first its initial scan (a snapshot of the table), then, while the generator keeps writing
live changes, the stream, with resolved markers advancing on every output partition. Every
few seconds it prints what the output topic holds and what the job status says (high-water
mark, last marker, lag) and where the Prometheus metrics are; then it stops the changefeed as
an operator would (SIGTERM: the batch finishes, a checkpoint, a last marker) and prints the
output read back with the Kafka console consumer. When the config asks for Avro with a
registry (``examples/orders-avro.yaml``), the embedded schema registry ``demo`` is started
too and the output is read with confluent-kafka's Avro deserializer. Broker and registry are
left running so the output can be explored; the closing lines say how.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.config import ChangefeedConfig, load_config
from pipeline.core.operators.status import JobStatus
from pipeline.runtime import jars
from schemas.errors import HighwaterError
from schemas.hlc import Hlc
from sinks.compacted import CompactedTopic

from .broker import EmbeddedKafka
from .generator import GeneratorReport, GeneratorSpec, write
from .kafka_tools import read_topic
from .registry import EmbeddedRegistry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders.yaml"
SOURCE_TOPIC = "demo.orders.changes"
LIVE_SECONDS = 20.0  # how long the generator writes while the changefeed runs
LIVE_RATE = 100.0  # live changes per second
SHOWN_METRICS = (
    "highwater_rows_emitted_total",
    "highwater_scan_rows_total",
    "highwater_markers_sent_total",
    "highwater_high_water_lag_seconds",
)


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def _fresh_topics(bootstrap: str, topics: list[str]) -> None:
    """Delete the demo's topics from an earlier run so the output shows this run only."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = set(admin.list_topics(timeout=30).topics)
    doomed = [t for t in topics if t in existing]
    if not doomed:
        return
    for future in admin.delete_topics(doomed, operation_timeout=30).values():
        future.result()
    while set(doomed) & set(admin.list_topics(timeout=30).topics):
        time.sleep(0.2)


def _fresh_warehouse(bootstrap: str, warehouse: Path, changefeed: str) -> Path:
    """The demo's Iceberg warehouse (docs/how-to/avro-output.md), empty, its applier's group gone.

    An earlier run's tables hold that run's changes, and its applier's group the offsets of
    output topics made again since: both go, so the printed ``highwater apply`` starts new.
    """
    from highwater_consumer.iceberg import NAMESPACE  # noqa: PLC0415 - the [iceberg] extra
    from highwater_consumer.iceberg.catalog import default_group  # noqa: PLC0415

    shutil.rmtree(warehouse, ignore_errors=True)
    group = default_group(changefeed, {"warehouse": str(warehouse)}, NAMESPACE)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_consumer_groups([group], request_timeout=30).values():
        try:
            future.result()
        except KafkaException as exc:  # none yet: nothing to delete
            if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                raise
    return warehouse


def run_demo(
    rows: int, state: Path, config_file: Path | None = None, live_seconds: float = LIVE_SECONDS
) -> int:
    """Run the whole demo; return the changefeed's exit code."""
    config_file = (config_file or EXAMPLE).resolve()
    started = time.monotonic()
    for name, fetched in jars.fetch_all().items():
        _say(f"{name} jars {'fetched' if fetched else 'present'}")
    info = EmbeddedKafka(state / "kafka" / "demo", owned=False).start()
    bootstrap = info.bootstrap_servers
    _say(f"Kafka broker at {bootstrap} (dir {info.directory})")

    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "HIGHWATER_SOURCE_TOPIC": SOURCE_TOPIC,
    }
    os.environ.update(env)
    config = load_config(config_file)
    registry_url = None
    if config.encoder.format == "avro" and config.encoder.schema_registry is not None:
        registry = EmbeddedRegistry(state / "registry" / "demo", owned=False).start()
        registry_url = env["SCHEMA_REGISTRY_URL"] = registry.url
        os.environ.update(env)
        config = load_config(config_file)
        _say(f"schema registry at {registry.url} (dir {registry.directory})")
    output = config.output_topic(config.sources[0])
    # everything an earlier run left of this changefeed, so it starts new on a new source:
    # exactly once, the progress topic's records would have it resume where that run's rows
    # ended (offsets the new source topic does not have)
    kept = [config.checkpoint.topic, config.jobs.topic, config.effective_progress_topic]
    _fresh_topics(bootstrap, [SOURCE_TOPIC, output, *kept])
    warehouse = None  # with declared tables: the Iceberg warehouse an applier can fill
    if all(s.table_schema is not None and s.primary_key for s in config.sources):
        warehouse = _fresh_warehouse(bootstrap, state / "demo" / "iceberg", config.changefeed_id)

    spec = GeneratorSpec(
        topic=SOURCE_TOPIC, rows=rows, partitions=3, resolved_every=max(1, rows // 5)
    )
    report = write(spec, {"bootstrap.servers": bootstrap})
    _say(
        f"wrote {report.total} orders changes ({report.inserts} inserts, {report.updates} "
        f"updates, {report.deletes} deletes) and {report.markers} resolved markers "
        f"to {SOURCE_TOPIC}: the table the initial scan takes a snapshot of"
    )

    code = run_changefeed(
        config_file,
        state / "demo" / "changefeed.log",
        env,
        lambda job: _live(
            config, bootstrap, output, job, first_order_id=rows + 1, seconds=live_seconds
        ),
    )
    if code:
        return code
    _show_output(output, bootstrap, registry_url)
    _say(f"done in {time.monotonic() - started:.0f}s. The broker keeps running; try:")
    print(
        f"    highwater dev kafka-cli --name demo console-consumer --topic {output} "
        "--from-beginning --timeout-ms 5000 --isolation-level read_committed "
        "--property print.partition=true "
        "--property print.key=true"
    )
    print(f"    highwater changefeed query {config.changefeed_id} --bootstrap-servers {bootstrap}")
    if warehouse is not None:  # (docs/how-to/avro-output.md: To Iceberg)
        print(
            f"    highwater apply {config.changefeed_id} --bootstrap-servers {bootstrap} "
            f"--catalog warehouse={warehouse} --idle 5"
        )
    print("    highwater dev kafka --name demo stop")
    if registry_url is not None:
        print("    highwater dev registry --name demo stop")
    return 0


def run_changefeed(
    config_file: Path,
    log_file: Path,
    env: dict[str, str],
    live: Callable[[subprocess.Popen[bytes]], bool],
) -> int:
    """``highwater run`` in the background while ``live`` shows it; then a SIGTERM.

    ``live`` returns False when the job ended (or never got going): its log's end is shown.
    Returns 0, or the changefeed's exit code (1 if it was 0 but ``live`` gave up).
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    _say(f"starting the changefeed: highwater run --config {config_file} (its log: {log_file})")
    with log_file.open("wb") as log:
        job = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config_file)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        shown = live(job)
        if shown:
            _say("stopping the changefeed as an operator would (SIGTERM: finish the batch, stop)")
        job.send_signal(signal.SIGTERM)
        code = job.wait(300)
    finally:
        if job.poll() is None:
            job.kill()
    if not shown or code != 0:
        _say(f"the changefeed ended with exit code {code}; the end of its log:")
        print("\n".join(log_file.read_text(errors="replace").splitlines()[-40:]))
        return code or 1
    return 0


def _live(
    config: ChangefeedConfig,
    bootstrap: str,
    output: str,
    job: subprocess.Popen[bytes],
    *,
    first_order_id: int,
    seconds: float,
) -> bool:
    """The scan, then live changes while the changefeed streams; False: the job ended."""
    jobs = CompactedTopic({"bootstrap.servers": bootstrap}, config.jobs.topic)
    status = _status(jobs, config.changefeed_id)
    while status is None or status.state in ("starting", "scanning"):
        if job.poll() is not None:
            jobs.close()
            return False
        time.sleep(1)
        status = _status(jobs, config.changefeed_id)
    watch = OutputWatch(bootstrap, output)  # the changefeed has created the topic by now
    try:
        watch.poll()
        snapshot = watch.rows
        _say(
            f"initial scan done: {snapshot:,} rows on {output} at the statement time "
            f"{_clock(status.statement_time)}; the first marker says so"
        )
        if status.metrics_url:
            _say(f"the changefeed's Prometheus metrics: {status.metrics_url}")
        _say(f"writing live changes for {seconds:.0f}s at {LIVE_RATE:.0f}/s while it streams:")
        live = LiveChanges(bootstrap, first_order_id, seconds)
        live.start()
        while live.is_alive() and job.poll() is None:
            time.sleep(3)
            watch.poll()
            _progress(watch, _status(jobs, config.changefeed_id), lag=True)
        live.join()
        if live.report is not None:  # let the changefeed reach the generator's last marker
            target = min(live.report.last_resolved.values())
            deadline = time.monotonic() + 60
            while job.poll() is None and time.monotonic() < deadline:
                status = _status(jobs, config.changefeed_id)
                if status is not None and (status.high_water or Hlc(0)) >= target:
                    break
                time.sleep(1)
            watch.poll()
            _progress(watch, status, lag=False)
        _say(f"{snapshot:,} snapshot rows, then {watch.rows - snapshot:,} live change rows")
        if status is not None and status.metrics_url:
            _show_metrics(status.metrics_url)
        return job.poll() is None
    finally:
        watch.close()
        jobs.close()


def _status(jobs: CompactedTopic, changefeed_id: str) -> JobStatus | None:
    data = jobs.get(changefeed_id)
    if data is None:
        return None
    try:
        return JobStatus.decode(data)
    except HighwaterError:
        return None


def _clock(ts: Hlc | None) -> str:
    """An HLC as the wall-clock time it stands for."""
    if ts is None:
        return "-"
    moment = datetime.fromtimestamp(ts.wall / 1e9, tz=timezone.utc)
    return moment.strftime("%H:%M:%S.%f")[:-3]


def _progress(watch: OutputWatch, status: JobStatus | None, *, lag: bool) -> None:
    """A line: output rows and markers so far, the job status's high-water mark (and lag)."""
    markers = "/".join(str(watch.markers[p]) for p in sorted(watch.markers)) or "0"
    high_water = None if status is None else status.high_water
    line = (
        f"    rows {watch.rows:>7,}   markers per partition {markers:<12}  "
        f"high-water {_clock(high_water)}"
    )
    if lag and high_water is not None:
        line += f"  (lag {time.time() - high_water.wall / 1e9:.1f}s)"
    print(line, flush=True)


def _show_metrics(url: str) -> None:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - its own URL
            text = response.read().decode()
    except OSError as exc:
        _say(f"metrics at {url} did not answer: {exc}")
        return
    _say(f"a few of its metrics, scraped from {url}:")
    for line in text.splitlines():
        if line.startswith(SHOWN_METRICS):
            print(f"    {line}")


@dataclass
class OutputWatch:
    """Counts rows and markers per partition of an output topic as they arrive (any format)."""

    bootstrap: str
    topic: str
    rows: int = 0
    markers: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"highwater-demo-watch-{time.time_ns()}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        topic = self._consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        self._consumer.assign(
            [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in topic.partitions]
        )

    def poll(self, budget: float = 2.0) -> None:
        """Take in what arrived since the last call (for at most ``budget`` seconds)."""
        deadline = time.monotonic() + budget
        while time.monotonic() < deadline:
            batch = self._consumer.consume(10_000, timeout=0.5)
            for message in batch:
                if message.error() is not None:
                    continue
                if message.key() is None:
                    self.markers[int(message.partition() or 0)] += 1
                else:
                    self.rows += 1
            if not batch:
                return

    def close(self) -> None:
        """Leave the topic."""
        self._consumer.close()


class LiveChanges(threading.Thread):
    """The generator writing new orders (and changes to them) at a steady rate."""

    def __init__(self, bootstrap: str, first_order_id: int, seconds: float) -> None:
        super().__init__(daemon=True)
        self.spec = GeneratorSpec(
            topic=SOURCE_TOPIC,
            rows=int(LIVE_RATE * seconds),
            partitions=3,
            rate=LIVE_RATE,
            resolved_every=int(LIVE_RATE // 2),  # markers twice a second
            first_order_id=first_order_id,
            seed=1,
        )
        self.bootstrap = bootstrap
        self.report: GeneratorReport | None = None

    def run(self) -> None:
        """Write the live changes, then keep what was written."""
        self.report = write(self.spec, {"bootstrap.servers": self.bootstrap})


def _show_output(output: str, bootstrap: str, registry_url: str | None) -> None:
    """The output topic as a consumer reads it: Avro with the registry, else the console."""
    if registry_url is not None:
        _say(f"output topic {output}, read back with confluent-kafka's AvroDeserializer:")
        _show(avro_messages(output, bootstrap, registry_url))
        _say(f"subjects in the registry: {', '.join(subjects(registry_url))}")
    else:
        _say(f"output topic {output}, read back with the Kafka console consumer:")
        _show(read_topic(output, bootstrap))


def subjects(registry_url: str) -> list[str]:
    """The registry's subjects."""
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415

    return sorted(SchemaRegistryClient({"url": registry_url}).get_subjects())


def avro_consumer(bootstrap: str, registry_url: str, group: str) -> Any:
    """A consumer as an Avro user has one.

    confluent-kafka's ``AvroDeserializer`` for key and value, against the registry, from the
    earliest offset.
    """
    from confluent_kafka import DeserializingConsumer  # noqa: PLC0415
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415
    from confluent_kafka.schema_registry.avro import AvroDeserializer  # noqa: PLC0415

    client = SchemaRegistryClient({"url": registry_url})
    return DeserializingConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "key.deserializer": AvroDeserializer(client),
            "value.deserializer": AvroDeserializer(client),
        }
    )


def avro_messages(topic: str, bootstrap: str, registry_url: str) -> list[tuple[int, int, str, str]]:
    """Every message of an Avro topic, decoded as a consumer would.

    ``(partition, offset, key, value)``, key and value shown as JSON.
    """
    consumer = avro_consumer(bootstrap, registry_url, f"highwater-demo-{time.time_ns()}")
    consumer.subscribe([topic])
    out = []
    idle_until = time.monotonic() + 15
    try:
        while time.monotonic() < idle_until:
            message = consumer.poll(1)
            if message is None or message.error() is not None:
                continue
            idle_until = time.monotonic() + 3
            key = "null" if message.key() is None else json.dumps(message.key())
            place = (int(message.partition() or 0), int(message.offset() or 0))
            out.append((*place, key, json.dumps(message.value())))
    finally:
        consumer.close()
    return out


def _show(messages: list[tuple[int, int, str, str]]) -> None:
    rows = [m for m in messages if m[2] != "null"]
    markers = [m for m in messages if m[2] == "null"]
    per_partition = Counter(m[0] for m in rows)
    for partition in sorted(per_partition):
        print(f"  partition {partition}: {per_partition[partition]} rows")
    print("  first rows (partition, offset, key, value):")
    for partition, offset, key, value in sorted(rows)[:6]:
        print(f"    {partition}\t{offset}\t{key}\t{value[:300]}")
    print("  resolved markers (partition, offset, value):")
    for partition, offset, _key, value in sorted(markers, key=lambda m: (m[0], m[1]))[-12:]:
        print(f"    {partition}\t{offset}\t{value}")
