"""Source formats other than ``native`` on a real broker, through spark-submit.

canal-json: events shaped as TiCDC writes them (one row or several per event, DDL on
partition 0, watermarks on every partition) become CockroachDB-style envelopes; the
watermarks become resolved markers on every output partition. Read back with confluent-kafka.
The changefeed runs in this process (the format is not about ``spark-submit``).
"""

from __future__ import annotations

import json
from typing import Any

from confluent_kafka import Producer

from pipeline.config import parse_config
from pipeline.core.sources.canal import tso_time
from sinks.admin import ensure_topics
from tests.support.canal import canal, tso, watermark
from tests.support.changefeed import run_to_end
from tests.support.kafka import consume_all


def test_canal_json_from_ticdc_becomes_envelopes_with_markers_on_every_partition(
    kafka_bootstrap: str, unique_name: Any, spark: Any
) -> None:
    source, changefeed_id = unique_name("ticdc"), unique_name("cf")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 2})
    t = 1_700_000_000_000  # ms
    records = [
        (0, canal("CREATE", tso(t), None, isDdl=True, sql="create table orders (…)")),
        (
            0,
            canal(
                "INSERT",
                tso(t + 1),
                [{"id": "1", "amount": "12345678901234567890.1234567890", "note": "ü 𝄞"}],
            ),
        ),
        (
            1,
            canal(
                "INSERT",
                tso(t + 2),
                [
                    {"id": "2", "amount": "-0.0000000001", "note": None},
                    {"id": "4", "amount": "0", "note": '"q"'},
                ],
            ),
        ),
        (0, watermark(tso(t + 3))),
        (1, watermark(tso(t + 3))),
        (
            0,
            canal(
                "UPDATE",
                tso(t + 4, 1),
                [{"id": "1", "amount": "1.5000000000", "note": "x"}],
                old=[{"amount": "2.0000000000"}],
            ),
        ),
        (1, b'{"type": "INSERT"}'),  # no _tidb: a dead letter, named
        (1, canal("DELETE", tso(t + 5), [{"id": "2", "amount": "-0.0000000001", "note": None}])),
        (0, watermark(tso(t + 6))),
        (1, watermark(tso(t + 6))),
    ]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, value in records:
        producer.produce(source, value=value, partition=partition)  # TiCDC sends no key
    assert producer.flush(30) == 0
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": [{"topic": source, "table": "orders", "format": "canal-json"}],
        "cursor": "0.0000000000",
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 2},
        "encoder": {"updated": True, "diff": True},
        "on_error": "dlq",
        "spark": {"trigger": {"available_now": True}},
    }
    run_to_end(parse_config(raw), spark)

    out = consume_all(kafka_bootstrap, f"{changefeed_id}.orders")
    rows = sorted((m.key, m.value) for m in out if m.key is not None)

    def hlc(ts: int) -> str:
        return str(tso_time(ts, "t"))

    assert rows == sorted(
        [
            (
                b"[1]",
                '{"after":{"id":1,"amount":12345678901234567890.1234567890,"note":"ü 𝄞"},'
                f'"before":null,"updated":"{hlc(tso(t + 1))}"}}'.encode(),
            ),
            (
                b"[2]",
                '{"after":{"id":2,"amount":-0.0000000001,"note":null},"before":null,'
                f'"updated":"{hlc(tso(t + 2))}"}}'.encode(),
            ),
            (
                b"[4]",
                '{"after":{"id":4,"amount":0,"note":"\\"q\\""},"before":null,'
                f'"updated":"{hlc(tso(t + 2))}"}}'.encode(),
            ),
            (
                b"[1]",
                '{"after":{"id":1,"amount":1.5000000000,"note":"x"},'
                '"before":{"id":1,"amount":2.0000000000,"note":"x"},'
                f'"updated":"{hlc(tso(t + 4, 1))}"}}'.encode(),
            ),
            (
                b"[2]",
                '{"after":null,"before":{"id":2,"amount":-0.0000000001,"note":null},'
                f'"updated":"{hlc(tso(t + 5))}"}}'.encode(),
            ),
        ]
    )
    markers = {(m.partition, json.loads(m.value)["resolved"]) for m in out if m.key is None}
    assert {(p, r) for p, r in markers if r == hlc(tso(t + 6))} == {
        (0, hlc(tso(t + 6))),
        (1, hlc(tso(t + 6))),
    }
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    assert [m.value for m in dead] == [b'{"type": "INSERT"}']
    reason = dict(dead[0].headers)["highwater.error"].decode()
    assert "enable-tidb-extension=true" in reason
    assert dict(dead[0].headers)["highwater.source"] == f"{source}/1@2".encode()
