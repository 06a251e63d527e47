"""The changefeed core on a real broker and real Spark, checked with confluent-kafka."""

import json
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.config import ChangefeedConfig
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.dev.generator import GeneratorSpec, write
from schemas.errors import ConfigError, SinkError, SourceDecodeError
from sinks.admin import ensure_topics
from tests.support.changefeed import (
    changefeed_config,
    checkpoint_records,
    read_checkpoint,
    read_output,
    run_to_end,
)
from tests.support.kafka import consume_all
from tests.support.validator import hlc_order

T1, T2, T3 = (
    "1700000000000000001.0000000000",
    "1700000000000000002.0000000000",
    "1700000000000000003.0000000000",
)
V1 = {"region": "eu", "order_id": 7, "amount": 9.5, "note": None}
V2 = {"region": "eu", "order_id": 7, "amount": 12.0, "note": "gift"}


def produce(
    bootstrap: str, topic: str, records: list[tuple[int, Any, Any]], partitions: int = 1
) -> None:
    """Write (partition, key, value) records; dict/list values are JSON-encoded."""
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: partitions})
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        encode = lambda v: v if isinstance(v, bytes | None) else json.dumps(v).encode()  # noqa: E731
        producer.produce(topic, key=encode(key), value=encode(value), partition=partition)
    assert producer.flush(30) == 0


HISTORY = [
    (0, ["eu", 7], {"after": V1, "before": None, "updated": T1}),
    (0, ["eu", 7], {"after": V2, "before": V1, "updated": T2}),
    (0, ["eu", 7], {"after": None, "before": V2, "updated": T3}),
    (0, None, {"resolved": T3}),
]

ALL_ON = {
    "updated": True,
    "mvcc_timestamp": True,
    "diff": True,
    "key_in_value": True,
    "topic_in_value": True,
}
KEY = ["eu", 7]


def expected(envelope: str, options: dict[str, bool], topic: str) -> list[Any]:
    on = bool(options)
    meta = lambda before, ts: {  # noqa: E731
        **({"before": before} if on else {}),
        **({"key": KEY, "topic": topic, "updated": ts, "mvcc_timestamp": ts} if on else {}),
    }
    if envelope == "wrapped":
        return [
            {"after": V1, **meta(None, T1)},
            {"after": V2, **meta(V1, T2)},
            {"after": None, **meta(V2, T3)},
        ]
    if envelope == "bare":
        extra = (lambda b, t: {"__hw__": meta(b, t)}) if on else (lambda b, t: {})
        return [{**V1, **extra(None, T1)}, {**V2, **extra(V1, T2)}, None]
    if envelope == "row":
        return [V1, V2, None]
    return [None, None, None]  # key_only


@pytest.mark.parametrize(
    ("envelope", "options"),
    [
        ("wrapped", {}),
        ("wrapped", ALL_ON),
        ("bare", {}),
        ("bare", ALL_ON),
        ("row", {}),
        ("key_only", {}),
    ],
)
def test_exact_envelopes_for_insert_update_delete(
    kafka_bootstrap: str, unique_name, spark, envelope: str, options: dict[str, bool]
) -> None:
    source = unique_name("src")
    produce(kafka_bootstrap, source, HISTORY)
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        encoder={"envelope": envelope, **options},
    )
    run_to_end(config, spark)
    topic = config.output_topic(config.sources[0])
    out = read_output(kafka_bootstrap, topic)
    assert [m.key for m in out.rows] == [b'["eu",7]'] * 3  # the key, as compact JSON
    assert out.values() == expected(envelope, options, topic)
    # parsed JSON says 12.0 == 12: the bytes say the number kept its form
    if envelope != "key_only":
        assert b'"amount":12.0,' in out.rows[1].value
    assert {m.partition for m in out.rows} == {out.rows[0].partition}
    assert sorted(m.partition for m in out.markers) == [0, 1, 2]
    assert all(json.loads(m.value) == {"resolved": T3} for m in out.markers)


def test_refused_combination_names_the_key(kafka_bootstrap: str) -> None:
    with pytest.raises(ConfigError) as caught:
        changefeed_config(
            kafka_bootstrap, "x", [("s", "orders")], encoder={"envelope": "key_only", "diff": True}
        )
    assert [p for p, _ in caught.value.problems] == ["encoder.diff"]


def test_markers_reach_every_partition_and_never_precede_a_row_they_cover(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    report = write(
        GeneratorSpec(topic=source, rows=3000, partitions=4, resolved_every=300),
        {"bootstrap.servers": kafka_bootstrap},
        keep_changes=True,
    )
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        encoder={"updated": True},
        spark={"trigger": {"available_now": True}, "max_offsets_per_trigger": 500},
    )
    run_to_end(config, spark)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert len(out.rows) == report.total
    for partition in range(3):
        markers = [
            (m.offset, hlc_order(json.loads(m.value)["resolved"]))
            for m in out.markers
            if m.partition == partition
        ]
        assert len(markers) >= 3, "several batches, several markers"
        times = [t for _, t in markers]
        assert times == sorted(times), "markers never go backwards"
        assert times[-1] == hlc_order(str(max(report.last_resolved.values())))
        rows = [
            (m.offset, hlc_order(json.loads(m.value)["updated"]))
            for m in out.rows
            if m.partition == partition
        ]
        for marker_offset, resolved in markers:
            late = [ts for offset, ts in rows if offset > marker_offset and ts <= resolved]
            assert not late, f"rows at or below {resolved} after its marker"


def test_upstream_duplicates_are_dropped_within_and_across_batches(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    dup = (0, ["eu", 7], {"after": V1, "before": None, "updated": T1})
    fresh = (
        0,
        ["eu", 8],
        {"after": V2, "before": None, "updated": "1700000000000000009.0000000000"},
    )
    produce(kafka_bootstrap, source, [*HISTORY, dup])  # duplicate after the marker, same batch
    config = changefeed_config(
        kafka_bootstrap, unique_name("cf"), [(source, "orders")], encoder={"updated": True}
    )
    run_to_end(config, spark)
    produce(kafka_bootstrap, source, [dup, fresh, (0, None, {"resolved": "1700000000000000009"})])
    run_to_end(config, spark)  # resumes from the checkpoint: the replayed T1 is old news
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert [v["updated"] for v in out.values()] == [T1, T2, T3, "1700000000000000009.0000000000"]


def test_undecodable_record_stops_the_job_naming_topic_partition_offset(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    produce(kafka_bootstrap, source, [HISTORY[0], (0, ["eu", 9], b"{not json"), HISTORY[3]])
    config = changefeed_config(kafka_bootstrap, unique_name("cf"), [(source, "orders")])
    with pytest.raises(SourceDecodeError) as caught:
        Changefeed(config, spark).run()
    assert (
        caught.value.record.topic,
        caught.value.record.partition,
        caught.value.record.offset,
    ) == (source, 0, 1)
    assert f"topic={source} partition=0 offset=1" in str(caught.value)
    # it stopped at the record: the row before it went out, nothing after it, and the
    # checkpoint resumes at it (contract §5.7)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert [json.loads(m.value)["after"] for m in out.rows] == [V1]
    record = read_checkpoint(kafka_bootstrap, config)
    assert record["partitions"][source]["offsets"] == [1]
    assert record["last_marker"] is None


def test_dead_letter_topic_keeps_the_raw_record_and_the_reason(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    produce(
        kafka_bootstrap,
        source,
        [
            HISTORY[0],
            (0, ["eu", 9], b"{not json"),
            (0, ["eu", 9], {"after": "x", "updated": T2}),
            HISTORY[3],
        ],
    )
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        on_error="dlq",
        dlq_topic=unique_name("dlq"),
    )
    run_to_end(config, spark)
    dead = consume_all(kafka_bootstrap, config.effective_dlq_topic)
    assert [(m.key, m.value) for m in dead] == [
        (b'["eu", 9]', b"{not json"),
        (b'["eu", 9]', json.dumps({"after": "x", "updated": T2}).encode()),
    ]
    headers = [dict(m.headers) for m in dead]
    assert headers[0]["highwater.error"] == b"value is not a JSON object"
    assert headers[0]["highwater.source"] == f"{source}/0@1".encode()
    assert headers[1]["highwater.error"] == b"'after' is not an object or null"
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert len(out.rows) == 1
    assert read_checkpoint(kafka_bootstrap, config)["high_water"] == T3


def test_a_failed_write_is_one_clear_error_and_nothing_is_checkpointed(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    produce(kafka_bootstrap, source, HISTORY)
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        sink={"producer": {"compression.type": "bogus"}},  # the Kafka writer cannot start
    )
    with pytest.raises(SinkError, match=r"batch 0 failed, not checkpointed: .*compression\.type"):
        Changefeed(config, spark).run()
    assert_no_progress_checkpointed(kafka_bootstrap, config)


@pytest.mark.parametrize(
    "encoder",
    [
        {"updated": True, "diff": True},  # the source's own members: the walk takes all
        {"updated": True, "key_in_value": True},  # written again: the Python loop
    ],
    ids=["walk", "python_loop"],
)
def test_records_the_brokers_refuse_fail_the_batch_and_nothing_is_checkpointed(
    kafka_bootstrap: str, unique_name, spark, encoder: dict[str, bool]
) -> None:
    """Every write (the walk's, the Python loop's) fails the batch when Kafka refuses records.

    Refused as too large, a batch of several records is split by the producer, whose flush()
    then returns before the halves are answered (KAFKA-19479); here the halves never get
    small enough: the producer expires them, or never answers. Each way the batch must fail.
    """
    source = unique_name("src")
    compact = [
        (p, k if k is None else json.dumps(k, separators=(",", ":")).encode(), v)
        for p, k, v in HISTORY
    ]
    produce(kafka_bootstrap, source, compact)
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        encoder=encoder,
        # a producer of its own (the pool keys by settings) answering within seconds
        sink={"producer": {"delivery.timeout.ms": "4000", "request.timeout.ms": "3000"}},
    )
    output = config.output_topic(config.sources[0])
    # the output topic takes no record batch over 100 bytes: each row's is larger
    ensure_topics(
        {"bootstrap.servers": kafka_bootstrap},
        {output: 3},
        topic_config={"max.message.bytes": "100"},
    )
    with pytest.raises(
        SinkError,
        match=r"batch 0 failed, not checkpointed: .*(TooLarge|TimeoutException|answered 0 of 3)",
    ):
        Changefeed(config, spark).run()
    assert_no_progress_checkpointed(kafka_bootstrap, config)
    assert read_output(kafka_bootstrap, output).rows == []


def assert_no_progress_checkpointed(bootstrap: str, config: ChangefeedConfig) -> None:
    """Only the record written at creation (the start point), nothing past it."""
    records = checkpoint_records(bootstrap, config.changefeed_id, config.checkpoint.topic)
    assert len(records) == 1
    (source,) = records[0]["partitions"].values()
    assert set(source["offsets"]) == {None}
    assert records[0]["last_marker"] is None


def test_a_marker_held_back_by_the_interval_goes_out_while_the_source_is_quiet(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    """A marker the resolved interval held back goes out once due, with no batch after it.

    Batches closer together than ``resolved.interval`` hold the last marker back; the source
    then goes quiet, so no batch follows: the marker must not wait for one, or for the stop.
    """
    source = unique_name("src")
    write(
        GeneratorSpec(topic=source, rows=600, partitions=3, resolved_every=60),
        {"bootstrap.servers": kafka_bootstrap},
    )
    last = {}  # the source's last marker per partition: the high-water is their minimum
    for m in consume_all(kafka_bootstrap, source):
        if m.key is None:
            last[m.partition] = json.loads(m.value)["resolved"]
    high_water = min(hlc_order(t) for t in last.values())
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        resolved={"interval": "4s"},
        spark={"trigger": {"processing_time": "200ms"}, "max_offsets_per_trigger": 120},
    )
    changefeed = Changefeed(config, spark)
    runner = threading.Thread(target=changefeed.run)
    runner.start()
    try:
        deadline, reached = time.monotonic() + 90, False
        while not reached and time.monotonic() < deadline:
            time.sleep(1)
            output = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
            reached = all(
                max(map(hlc_order, output.marker_times(p)), default=(0, 0)) >= high_water
                for p in range(3)
            )
        assert runner.is_alive(), "the changefeed stopped: its closing marker proves nothing"
        assert reached, "the last marker never went out while the source was quiet"
        assert len(output.rows) == 600
    finally:
        changefeed.stop_request.set()
        runner.join(120)
