"""Values unchanged, bad records isolated (contract §5.6, §5.7), on a real broker and Spark.

Expectations are built from the source bytes with the standard library, not with our code.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.cli import main as highwater
from pipeline.config import load_config
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.core.ledger.checkpoint import Checkpoint, CheckpointStore
from pipeline.core.ledger.frontier import Frontier, SourcePartition
from schemas.errors import CheckpointError, ConfigError, SourceDecodeError, SourceError
from schemas.hlc import Hlc
from sinks.compacted import CompactedTopic
from tests.integration.test_changefeed import produce
from tests.support.changefeed import (
    changefeed_config,
    checkpoint_records,
    read_checkpoint,
    read_output,
    run_to_end,
)
from tests.support.kafka import consume_all
from tests.support.process import run_killed_at, write_config

T1, T2, T9 = (
    "1700000000000000001.0000000000",
    "1700000000000000002.0000000000",
    "1700000000000000009.0000000000",
)
# numbers of every form, as a DECIMAL column or a big counter would carry them
EXACT_AFTER = (
    b'{"price":12345678901234567.89,"ratio":1.10,"n":18446744073709551617,"e":1E+2,'
    b'"small":1e-7,"neg":-0,"zero":0.0,"i":42,"big":1e400,'
    b'"s":"caf\xc3\xa9 \\"q\\" \\\\ \xf0\x9f\x98\x80",'
    b'"nested":{"a":[1.50,{"b":-2.000E-3}],"c":null},"t":true}'
)
EXACT_BEFORE = b'{"price":0.10,"ratio":1.0,"n":1,"e":1e2,"nested":{"a":[]}}'


def exact(data: bytes) -> Any:
    """Parse JSON keeping every number's text (the standard library, not ours)."""
    return json.loads(data, parse_float=lambda t: ("num", t), parse_int=lambda t: ("num", t))


def test_values_reach_the_output_byte_for_byte(kafka_bootstrap: str, unique_name, spark) -> None:
    source = unique_name("src")
    key = '["eu-\\"west\\"", "Zürich", 7]'.encode()
    updated = f'"updated":"{T1}"'.encode()
    value = b'{"after":' + EXACT_AFTER + b',"before":' + EXACT_BEFORE + b"," + updated + b"}"
    spaced = b'{ "after" : {"x": 1.10 ,"y":"\\u00e9"} , "updated" : "' + T2.encode() + b'" }'
    produce(
        kafka_bootstrap,
        source,
        [(0, key, value), (0, key, spaced), (0, None, {"resolved": T9})],
    )
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        encoder={"updated": True, "diff": True},
    )
    run_to_end(config, spark)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert [m.key for m in out.rows] == [b'["eu-\\"west\\"","Z\xc3\xbcrich",7]'] * 2
    first, second = (m.value for m in out.rows)
    assert first == (
        b'{"after":' + EXACT_AFTER + b',"before":' + EXACT_BEFORE + b"," + updated + b"}"
    )
    # the same JSON text, whitespace and escapes aside: every number as it was written
    assert exact(second) == {
        "after": exact(b'{"x": 1.10, "y": "\\u00e9"}'),
        "before": None,
        "updated": T2,
    }
    assert b'"x":1.10' in second


BAD = {
    "not json": (b'["k"]', b"{not json"),
    "not utf-8": (b'["k"]', b'{"after": {"s": "\xff\xfe"}, "updated": "' + T1.encode() + b'"}'),
    "key not utf-8": (b"\xff", b'{"after": {}, "updated": "' + T1.encode() + b'"}'),
    "lone surrogate": (b'["k"]', b'{"after": {"s": "\\ud800"}, "updated": "' + T1.encode() + b'"}'),
    "deep": (
        b'["k"]',
        b'{"after": {"d": ' + b"[" * 5000 + b"]" * 5000 + b'}, "updated": "' + T1.encode() + b'"}',
    ),
    "deep key": (b"[" * 5000 + b"]" * 5000, b'{"after": {}, "updated": "' + T1.encode() + b'"}'),
    "array value": (b'["k"]', b"[1, 2]"),
    "no updated": (b'["k"]', b'{"after": {"a": 1}}'),
    "bad updated": (b'["k"]', b'{"after": {"a": 1}, "updated": "12:00"}'),
    "key not array": (b'{"a": 1}', b'{"after": {}, "updated": "' + T1.encode() + b'"}'),
    "null value": (b'["k"]', None),
    "bad marker": (None, b'{"resolved": "soon"}'),
    "after a string": (b'["k"]', b'{"after": "x", "updated": "' + T1.encode() + b'"}'),
}


def bad_feed(partitions: int = 3) -> list[tuple[int, Any, Any]]:
    """Good rows and every kind of bad record, on every partition, then a marker on each."""
    records: list[tuple[int, Any, Any]] = []
    for p in range(partitions):
        good = b'{"after": {"p": %d, "v": 1.10}, "updated": "%s"}'
        records.append((p, [f"good-{p}"], good % (p, T2.encode())))
        records.extend((p, key, value) for key, value in BAD.values())
        records.append((p, [f"late-{p}"], good % (p, T9.encode())))
        records.append((p, None, {"resolved": T9}))
    return records


def test_bad_records_of_every_kind_on_every_partition_go_to_the_dlq_and_the_feed_goes_on(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    produce(kafka_bootstrap, source, bad_feed(), partitions=3)
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        on_error="dlq",
        dlq_topic=unique_name("dlq"),
    )
    run_to_end(config, spark)  # one batch: every partition's bad records at once
    dead = consume_all(kafka_bootstrap, config.effective_dlq_topic)
    assert len(dead) == 3 * len(BAD)
    expected = [(key, value) for _ in range(3) for key, value in BAD.values()]
    assert sorted(((m.key, m.value) for m in dead), key=repr) == sorted(expected, key=repr)
    for m in dead:
        headers = dict(m.headers)
        assert headers["highwater.error"], "every dead letter says why"
        topic, _, where = headers["highwater.source"].decode().rpartition("/")
        partition, offset = (int(x) for x in where.split("@"))
        assert topic == source
        assert 0 <= partition < 3
        assert 1 <= offset <= len(BAD)
    reasons = {dict(m.headers)["highwater.error"].decode() for m in dead}
    assert "value is not a JSON object: JSON nested too deeply" in reasons
    assert "value is not a JSON object: a string holds a lone surrogate (not Unicode text)" in (
        reasons
    )
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert sorted(m.key for m in out.rows) == sorted(
        f'["{kind}-{p}"]'.encode() for p in range(3) for kind in ("good", "late")
    )
    assert all(b'"v":1.10' in m.value for m in out.rows)
    assert {m.partition for m in out.markers} == {0, 1, 2}
    assert {json.loads(m.value)["resolved"] for m in out.markers} == {T9}
    record = read_checkpoint(kafka_bootstrap, config)
    assert record["high_water"] == T9
    assert record["partitions"][source]["offsets"] == [len(BAD) + 3] * 3


def test_on_error_fail_names_the_first_bad_record_of_many_partitions(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    produce(kafka_bootstrap, source, bad_feed(), partitions=3)
    config = changefeed_config(kafka_bootstrap, unique_name("cf"), [(source, "orders")])
    with pytest.raises(SourceDecodeError) as caught:
        Changefeed(config, spark).run()
    ref = caught.value.record
    assert (ref.topic, ref.partition, ref.offset) == (source, 0, 1)
    assert f"topic={source} partition=0 offset=1" in str(caught.value)
    # every partition stopped at its first bad record: what came before it went out, nothing
    # after it, and the checkpoint resumes at it
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert sorted(m.key for m in out.rows) == [f'["good-{p}"]'.encode() for p in range(3)]
    assert read_checkpoint(kafka_bootstrap, config)["partitions"][source]["offsets"] == [1] * 3


def _rows_and_markers(partitions: int = 2) -> list[tuple[int, Any, Any]]:
    records: list[tuple[int, Any, Any]] = []
    for p in range(partitions):
        for i, ts in enumerate((T1, T2)):
            records.append((p, [f"k{p}-{i}"], {"after": {"i": i}, "updated": ts}))
        records.append((p, None, {"resolved": T2}))
    return records


def test_a_start_over_records_deleted_outside_gc_is_refused_naming_them(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    from confluent_kafka import TopicPartition  # noqa: PLC0415
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    source = unique_name("src")
    produce(kafka_bootstrap, source, _rows_and_markers(), partitions=2)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(source, 1, 2)]).values():
        future.result(30)  # as retention would: the first two records of partition 1 are gone
    config = changefeed_config(kafka_bootstrap, unique_name("cf"), [(source, "orders")])
    with pytest.raises(SourceError) as caught:
        Changefeed(config, spark).run()
    assert f"{source}/1 offsets 0..1" in str(caught.value)
    assert f"{source}/0" not in str(caught.value)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert out.rows == [], "nothing emitted"


def test_an_aborted_upstream_transaction_never_reaches_the_output(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    from confluent_kafka import Producer  # noqa: PLC0415

    source = unique_name("src")
    produce(kafka_bootstrap, source, [(0, ["kept"], {"after": {"a": 1}, "updated": T1})])
    tx = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    row = json.dumps({"after": {"a": 2}, "updated": T2}).encode()
    tx.produce(source, key=b'["aborted"]', value=row, partition=0)
    tx.flush(30)
    tx.abort_transaction(30)
    produce(kafka_bootstrap, source, [(0, None, {"resolved": T9})])
    config = changefeed_config(kafka_bootstrap, unique_name("cf"), [(source, "orders")])
    run_to_end(config, spark)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert [m.key for m in out.rows] == [b'["kept"]']


def test_an_end_time_below_the_statement_time_is_refused(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    produce(kafka_bootstrap, source, _rows_and_markers(1), partitions=1)
    config = changefeed_config(
        kafka_bootstrap, unique_name("cf"), [(source, "orders")], initial_scan="yes", end_time=T1
    )
    with pytest.raises(ConfigError, match="end_time: is below the statement time"):
        Changefeed(config, spark).run()


def test_a_marker_checkpointed_but_not_sent_is_sent_by_the_next_run(
    kafka_bootstrap: str, unique_name, tmp_path: Path, spark
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    produce(kafka_bootstrap, source, _rows_and_markers(2), partitions=2)
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": [{"topic": source, "table": "orders"}],
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "initial_scan": "only",
    }
    config_file = write_config(tmp_path / "cf.yaml", raw)
    log = tmp_path / "runs.log"
    topic = f"{changefeed_id}.orders"

    run_killed_at(config_file, log, "before_marker:1")
    record = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]
    assert record["backfill"] is None, "the snapshot was done and checkpointed"
    assert record["last_marker"] == record["statement_time"] == T2
    assert read_output(kafka_bootstrap, topic).markers == [], "killed before the broadcast"

    Changefeed(load_config(config_file), spark).run()  # the next run (in-process)
    markers = read_output(kafka_bootstrap, topic).markers
    assert sorted((m.partition, json.loads(m.value)["resolved"]) for m in markers) == [
        (p, T2) for p in range(3)
    ]
    assert checkpoint_records(kafka_bootstrap, changefeed_id)[-1]["marker_sent"] == T2
    Changefeed(load_config(config_file), spark).run()  # and a further one sends nothing twice
    assert len(read_output(kafka_bootstrap, topic).markers) == 3


def test_corrupt_internal_records_are_named_and_a_bad_safepoint_stops_no_changefeed(
    kafka_bootstrap: str, unique_name, spark, capsys: pytest.CaptureFixture[str]
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    cluster, safepoints, jobs = unique_name("cl"), unique_name("sp"), unique_name("jobs")
    produce(kafka_bootstrap, source, _rows_and_markers(1), partitions=1)
    foreign = f"highwater-{cluster}-user-defined"
    produce(kafka_bootstrap, safepoints, [(0, foreign.encode(), b"{broken")])
    produce(kafka_bootstrap, jobs, [(0, changefeed_id.encode(), b"\xff not a status")])
    config = changefeed_config(
        kafka_bootstrap,
        changefeed_id,
        [(source, "orders")],
        safepoints={"topic": safepoints, "cluster": cluster},
        jobs={"topic": jobs},
    )
    run_to_end(config, spark)  # the unreadable safepoint is another's: reported, skipped
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert len(out.rows) == 2
    where = ["--bootstrap-servers", kafka_bootstrap, "--cluster", cluster]
    assert highwater(["safepoint", "query", "--safepoint-topic", safepoints, *where]) == 0
    assert f"WARNING: topic {safepoints}, key '{foreign}': unreadable" in capsys.readouterr().out
    gc = ["gc", "run", "--once", "--topic", source, "--safepoint-topic", safepoints, *where]
    assert highwater(gc) == 1
    assert "GC trims nothing while safepoint records are unreadable" in capsys.readouterr().err

    produce(kafka_bootstrap, config.checkpoint.topic, [(0, changefeed_id.encode(), b"{broken")])
    with pytest.raises(CheckpointError) as caught:
        Changefeed(config, spark).run()
    assert f"topic {config.checkpoint.topic}, key '{changefeed_id}'" in str(caught.value)


def test_a_checkpoint_as_large_as_its_budget_is_written(kafka_bootstrap: str, unique_name) -> None:
    budget = 1 << 20  # the default frontier_checkpoint_max_bytes
    parts = [SourcePartition("src", p) for p in range(24_500)]
    frontier = Frontier(parts)
    for sp in parts:  # every partition ahead of the first: all of them in the record
        frontier.forward(sp, resolved=Hlc(10**18 + sp.partition), next_offset=1_000_000)
    record = Checkpoint.of("cf", frontier)
    size = len(record.encode(budget))
    assert 1_000_000 < size <= budget, size  # above the clients' default message size
    topic = unique_name("checkpoints")
    store = CompactedTopic({"bootstrap.servers": kafka_bootstrap}, topic, max_value_bytes=budget)
    try:
        store.ensure()
        assert CheckpointStore(store, "cf", budget).write(record) == size
        back = CheckpointStore(store, "cf", budget).load()
    finally:
        store.close()
    assert back is not None
    assert back.progress(parts) == frontier.progress()


@pytest.mark.parametrize(("key_size", "blob"), [(1_500, 1_500), (10, 5_000)])
def test_an_output_record_too_large_for_the_producer_is_a_dead_letter_not_a_failed_batch(
    kafka_bootstrap: str, unique_name, spark, key_size: int, blob: int
) -> None:
    """A record the producer (4,000 bytes) would refuse goes to the dead-letter topic.

    (1,500, 1,500): the output (the key twice, topic and times added) is too large, the raw
    record fits the dead-letter topic; (10, 5,000): the raw record is too large for the
    dead-letter topic's producer as well, and the dead letter points at it.
    """
    source = unique_name("src")
    huge = {"after": {"blob": "x" * blob}, "updated": T1}
    huge_key = ["k" * key_size]
    records = [
        (0, ["small-1"], {"after": {"a": 1}, "updated": T1}),
        (0, huge_key, huge),
        (0, ["small-2"], {"after": {"a": 2}, "updated": T2}),
        (0, None, {"resolved": T9}),
    ]
    produce(kafka_bootstrap, source, records)
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        sink={"producer": {"max.request.size": "4000"}},
        encoder={
            "key_in_value": True,
            "topic_in_value": True,
            "updated": True,
            "mvcc_timestamp": True,
        },
        on_error="dlq",
        dlq_topic=unique_name("dlq"),
    )
    run_to_end(config, spark)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert [m.key for m in out.rows] == [b'["small-1"]', b'["small-2"]']
    (dead,) = consume_all(kafka_bootstrap, config.effective_dlq_topic)
    headers = dict(dead.headers)
    assert b"exceeds max.request.size (4,000)" in headers["highwater.error"]
    assert headers["highwater.source"] == f"{source}/0@1".encode()
    key = json.dumps(huge_key).encode()
    if blob < 4_000:
        assert (dead.key, dead.value) == (key, json.dumps(huge).encode())
    else:  # a pointer to the source record: the key, no value, the reason saying so
        assert (dead.key, dead.value) == (key, None)
        size = len(json.dumps(huge)) + len(key)
        assert (
            f"the source record ({size:,} bytes) is too large to copy here".encode()
            in (headers["highwater.error"])
        )
    assert read_checkpoint(kafka_bootstrap, config)["high_water"] == T9
