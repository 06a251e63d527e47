"""The bench's generated feeds to Avro output: the walk takes every record, as the loop writes.

``make bench``'s sources part measures Debezium (JSON) and Canal-JSON changefeeds writing Avro
of a declared table of primitive columns (``bench_sources.py``); its ratios are the walk's only
if the walk takes those records, so here the walk of a few hundred of them leaves no rest and
writes what the Python loop writes.
"""

from typing import Any

import pytest

from encoders.avro import AvroEncoder, Framing
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from pipeline.dev.bench_sources import CANAL_TABLE, DEBEZIUM_TABLE
from pipeline.dev.canal_feed import CanalFeed
from pipeline.dev.debezium_feed import DebeziumFeed, Feed
from schemas.avro import OutputSchemas
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from tests.support.walk import frame, same_as_the_python_loop

SRC = "bench.orders"
COUNT = 300


@pytest.mark.parametrize(
    ("fmt", "feed", "table", "key"),
    [
        ("debezium", DebeziumFeed(), DEBEZIUM_TABLE, ["region", "order_id"]),
        ("canal-json", CanalFeed(), CANAL_TABLE, ["id"]),
    ],
    ids=["debezium", "canal-json"],
)
def test_the_walk_takes_every_record_of_the_bench_feeds_to_avro(
    spark: Any, fmt: str, feed: Feed, table: dict[str, Any], key: list[str]
) -> None:
    options = EncoderConfig(format="avro", updated=True, diff=True)
    schemas = OutputSchemas.of(TableSchema.of(table, key), options)
    encoder = AvroEncoder(schemas, Framing.confluent(1, 2, 3), options, "orders")
    the_plan = BatchPlan(
        thresholds={(SRC, 0): Hlc(0)},
        tables={SRC: "orders"},
        formats={SRC: fmt},
        routes={SRC: "out.orders"},
        encoders={SRC: encoder},
        dlq_topic=None,
    )
    records = [(k, v, SRC, 0, offset, None) for offset, (_, k, v) in enumerate(feed.events(COUNT))]
    batch = frame(spark, records, 1)
    rows, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    taken = len(rows.collect())
    result, rests = walked.result()
    assert rests == []
    assert taken == result.partitions[0].emitted >= COUNT  # Canal: one to three rows an event
    same_as_the_python_loop(batch, the_plan, lambda _key: 0)
