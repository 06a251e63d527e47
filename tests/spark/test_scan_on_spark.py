"""An initial-scan chunk on a local SparkSession: grouped by key in the JVM, walked in Python."""

import json

from pyspark.sql import DataFrame, Observation, SparkSession

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan, read_result
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.scan.scan import ScanPlan, chunk_records
from schemas.hlc import Hlc

SRC = "src.orders"
T = Hlc(1_700_000_000_000_000_050, 3)  # the statement time


def change(order_id: int, wall: int, logical: int = 0, **extra: object) -> tuple[bytes, bytes]:
    value = {"after": {"order_id": order_id, "at": wall}, "updated": f"{wall}.{logical:010d}"}
    return json.dumps([order_id]).encode(), json.dumps(value | extra).encode()


def chunk(spark: SparkSession, records: list[tuple[bytes | None, bytes]]) -> DataFrame:
    """One Kafka partition's records, in offset order, as Spark's Kafka reader gives them."""
    rows = [(key, value, offset) for offset, (key, value) in enumerate(records)]
    return spark.createDataFrame(rows, "key binary, value binary, offset bigint").coalesce(1)


W = 1_700_000_000_000_000_000
HISTORY: list[tuple[bytes | None, bytes]] = [
    change(1, W + 10),  # 0: superseded by 2, 4 and 12
    change(2, W + 20),  # 1: key 2's only decodable version: its snapshot row
    change(1, W + 40),  # 2: superseded by 4
    (None, json.dumps({"resolved": f"{W + 45}.0000000000"}).encode()),  # 3: a marker
    change(1, W + 50, 3),  # 4: exactly T: key 1's snapshot row
    change(1, W + 50, 4),  # 5: just after T: a change
    change(3, W + 30),  # 6: superseded by 7
    change(3, W + 35),  # 7: key 3's snapshot row
    change(3, W + 35),  # 8: an upstream duplicate of 7 (the first offset wins)
    (json.dumps([4]).encode(), b'{"after": {}, "updated": "soon"}'),  # 9: bad, reported
    change(4, W + 5),  # 10: key 4's snapshot row
    change(5, W + 60),  # 11: inserted after T only
    change(1, W + 20),  # 12: a stale duplicate after the change: superseded
    (b"[2]", f'{{"after": 7, "updated": "{W + 1}"}}'.encode()),  # 13: bad, but superseded
]


def test_a_chunk_emits_the_snapshot_then_the_later_changes(spark: SparkSession) -> None:
    plan = ScanPlan(
        BatchPlan(
            thresholds={},
            tables={SRC: "orders"},
            formats={SRC: "native"},
            routes={SRC: "out.orders"},
            encoders={SRC: JsonEncoder(EncoderConfig(updated=True, mvcc_timestamp=True))},
            dlq_topic=None,
        ),
        T,
        chunk=SourcePartition(SRC, 0),
    )
    observation = Observation("scan")
    written = chunk_records(chunk(spark, HISTORY), plan, observation).collect()
    result = read_result(observation)

    rows = [(json.loads(r["key"]), json.loads(r["value"])) for r in written]
    emitted = [(key[0], value["after"]["at"], value["updated"]) for key, value in rows]
    # keys come in the order of their hashes; each key's rows in commit order
    assert sorted(emitted, key=lambda row: row[0]) == [
        (1, W + 50, str(T)),
        (1, W + 50, f"{W + 50}.0000000004"),
        (2, W + 20, str(T)),
        (3, W + 35, str(T)),
        (4, W + 5, str(T)),
        (5, W + 60, f"{W + 60}.0000000000"),
    ]
    (seen,) = result.partitions
    assert seen.bad == 1, "9 has no time: decoded and reported; 13 is superseded: not decoded"
    assert result.first_bad is not None
    assert result.first_bad[0].offset == 9
