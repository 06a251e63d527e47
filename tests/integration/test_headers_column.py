"""`headers_json_column_name` on the real broker and Spark, exactly once, with `extra_headers`.

Rows whose ``meta`` column holds a JSON object (any characters, numbers of every form, nested
values, nulls), its text, or nothing; a delete with its old version. Read back by a
confluent-kafka consumer: each record's headers are its object's members (then the fixed
``extra_headers``), its value has no ``meta``; a row whose ``meta`` is no object went to the
dead-letter topic; markers on every partition. Sources written compact are the JVM walk's
(up to the first row whose ``meta`` is no object), spaced ones the Python loop's.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from sinks.admin import ensure_topics
from tests.integration.test_exactly_once import produce
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.kafka import consume_all
from tests.support.walk import walked_rests

T0 = 1_700_000_000_000_000_000
EXTRA = {"zone": "eu"}


def change(
    order_id: int, t: int, meta: Any, *, delete: bool = False, compact: bool = True
) -> tuple[bytes, bytes]:
    image = {"order_id": order_id, "meta": meta}
    value = {"after": None if delete else image, "before": image if delete else None}
    value["updated"] = f"{T0 + t}.0000000000"
    spacing = (",", ":") if compact else (", ", ": ")
    text = json.dumps(value, ensure_ascii=False, separators=spacing)
    return json.dumps([order_id]).encode(), text.encode()


@pytest.mark.parametrize("compact", [True, False], ids=["walk", "python_loop"])
def test_a_json_columns_members_are_each_records_headers(  # noqa: PLR0917
    kafka_bootstrap: str,
    unique_name: Any,
    spark: Any,
    monkeypatch: Any,
    caplog: Any,
    compact: bool,
) -> None:
    source = unique_name("src")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 2})
    rests = walked_rests(monkeypatch)
    metas = [
        (1, {"trace": "ü ✓ \u2028", "n": -0.0, "big": 12345678901234567890, "x": None}),
        (3, None),
        (4, {"deep": {"a": [1, {"b": None}]}}),
        (1, {"trace": "gone"}),  # deleted: from its old version
        (2, '{"trace": "as text"}'),  # the object's JSON text: the walk leaves the rest here
        (5, [1, 2]),  # no object: a dead letter
    ]
    rows = [
        change(order_id, t, meta, delete=t == 4, compact=compact)
        for t, (order_id, meta) in enumerate(metas, start=1)
    ]
    marker = json.dumps({"resolved": f"{T0 + 7}.0000000000"}).encode()
    produce(
        kafka_bootstrap,
        source,
        [(0, k, v) for k, v in rows] + [(p, None, marker) for p in (0, 1)],
    )
    name = unique_name("hdr")
    config = changefeed_config(
        kafka_bootstrap,
        name,
        [(source, "orders")],
        encoder={"updated": True, "diff": True, "headers_json_column_name": "meta"},
        sink={"extra_headers": EXTRA},
        on_error="dlq",
    )
    caplog.set_level(logging.INFO, logger="pipeline.core.batch.writer")
    run_to_end(config, spark)
    first = 4 if compact else 0  # where the Python loop took over partition 0
    assert [(r.partition.partition, r.start) for r in rests] == [(0, first)]
    left = 7 - first  # partition 0 holds the six rows and a marker
    assert f"the JVM walk left {left} record(s) to the Python loop, from " in caplog.text
    records = consume_all(kafka_bootstrap, config.output_topic(config.sources[0]))
    fixed = (("zone", b"eu"),)
    by_key = {m.key: m for m in records if m.key is not None and m.key != b"[1]"}
    ones = [m for m in records if m.key == b"[1]"]
    assert {m.partition for m in records if m.key is None} == {0, 1, 2}
    assert ones[0].headers == (
        ("trace", "ü ✓ \u2028".encode()),
        ("n", b"-0.0"),
        ("big", b"12345678901234567890"),
        *fixed,
    )
    assert ones[1].headers == (("trace", b"gone"), *fixed)  # the delete's old version
    assert by_key[b"[2]"].headers == (("trace", b"as text"), *fixed)
    assert by_key[b"[3]"].headers == fixed
    assert by_key[b"[4]"].headers == (("deep", b'{"a":[1,{"b":null}]}'), *fixed)
    for m in [*ones, *by_key.values()]:
        value = json.loads(m.value or b"")
        assert all("meta" not in (value[side] or {}) for side in ("after", "before"))
    (dead,) = consume_all(kafka_bootstrap, config.effective_dlq_topic)
    assert json.loads(dead.key or b"") == [5]
    assert b"not a JSON object" in dict(dead.headers)["highwater.error"]
