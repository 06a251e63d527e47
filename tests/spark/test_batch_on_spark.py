"""The batch plan on a local SparkSession: the Arrow loop, coalesced tasks, observed summaries."""

import json

from pyspark.sql import Observation

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan, read_result
from pipeline.core.batch.loop import kafka_records
from schemas.hlc import Hlc

SRC = "src.orders"


def ts(n: int) -> str:
    return f"17000000000000000{n:02d}.0000000000"


def test_records_keep_partition_order_and_summaries_reach_the_driver(spark) -> None:
    rows = []
    for partition in range(6):  # more source partitions than cores: tasks walk several
        for offset in range(40):
            key = json.dumps([partition, offset % 5]).encode()
            value = {"after": {"n": offset}, "updated": ts(offset % 30 + 1)}
            rows.append((key, json.dumps(value).encode(), SRC, partition, offset))
        rows.append((None, json.dumps({"resolved": ts(5)}).encode(), SRC, partition, 40))
    frame = (
        spark.createDataFrame(
            rows, "key binary, value binary, topic string, partition int, offset bigint"
        )
        .repartition(6, "partition")
        .sortWithinPartitions("offset")
    )
    plan = BatchPlan(
        thresholds={(SRC, p): Hlc.parse(ts(2)) for p in range(6)},  # rows at or below T2 drop
        tables={SRC: "orders"},
        formats={SRC: "native"},
        routes={SRC: "out.orders"},
        encoders={SRC: JsonEncoder(EncoderConfig(updated=True))},
        dlq_topic=None,
    )
    observation = Observation("test")
    written = kafka_records(frame, plan, observation).collect()
    result = read_result(observation)

    assert {r["topic"] for r in written} == {"out.orders"}
    per_key: dict[bytes, list[int]] = {}
    for r in written:
        per_key.setdefault(bytes(r["key"]), []).append(json.loads(r["value"])["after"]["n"])
    assert all(ns == sorted(ns) for ns in per_key.values()), "each key's versions in order"
    kept = [o for o in range(40) if o % 30 + 1 > 2]
    assert len(written) == 6 * len(kept)
    assert [(s.partition.partition, s.next_offset, s.resolved) for s in result.partitions] == [
        (p, 41, Hlc.parse(ts(5))) for p in range(6)
    ]
    assert (result.emitted, result.duplicates) == (6 * len(kept), 6 * (40 - len(kept)))
