"""Metrics: a running changefeed's endpoint, scraped over HTTP, against what its topics hold.

The numbers must be the ones users can count themselves: rows and bytes on the output topic,
records in the dead-letter topic, markers on a partition, the checkpoint record's size. The
server's ``/metrics`` carries the same series for every live run, behind the API's token.
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Producer
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from pipeline.control.context import OperatorContext
from pipeline.control.server import create_app
from pipeline.core.coordinator.changefeed import Changefeed, StopRequest
from pipeline.core.coordinator.setup import relied_on
from pipeline.dev.generator import GeneratorSpec, write
from sinks.admin import ensure_topics
from sinks.compacted import CompactedTopic
from tests.support.changefeed import changefeed_config
from tests.support.kafka import consume_all

TOKEN = "metrics-token"  # noqa: S105 - a test token


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an endpoint, by name and labels (the changefeed label left out)."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a local endpoint
        text = response.read().decode()
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "changefeed"))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@contextlib.contextmanager
def running(config: Any, spark: Any) -> Iterator[str]:
    """The changefeed running on a thread of its own; its metrics endpoint's URL."""
    stop = StopRequest()
    changefeed = Changefeed(config, spark, stop=stop)
    runner = threading.Thread(target=changefeed.run)
    runner.start()
    try:
        deadline = time.monotonic() + 180
        while changefeed.metrics.url is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert changefeed.metrics.url is not None, "the changefeed did not serve its metrics"
        yield changefeed.metrics.url
    finally:
        stop.set()
        runner.join(120)


def what_topics_hold(bootstrap: str, changefeed_id: str) -> dict[str, float]:
    out = consume_all(bootstrap, f"{changefeed_id}.orders")
    rows = [m for m in out if m.key is not None]
    checkpoints = CompactedTopic({"bootstrap.servers": bootstrap}, f"{changefeed_id}.checkpoints")
    try:
        checkpoint = checkpoints.read_all()[changefeed_id]
    finally:
        checkpoints.close()
    return {
        "highwater_rows_emitted_total": len(rows),
        "highwater_bytes_emitted_total": sum(len(m.key or b"") + len(m.value or b"") for m in rows),
        "highwater_bad_records_total": len(
            consume_all(bootstrap, f"_highwater_dlq_{changefeed_id}")
        ),
        "highwater_markers_sent_total": sum(1 for m in out if m.key is None and m.partition == 0),
        "highwater_checkpoint_bytes": len(checkpoint),
    }


def test_the_endpoint_counts_what_the_topics_hold(
    kafka_bootstrap: str, spark: Any, unique_name: Any
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    client = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(client, {source: 3})
    report = write(GeneratorSpec(topic=source, rows=400, partitions=3, resolved_every=50), client)
    producer = Producer(client)
    for value in (b"not json", b'{"after":{"region":"eu"}}', b"\xff\xfe"):  # three bad ones
        producer.produce(source, key=b'["eu",1]', value=value, partition=1)
    assert producer.flush(30) == 0
    config = changefeed_config(
        kafka_bootstrap,
        changefeed_id,
        [(source, "orders")],
        on_error="dlq",
        resolved={"interval": "1s"},
        spark={"trigger": {"processing_time": "500ms"}},
    )
    with running(config, spark) as url:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:  # until every row is out and nothing moves
            first = scrape(url)
            if first.get(("highwater_rows_emitted_total", ()), 0) < report.total:
                time.sleep(1)
                continue
            held = what_topics_hold(kafka_bootstrap, changefeed_id)
            again = scrape(url)  # the counts did not move while the topics were read
            if all(again[name, ()] == first[name, ()] for name in held):
                break
        else:
            raise AssertionError("the changefeed did not settle")
        numbers = {name: first[name, ()] for name in held}
        assert numbers == held
        assert held["highwater_rows_emitted_total"] == report.total
        assert held["highwater_bad_records_total"] == 3
        assert first["highwater_state", (("highwater_state", "running"),)] == 1
        assert first["highwater_batch_duration_seconds_count", ()] >= 1
        partitions = {labels for name, labels in first if name == "highwater_partition_lag_seconds"}
        assert partitions == {(("partition", str(p)), ("topic", source)) for p in range(3)}
        assert first["highwater_high_water_lag_seconds", ()] > 0
        copies = {
            dict(labels)["topic"]: value
            for (name, labels), value in first.items()
            if name == "highwater_under_replicated_partitions"
        }
        on_sink, on_source = relied_on(config)
        assert copies == dict.fromkeys({*on_sink, *on_source}, 0)  # one broker: all in sync

        # the server's aggregate: the same series, behind the token
        context = OperatorContext(client)
        with TestClient(create_app(context, TOKEN)) as api:
            assert api.get("/metrics").status_code == 401
            served = api.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert served.status_code == 200, served.text
        samples = [s for f in text_string_to_metric_families(served.text) for s in f.samples]
        rows = [
            s.value
            for s in samples
            if s.name == "highwater_rows_emitted_total" and s.labels["changefeed"] == changefeed_id
        ]
        assert rows == [report.total]
        up = {
            s.labels["changefeed"]: s.value for s in samples if s.name == "highwater_changefeed_up"
        }
        assert up[changefeed_id] == 1
