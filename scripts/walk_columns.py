"""key_column and headers_json_column_name: the JVM walk against the Python loop (issue 55).

    .venv/bin/python scripts/walk_columns.py [rows] [json|avro]

A fresh embedded broker; ``rows`` generated orders (12 partitions), and the same orders with a
``meta`` object column, written compact; then, in one local[2] SparkSession, each changefeed
(updated and diff; JSON out, or Avro through a fresh embedded registry with the orders'
declared schema) drained in one batch, both deliveries, every kind warmed once and two
rounds: the plain envelope (the walk), keyed by ``customer_id`` (walk, loop), headers from
``meta`` (walk, loop). The loop is forced by making ``walkable`` answer no. Prints records/s
per kind and round (docs/benchmarks.md, sessions 46 and 47).
"""

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from pipeline.config import SparkConfig, parse_config
from pipeline.core.batch import writer
from pipeline.dev.bench import ORDERS_SCHEMA, timed
from pipeline.dev.broker import EmbeddedKafka
from pipeline.dev.generator import GeneratorSpec, write
from pipeline.dev.registry import EmbeddedRegistry
from pipeline.runtime.session import build_session
from sinks.admin import ensure_topics
from tests.support.kafka import consume_all

ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
AVRO = len(sys.argv) > 2 and sys.argv[2] == "avro"
ORDERS = json.loads(ORDERS_SCHEMA.read_text())  # declared for Avro out; meta's type is moot
WITH_META = {**ORDERS, "fields": [*ORDERS["fields"], {"name": "meta", "type": ["null", "string"]}]}
KEYED = {"updated": True, "diff": True, "key_column": "customer_id", "unordered": True}
HEADED = {"updated": True, "diff": True, "headers_json_column_name": "meta"}
KINDS = {  # name: (source, encoder, walk)
    "plain-walk": ("plain.src", {"updated": True, "diff": True}, True),
    "key_column-walk": ("plain.src", KEYED, True),
    "key_column-loop": ("plain.src", KEYED, False),
    "headers-walk": ("meta.src", HEADED, True),
    "headers-loop": ("meta.src", HEADED, False),
}


def config(  # noqa: PLR0917 - one changefeed of the script
    bootstrap: str,
    name: str,
    source: str,
    encoder: dict[str, Any],
    delivery: str,
    registry: str | None,
) -> Any:
    """One changefeed of ``source``, drained in one batch (Avro out through ``registry``)."""
    table: dict[str, Any] = {"topic": source, "table": "orders"}
    if registry is not None:
        encoder = {**encoder, "format": "avro", "schema_registry": {"url": registry}}
        schema = WITH_META if source == "meta.src" else ORDERS
        table |= {"table_schema": schema, "primary_key": ["region", "order_id"]}
    return parse_config(
        {
            "changefeed_id": name,
            "kafka": {"bootstrap_servers": bootstrap},
            "sources": [table],
            "cursor": "0.0000000000",
            "sink": {"topic_prefix": f"{name}.", "partitions": 3},
            "encoder": encoder,
            "resolved": {"interval": "1s"},
            "checkpoint": {"min_checkpoint_frequency": "1s"},
            "delivery": delivery,
            "spark": {"trigger": {"available_now": True}, "max_offsets_per_trigger": ROWS},
        },
        env={},
    )


def with_meta(bootstrap: str) -> None:
    """plain.src again as meta.src, each image with a meta object, compact."""
    ensure_topics({"bootstrap.servers": bootstrap}, {"meta.src": 12})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for m in consume_all(bootstrap, "plain.src"):
        value = m.value
        if m.key is not None and value is not None:
            change = json.loads(value)
            for side in ("after", "before"):
                if change.get(side):
                    image = change[side]
                    image["meta"] = {"trace": f"t{image['order_id']}", "zone": "eu"}
            value = json.dumps(change, separators=(",", ":"), ensure_ascii=False).encode()
        producer.produce("meta.src", key=m.key, value=value, partition=m.partition)
        producer.poll(0)
    producer.flush()


def main() -> None:
    """Every kind, both deliveries, a warm-up round and two measured."""
    with tempfile.TemporaryDirectory() as scratch:
        broker = EmbeddedKafka(scratch)
        bootstrap = broker.start().bootstrap_servers
        service = EmbeddedRegistry(Path(scratch) / "registry") if AVRO else None
        registry = None if service is None else service.start().url
        spec = GeneratorSpec(topic="plain.src", rows=ROWS, partitions=12, resolved_every=10_000)
        write(spec, {"bootstrap.servers": bootstrap})
        with_meta(bootstrap)
        spark = build_session(SparkConfig(master="local[2]", conf={}), "walk-columns")
        walkable = writer.walkable
        rates: dict[tuple[str, str], list[float]] = {}
        for n in range(-1, 2):  # round -1 warms every kind
            for delivery in ("at_least_once", "exactly_once"):
                for name, (source, encoder, walk) in KINDS.items():
                    writer.walkable = walkable if walk else (lambda _plan: False)
                    changefeed = f"r{n + 1}-{delivery[:2]}-{name}"
                    feed = config(bootstrap, changefeed, source, encoder, delivery, registry)
                    run = timed(spark, feed)
                    if n >= 0:
                        rates.setdefault((delivery, name), []).append(ROWS / run.seconds)
        for (delivery, name), rounds in rates.items():
            print(f"{delivery} {name}: " + ", ".join(f"{r:,.0f} /s" for r in rounds), flush=True)
        spark.stop()
        if service is not None:
            service.stop()
        broker.stop()


if __name__ == "__main__":
    main()
