"""Metrics: a running changefeed's endpoint, scraped over HTTP, against what its topics hold.

The numbers must be the ones users can count themselves: rows and bytes on the output topic,
records in the dead-letter topic, markers on a partition, the checkpoint record's size. The
server's ``/metrics`` carries the same series for every live run, behind the API's token.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Producer
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from pipeline.control.changefeeds import Changefeeds
from pipeline.control.context import OperatorContext
from pipeline.control.server import create_app
from pipeline.core.coordinator.changefeed import Changefeed, StopRequest
from pipeline.core.coordinator.setup import relied_on
from pipeline.dev.generator import GeneratorSpec, write
from schemas.errors import LifecycleError
from schemas.hlc import Hlc
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


def test_a_partition_held_back_is_named_lagging_until_it_catches_up(
    kafka_bootstrap: str, spark: Any, unique_name: Any, caplog: Any
) -> None:
    """A source partition stalled upstream is named lagging until a marker comes.

    It gets no marker: it lags by decades, the others by the seconds of the run (every one
    lags at the start, at the cursor, until its first marker is read). With
    ``lagging_threshold: 10m`` the job status names it (and that it holds the high-water
    back), ``highwater_lagging_partitions`` is 1, and one log line says so; a marker on it now
    clears all three. The others are not named once their markers came.
    """
    source, changefeed_id = unique_name("src"), unique_name("cf")
    client = {"bootstrap.servers": kafka_bootstrap}
    ensure_topics(client, {source: 3})
    spec = GeneratorSpec(topic=source, rows=150, partitions=3, stall_partition=1, stall_after=0)
    write(spec, client)
    config = changefeed_config(
        kafka_bootstrap,
        changefeed_id,
        [(source, "orders")],
        lagging_threshold="10m",
        resolved={"interval": "1s"},
        spark={"trigger": {"processing_time": "500ms"}},
    )
    changefeeds = Changefeeds(OperatorContext(client))

    def lagging() -> tuple[list[str], float]:
        try:
            found = changefeeds.get(changefeed_id).status
        except LifecycleError:  # no job status yet
            found = None
        said = [] if found is None else [w for w in found.warnings if "is lagging" in w]
        return said, scrape(url).get(("highwater_lagging_partitions", ()), -1)

    with running(config, spark) as url:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and lagging()[1] != 1:
            time.sleep(1)
        said, count = lagging()
        assert count == 1
        assert len(said) == 1, said
        assert said[0].startswith(f"source partition {source}/1 is lagging: resolved ")
        assert said[0].endswith("(lagging_threshold 10m0s); it holds the high-water back")
        logged = [
            r.getMessage() for r in caplog.records if f"{source}/1 is lagging" in r.getMessage()
        ]
        assert len(logged) == 1, logged  # once, when it began (not once a look)
        assert not any(f"{source}/0" in w or f"{source}/2" in w for w in said)
        status = changefeeds.get(changefeed_id).status
        assert status is not None
        resolved = {p["partition"]: p["resolved"] for p in status.partitions or []}
        assert sorted(resolved) == [0, 1, 2]  # every source partition, as the run had it
        assert resolved[1] == "0.0000000000" == str(status.high_water)  # the one holding it

        # a marker on it now: it catches up, and every sign of it goes
        marker = json.dumps({"resolved": str(Hlc(time.time_ns()))}).encode()
        producer = Producer(client)
        producer.produce(source, value=marker, partition=1)
        assert producer.flush(30) == 0
        while time.monotonic() < deadline and lagging() != ([], 0):
            time.sleep(1)
        assert lagging() == ([], 0)
