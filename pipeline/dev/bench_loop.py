"""The changefeed's per-record loop alone, without Spark or Kafka: CPU seconds per change.

``make bench`` measures the whole changefeed against a plain Spark copy on a noisy two-core
machine; this isolates the Python work of one task (``pipeline.core.batch.loop.process`` over Arrow
batches of the generator's records, wrapped JSON with ``updated`` and ``diff``, as the bench).
Run it for two checkouts side by side to compare them::

    python -m pipeline.dev.bench_loop                       # this checkout
    PYTHONPATH=/tmp/old python -m pipeline.dev.bench_loop   # another one (a git worktree)

It prints the best of ``--rounds`` CPU times (``time.process_time``) in µs per change.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pipeline.config import parse_config
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.loop import process
from pipeline.dev.bench import ORDERS_SCHEMA
from pipeline.dev.generator import (
    Change,
    GeneratorSpec,
    OrdersGenerator,
    encode_change,
    encode_key,
    encode_marker,
)

TOPIC = "orders"
PARTITIONS = 12
BATCH_ROWS = 10_000  # Spark's Arrow batches (spark.sql.execution.arrow.maxRecordsPerBatch)


def source_batches(rows: int) -> list[Any]:
    """The generator's records as Arrow batches, one source partition after another."""
    import pyarrow as pa  # noqa: PLC0415

    spec = GeneratorSpec(topic=TOPIC, rows=rows, partitions=PARTITIONS, resolved_every=10_000)
    by_partition: dict[int, list[tuple[bytes | None, bytes]]] = {}
    for event in OrdersGenerator(spec).events():
        if isinstance(event, Change):
            record: tuple[bytes | None, bytes] = (encode_key(event.key), encode_change(event))
        else:
            record = (None, encode_marker(event))
        by_partition.setdefault(event.partition, []).append(record)
    batches = []
    for partition, records in sorted(by_partition.items()):
        for start in range(0, len(records), BATCH_ROWS):
            chunk = records[start : start + BATCH_ROWS]
            batches.append(
                pa.RecordBatch.from_arrays(
                    [
                        pa.array([k for k, _ in chunk], pa.binary()),
                        pa.array([v for _, v in chunk], pa.binary()),
                        pa.array([TOPIC] * len(chunk), pa.string()),
                        pa.array([partition] * len(chunk), pa.int32()),
                        pa.array(range(start, start + len(chunk)), pa.int64()),
                    ],
                    names=["key", "value", "topic", "partition", "offset"],
                )
            )
    return batches


# The outputs it can time: the options each adds to wrapped's ``updated`` and ``diff``
OUTPUTS: dict[str, dict[str, Any]] = {
    "json": {},
    "enriched": {"envelope": "enriched", "enriched_properties": ["source"]},
    "enriched-schema": {"envelope": "enriched", "enriched_properties": ["source", "schema"]},
    "protobuf": {"format": "protobuf"},
    "protobuf-enriched": {
        "format": "protobuf",
        "envelope": "enriched",
        "enriched_properties": ["source"],
    },
}


def plan(output: str = "json") -> BatchPlan:
    """The bench's changefeed plan: ``updated`` and ``diff``, every floor at 0.

    ``output``: wrapped JSON (the bench's), or another of :data:`OUTPUTS`.
    """
    from encoders.enriched import EnrichedJsonEncoder  # noqa: PLC0415
    from encoders.json import JsonEncoder  # noqa: PLC0415
    from encoders.protobuf import ProtobufEncoder  # noqa: PLC0415

    config = parse_config(
        {
            "changefeed_id": "bench-loop",
            "kafka": {"bootstrap_servers": "unused:9092"},
            "sources": [
                {
                    "topic": TOPIC,
                    "table": "orders",
                    "table_schema": str(ORDERS_SCHEMA),
                    "primary_key": ["region", "order_id"],
                }
            ],
            "encoder": {"updated": True, "diff": True} | OUTPUTS[output],
        }
    )
    options, table = config.encoder, config.sources[0].declared_schema
    encoder: Any = JsonEncoder(options)
    if options.format == "protobuf":
        encoder = ProtobufEncoder(options, config.changefeed_id, table)
    elif options.envelope == "enriched":
        encoder = EnrichedJsonEncoder(options, config.changefeed_id, table)
    return BatchPlan.of(config, {TOPIC: encoder}, {})


def main() -> None:
    """Time the loop; print µs per change (best round) and the output's size as a check."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", choices=sorted(OUTPUTS), default="json")
    args = parser.parse_args()
    batches = source_batches(args.rows)
    changes = sum(b.column("key").null_count for b in batches)
    changes = sum(b.num_rows for b in batches) - changes
    the_plan = plan(args.output)
    times, out_bytes = [], 0
    for _ in range(args.rounds):
        started = time.process_time()
        out = list(process(the_plan, iter(batches)))
        times.append(time.process_time() - started)
        out_bytes = sum(b.column("value").nbytes for b in out)
    per = [t / changes * 1e6 for t in times]
    print(
        f"LOOP {args.output} {changes:,} changes: best {min(per):.2f} µs/change "
        f"(rounds {', '.join(f'{p:.2f}' for p in per)}); output values {out_bytes:,} bytes",
        flush=True,
    )


if __name__ == "__main__":
    main()
