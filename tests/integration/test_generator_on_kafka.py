"""The generator on a real broker, read back by confluent-kafka and by the Kafka CLI."""

import json

from confluent_kafka import Producer

from pipeline.dev.generator import GeneratorSpec, encode_key, write
from pipeline.dev.kafka_tools import read_topic
from sinks.admin import ensure_topics
from sinks.partitioning import default_partition
from tests.support.kafka import consume_all


def test_every_change_and_marker_lands_where_a_java_producer_would_put_it(
    kafka_bootstrap: str, unique_name
) -> None:
    topic = unique_name("src")
    spec = GeneratorSpec(topic=topic, rows=3000, partitions=4, resolved_every=1000, seed=7)
    report = write(spec, {"bootstrap.servers": kafka_bootstrap}, keep_changes=True)

    messages = consume_all(kafka_bootstrap, topic)
    rows = [m for m in messages if m.key is not None]
    markers = [m for m in messages if m.key is None]
    assert len(rows) == report.total == 3000
    assert len(markers) == report.markers == 3 * 4

    expected = [(c.partition, encode_key(c.key), str(c.updated)) for c in report.changes]
    got = [(m.partition, m.key, json.loads(m.value)["updated"]) for m in rows]
    assert sorted(got) == sorted(expected)
    # Per partition, the changes arrive in the order they were committed.
    for p in range(4):
        assert [g for g in got if g[0] == p] == [e for e in expected if e[0] == p]
    # The last marker of each partition is the last resolved time of the report.
    for p in range(4):
        last = [json.loads(m.value) for m in markers if m.partition == p][-1]
        assert last == {"resolved": str(report.last_resolved[p])}


def test_our_partitioner_agrees_with_librdkafkas_murmur2(kafka_bootstrap: str, unique_name) -> None:
    topic = unique_name("murmur")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {topic: 6})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    keys = [encode_key(("eu", n)) for n in range(300)]
    for key in keys:
        producer.produce(topic, key=key, value=b"x")  # librdkafka picks the partition
    assert producer.flush(30) == 0
    placed = {m.key: m.partition for m in consume_all(kafka_bootstrap, topic)}
    assert placed == {k: default_partition(k, 6) for k in keys}


def test_kafka_cli_console_consumer_shows_markers_on_every_partition(
    kafka_bootstrap: str, unique_name
) -> None:
    topic = unique_name("cli")
    report = write(
        GeneratorSpec(topic=topic, rows=200, partitions=3, resolved_every=200),
        {"bootstrap.servers": kafka_bootstrap},
    )
    shown = read_topic(topic, kafka_bootstrap, timeout_ms=5000)
    markers = {(p, v) for p, _o, k, v in shown if k == "null"}
    assert markers == {
        (p, json.dumps({"resolved": str(report.last_resolved[p])}, separators=(",", ":")))
        for p in range(3)
    }
    assert sum(1 for _p, _o, k, _v in shown if k != "null") == 200
