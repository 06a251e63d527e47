"""`sink.extra_headers` (CockroachDB's `extra_headers`): every output record carries them.

One seeded source (numbers of every form, text of any characters, upstream duplicates, bad
records) through the JVM walk and through the Python loop, exactly once (the default), read
back by a confluent-kafka ``read_committed`` consumer: every row and every resolved marker has
the fixed headers, in order, after its own (a dead letter's reason and source); the two paths
write the same records with the same headers, key by key. Beside it, the same source without
the option: no row has a header (the check can fail).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

import pipeline.core.batch.writer
from pipeline.config import parse_config
from sinks.admin import ensure_topics
from tests.integration.test_chaos import config_for
from tests.integration.test_exactly_once import produce
from tests.support.changefeed import run_to_end
from tests.support.kafka import consume_all
from tests.support.walk import counted_walks
from tests.support.workload import Workload

PARTITIONS = 3
HEADERS = {"zone": "eu-west-1", "app": "örders ✓ \u2028", "empty": ""}
AS_SENT = tuple((name, value.encode()) for name, value in HEADERS.items())


def drained(
    bootstrap: str, changefeed_id: str, source: str, spark: Any, headers: dict[str, str] | None
) -> tuple[dict[bytes, list[tuple[Any, ...]]], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Per key its records (value, headers); the markers' headers; the dead letters'."""
    raw = config_for(bootstrap, changefeed_id, source)
    raw["spark"] = {"trigger": {"available_now": True}, "max_offsets_per_trigger": 1000}
    if headers is not None:
        raw["sink"] = {**raw["sink"], "extra_headers": headers}
    run_to_end(parse_config(raw, env={}), spark)
    rows: dict[bytes, list[tuple[Any, ...]]] = {}
    markers = []
    for m in consume_all(bootstrap, f"{changefeed_id}.t"):  # read_committed
        if m.key is None:
            markers.append(m.headers)
        else:
            rows.setdefault(m.key, []).append((m.value, m.headers))
    dead = [m.headers for m in consume_all(bootstrap, f"_highwater_dlq_{changefeed_id}")]
    return rows, markers, dead


def test_every_record_carries_the_extra_headers_on_the_walk_and_the_python_loop(
    kafka_bootstrap: str, unique_name: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = unique_name("src")
    workload = Workload(partitions=PARTITIONS, seed=53)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: PARTITIONS})
    produce(kafka_bootstrap, source, workload.records(300))
    produce(kafka_bootstrap, source, workload.final_markers())

    walks = counted_walks(monkeypatch)
    walk_rows, walk_markers, walk_dead = drained(
        kafka_bootstrap, unique_name("walk"), source, spark, HEADERS
    )
    assert walks, "the walk wrote no batch"
    assert sum(map(len, walk_rows.values())) == len(workload.changes)  # each change, once
    assert Counter(h for rows in walk_rows.values() for _, h in rows) == Counter(
        {AS_SENT: len(workload.changes)}
    )
    assert len(walk_markers) >= PARTITIONS
    assert set(walk_markers) == {AS_SENT}, "markers carry them too"
    assert len(walk_dead) == len(workload.bad)
    for headers in walk_dead:  # the dead letter's own first, then the fixed ones
        assert [name for name, _ in headers[:2]] == ["highwater.error", "highwater.source"]
        assert headers[2:] == AS_SENT

    monkeypatch.setattr(pipeline.core.batch.writer, "walkable", lambda plan: False)
    loop_rows, loop_markers, loop_dead = drained(
        kafka_bootstrap, unique_name("loop"), source, spark, HEADERS
    )
    assert loop_rows == walk_rows, "the loop writes the walk's records, headers and all"
    assert set(loop_markers) == {AS_SENT}
    assert sorted(h[2:] for h in loop_dead) == sorted(h[2:] for h in walk_dead)

    # the negative control: without the option, no row has a header
    plain_rows, plain_markers, _ = drained(
        kafka_bootstrap, unique_name("plain"), source, spark, None
    )
    assert {h for rows in plain_rows.values() for _, h in rows} == {()}
    assert set(plain_markers) == {()}
