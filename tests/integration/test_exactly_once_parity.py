"""Exactly once (the default), the JVM walk and the Python loop commit the same records.

The walk-vs-loop property tests (``tests/spark/test_walk_*``) compare the rows each path
hands to the sink at least once; under ``delivery: exactly_once`` the walk writes through
its own transactional pieces (``Pieces.java``) while the loop's rows are framed for the
sink's. Here both run on the real broker: one seeded source (numbers of every form, text of
any characters, nested values, upstream duplicates, bad records) through two changefeeds in
this process, one as it runs (the walk first, its rests through the loop), one with the walk
turned off (every record through the Python loop), and one whose walk cannot take its plan
(an encoder evolved to one the walk cannot write: each batch read again for the loop).
What a ``read_committed`` consumer reads must be the same: per key the same records, byte
for byte, in the same order (tasks of both paths share output partitions, so only a key's
order is fixed), the same dead letters, and each source partition's committed progress
record the same (where it ends, its floor).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

import pipeline.core.batch.writer
from pipeline.config import parse_config
from pipeline.core.progress.claim import GENERATION_KEY
from sinks.admin import ensure_topics
from tests.integration.test_chaos import config_for
from tests.integration.test_exactly_once import produce
from tests.support.changefeed import run_to_end
from tests.support.kafka import Message, consume_all
from tests.support.walk import counted_walks
from tests.support.workload import Workload

PARTITIONS = 3


def drained(
    bootstrap: str, changefeed_id: str, source: str, spark: Any
) -> tuple[dict[bytes, list[bytes | None]], Counter[tuple[Any, ...]], dict[str, Any]]:
    """An exactly-once changefeed over ``source`` run to the end; what users read of it.

    Per key its records' values in output order; the dead letters (key, value, reason);
    each source partition's last progress record, the run's generation left out.
    """
    raw = {**config_for(bootstrap, changefeed_id, source), "delivery": "exactly_once"}
    raw["spark"] = {"trigger": {"available_now": True}, "max_offsets_per_trigger": 400}
    run_to_end(parse_config(raw, env={}), spark)
    per_key: dict[bytes, list[bytes | None]] = {}
    markers = 0
    for m in consume_all(bootstrap, f"{changefeed_id}.t"):  # read_committed
        if m.key is None:
            markers += 1
        else:
            per_key.setdefault(m.key, []).append(m.value)
    assert markers >= PARTITIONS, "markers on the output"
    dead = Counter(
        (m.key, m.value, reason(m))
        for m in consume_all(bootstrap, f"_highwater_dlq_{changefeed_id}")
    )
    progress = {
        m.key.decode(): {k: v for k, v in json.loads(m.value).items() if k != "generation"}
        for m in consume_all(bootstrap, f"_highwater_progress_{changefeed_id}")
        if m.key is not None and m.value is not None and m.key != GENERATION_KEY.encode()
    }
    return per_key, dead, progress


def reason(m: Message) -> bytes:
    return dict(m.headers).get("highwater.error", b"")


def test_the_walk_and_the_python_loop_commit_the_same_records_exactly_once(
    kafka_bootstrap: str, unique_name: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = unique_name("src")
    workload = Workload(partitions=PARTITIONS, seed=37)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: PARTITIONS})
    produce(kafka_bootstrap, source, workload.records(1200))
    produce(kafka_bootstrap, source, workload.final_markers())

    walks = counted_walks(monkeypatch)
    walk = drained(kafka_bootstrap, unique_name("walk"), source, spark)
    assert walks, "the walk wrote no batch"
    walked_batches = len(walks)

    # the walk's writer whose walk cannot take the plan (an encoder evolved mid-run to one it
    # cannot write): each batch through the loop, read again with the headers dead letters keep
    monkeypatch.setattr(pipeline.core.batch.writer, "walk_plan", lambda plan: None)
    fallback = drained(kafka_bootstrap, unique_name("fallback"), source, spark)
    # the loop's writer for the whole run (its stream reads the headers)
    monkeypatch.setattr(pipeline.core.batch.writer, "walkable", lambda plan: False)
    loop = drained(kafka_bootstrap, unique_name("loop"), source, spark)
    assert len(walks) == walked_batches, "the walk wrote a batch of the loop's changefeeds"
    assert fallback == loop

    (walk_rows, walk_dead, walk_progress), (loop_rows, loop_dead, loop_progress) = walk, loop
    differ = [
        k for k in walk_rows.keys() | loop_rows.keys() if walk_rows.get(k) != loop_rows.get(k)
    ]
    assert not differ, [(k, walk_rows.get(k), loop_rows.get(k)) for k in sorted(differ)[:3]]
    assert sum(map(len, walk_rows.values())) == len(workload.changes)  # each change, once
    assert walk_dead == loop_dead
    assert sum(walk_dead.values()) == len(workload.bad)  # the walk left them to the loop
    assert walk_progress == loop_progress
    stream = [k for k in walk_progress if not k.startswith("scan/")]  # the stream's pieces
    assert len(stream) == PARTITIONS, walk_progress
