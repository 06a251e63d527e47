"""One partition-summary schema, two producers: the golden test.

The same records of one source partition go through the JVM walk and through the Python loop;
each producer's summary text, read as JSON, must equal ``tests/golden/summaries.json``, and
parse as the one declaration (``pipeline/core/batch/summary.py``). A field one producer adds, drops,
renames or spells another way fails here, not in a changefeed.

To write the golden file anew after a deliberate change of the schema:
``HIGHWATER_WRITE_GOLDEN=1 pytest tests/spark/test_summary_golden.py`` (then read its diff).
"""

import json
import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Observation

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.loop import kafka_records
from pipeline.core.batch.summary import Summary
from pipeline.core.batch.walk import Walked, rest_plan, walk_plan
from schemas.hlc import Hlc

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "summaries.json"
SRC = "src.orders"
WALL = 1700000000000000000
SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "headers array<struct<key: string, value: binary>>"
)


def t(n: int) -> str:
    return f"{WALL + n}.0000000000"


# One partition: a marker (floor 5), a duplicate below it, two changes, a key the walk does not
# take as it came (spaced: written again by the loop), one more change.
RECORDS = [
    (None, f'{{"resolved":"{t(5)}"}}'),
    (b"[0,1]", f'{{"after":{{"n":1}},"before":null,"updated":"{t(3)}"}}'),
    (b"[0,2]", f'{{"after":{{"n":2,"s":"\\u00e9"}},"before":null,"updated":"{t(10)}"}}'),
    (b"[0,3]", f'{{"after":null,"before":{{"d":-0.50}},"updated":"{t(12)}"}}'),
    (b"[ 0, 4 ]", f'{{"after":{{"n":4}},"before":null,"updated":"{t(13)}"}}'),
    (b"[0,5]", f'{{"after":{{"n":5}},"before":null,"updated":"{t(14)}"}}'),
]


def plan() -> BatchPlan:
    return BatchPlan(
        thresholds={(SRC, 0): Hlc(WALL + 1)},
        tables={SRC: "orders"},
        formats={SRC: "native"},
        routes={SRC: "out.orders"},
        encoders={SRC: JsonEncoder(EncoderConfig(updated=True, diff=True))},
        dlq_topic="dlq",
        new_partition_floor=Hlc(WALL),
    )


def loop_summaries(frame: Any, the_plan: BatchPlan) -> list[dict[str, Any]]:
    observation = Observation("golden")
    kafka_records(frame, the_plan, observation).collect()
    return [json.loads(text) for text in json.loads(observation.get["summaries"])]


def produced(spark: Any) -> dict[str, Any]:
    """Each producer's summaries of ``RECORDS``, as JSON."""
    rows = [(k, v.encode(), SRC, 0, o, None) for o, (k, v) in enumerate(RECORDS)]
    # one Spark partition (not coalesce(1): Spark folds it into the loop's own coalesce)
    frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, 1), SCHEMA)
    the_plan = plan()
    walk = walk_plan(the_plan)
    assert walk is not None
    records, walked = Walked.rows(frame, walk, 0)
    records.collect()
    walk_texts = walked.summaries.texts()
    _, rests = walked.result()
    (rest,) = rests
    rest_frame = frame.where(f"offset >= {rest.start} and offset < {rest.stop}")
    return {
        "walk": [json.loads(text) for text in walk_texts],
        "loop_rest": loop_summaries(rest_frame, rest_plan(the_plan, rests)),
        "loop": loop_summaries(frame, the_plan),
    }


def test_both_producers_write_the_golden_summaries(spark) -> None:
    found = produced(spark)
    if os.environ.get("HIGHWATER_WRITE_GOLDEN"):  # never passes: the file is what is tested
        GOLDEN.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        pytest.fail(f"{GOLDEN} written: read its diff, then run again without the variable")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert found == golden
    for summaries in found.values():  # and each is the one declaration, every field there
        for summary in summaries:
            assert set(summary) == set(Summary.model_fields)
            Summary.parse(json.dumps(summary))


def test_the_golden_file_says_what_each_producer_saw() -> None:
    """The golden values themselves, read as what they mean (so a regenerated file is read)."""
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    (walk,), (rest,), (loop,) = golden["walk"], golden["loop_rest"], golden["loop"]
    # the walk: the duplicate dropped, two changes written, stopped at the spaced key
    assert (walk["next_offset"], walk["emitted"], walk["duplicates"]) == (4, 2, 1)
    assert walk["resolved"] == t(5)
    assert walk["deferred"] == [4, 6, t(5), None]
    # the loop over the rest, from the walk's floor: both changes written
    assert (rest["next_offset"], rest["emitted"], rest["deferred"]) == (6, 2, None)
    # the loop alone: the whole partition
    assert (loop["next_offset"], loop["emitted"], loop["duplicates"]) == (6, 4, 1)
    assert loop["resolved"] == t(5)
    assert walk["bytes"] + rest["bytes"] == loop["bytes"]


def test_a_summary_that_is_not_the_declared_one_is_refused_by_name() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))["loop"][0]
    for broken in (
        {k: v for k, v in golden.items() if k != "resent"},  # a field missing
        {**golden, "extra": 1},  # a field not declared
        {**golden, "emitted": "4"},  # a number as text
    ):
        with pytest.raises(Exception, match="not a partition summary"):
            Summary.parse(json.dumps(broken))
