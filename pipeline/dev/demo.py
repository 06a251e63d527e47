"""The demo behind the README's first command: a real changefeed on the embedded default.

Starts (or reuses) an embedded broker named ``demo``, writes generated ``orders`` changes to a
source topic, runs the changefeed with ``spark-submit`` through ``highwater run``, and prints
what landed on the output topic per partition, read back with the Kafka console consumer.
When the config asks for Avro with a registry (``examples/orders-avro.yaml``), the embedded
schema registry ``demo`` is started too and the output is read with confluent-kafka's
Avro deserializer. Broker and registry are left running so the output can be explored; the
closing lines say how.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from pipeline.config import load_config
from pipeline.runtime import jars

from .broker import EmbeddedKafka
from .generator import GeneratorSpec, write
from .kafka_tools import read_topic
from .registry import EmbeddedRegistry

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "orders.yaml"
SOURCE_TOPIC = "demo.orders.changes"


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


def run_demo(rows: int, state: Path, config_file: Path | None = None) -> int:
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
    _fresh_topics(bootstrap, [SOURCE_TOPIC, output, config.checkpoint.topic])

    report = write(
        GeneratorSpec(
            topic=SOURCE_TOPIC, rows=rows, partitions=3, resolved_every=max(1, rows // 5)
        ),
        {"bootstrap.servers": bootstrap},
    )
    _say(
        f"wrote {report.total} orders changes ({report.inserts} inserts, {report.updates} "
        f"updates, {report.deletes} deletes) and {report.markers} resolved markers "
        f"to {SOURCE_TOPIC}"
    )

    _say(f"running the changefeed: highwater run --config {config_file}")
    job = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config_file)],
        env=env,
        check=False,
    )
    if job.returncode != 0:
        _say(f"the changefeed failed with exit code {job.returncode}")
        return job.returncode

    _show_output(output, bootstrap, registry_url)
    _say(f"done in {time.monotonic() - started:.0f}s. The broker keeps running; try:")
    print(
        f"    highwater dev kafka-cli --name demo console-consumer --topic {output} "
        "--from-beginning --timeout-ms 5000 --property print.partition=true "
        "--property print.key=true"
    )
    print("    highwater dev kafka --name demo stop")
    if registry_url is not None:
        print("    highwater dev registry --name demo stop")
    return 0


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
