"""The consumer library on a real changefeed's output: windows, restarts, Avro, ``highwater tail``.

A changefeed (real Spark, real broker, the real registry) writes its output; the library reads
it as users would, found from the changefeed id alone. What the windows hand over is checked
against what real clients read of the same topics (confluent-kafka's consumer and
AvroDeserializer): every change once, in commit order, never before its window's marker.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import Producer
from fastavro import parse_schema, schemaless_reader

from highwater_consumer import ChangefeedConsumer, Output, Row, Window
from pipeline.dev.generator import GeneratorSpec, write
from schemas.hlc import Hlc
from schemas.jsontext import dumps, loads_exact
from tests.integration.test_avro import config_for as avro_config
from tests.integration.test_avro import consume_avro
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.kafka import consume_all
from tests.support.process import ROOT


@pytest.fixture
def history(kafka_bootstrap: str, unique_name: Any) -> str:
    source = unique_name("src")
    write(
        GeneratorSpec(topic=source, rows=600, partitions=2, resolved_every=100, seed=9),
        {"bootstrap.servers": kafka_bootstrap},
    )
    return source


def json_changefeed(bootstrap: str, name: str, source: str, spark: Any, runs: int = 1) -> str:
    """A JSON changefeed run to the end ``runs`` times, more history before each later run."""
    config = changefeed_config(
        bootstrap, name, [(source, "orders")], encoder={"updated": True, "diff": True}
    )
    for more in range(runs):
        if more:
            spec = GeneratorSpec(
                topic=source, rows=200, partitions=2, resolved_every=100, seed=more
            )
            write(spec, {"bootstrap.servers": bootstrap})
        run_to_end(config, spark)
    return name


def drain(consumer: ChangefeedConsumer, until: Hlc, *, ack: bool = True) -> list[Window]:
    windows = []
    for window in consumer.windows(until=until):
        windows.append(window)
        if ack:
            consumer.ack(window)
    return windows


def check_order(windows: Iterable[Window]) -> list[Row]:
    """Rows in commit order, each once, each at or below its window's R and above the last."""
    rows: list[Row] = []
    previous = None
    for window in windows:
        assert previous is None or window.resolved >= previous
        assert all(r.updated <= window.resolved for r in window.rows)
        assert all(previous is None or r.updated > previous for r in window.rows)
        rows.extend(window.rows)
        if window.last:
            previous = window.resolved
    assert rows == sorted(rows), "commit order: updated, then table, then key"
    places = [(r.table, r.key, r.updated) for r in rows]
    assert len(places) == len(set(places)), "each (table, key, updated) once"
    return rows


def test_windows_hand_over_every_change_once_and_a_restart_resumes_after_the_ack(
    kafka_bootstrap: str, unique_name: Any, spark: Any, history: str
) -> None:
    changefeed = json_changefeed(kafka_bootstrap, unique_name("cf"), history, spark, runs=3)
    output = Output.of_changefeed(kafka_bootstrap, changefeed)
    assert output.topics == {f"{changefeed}.orders": "orders"}
    every = consume_all(kafka_bootstrap, f"{changefeed}.orders")
    records = [m for m in every if m.key]
    last = max(Hlc.parse(json.loads(m.value)["resolved"]) for m in every if m.key is None)
    written = {(m.key, json.loads(m.value)["updated"]): m.value for m in records}

    group = unique_name("group")
    with ChangefeedConsumer(output, group, batch=100) as first:  # a window per few markers
        windows = drain(first, last, ack=False)
        assert len([w for w in windows if w.last]) >= 3, "several windows"
        first.ack(windows[0])  # the application holds the first window only
    with ChangefeedConsumer(output, group) as second:
        assert second.after == windows[0].resolved  # R came back from the commit's metadata
        rest = drain(second, last)
    rows = check_order([windows[0], *rest])
    assert {(r.key, str(r.updated)): r.value for r in rows} == written  # each change, as written
    with ChangefeedConsumer(output, group) as third:
        assert drain(third, last) == [], "everything acknowledged: nothing handed over again"


@pytest.mark.parametrize("registry", [True, False], ids=["registry", "schema_topic"])
def test_avro_windows_equal_what_real_clients_read(  # noqa: PLR0917 - fixtures
    kafka_bootstrap: str,
    schema_registry_url: str,
    unique_name: Any,
    spark: Any,
    history: str,
    registry: bool,
) -> None:
    encoder: dict[str, Any] = (
        {"schema_registry": {"url": schema_registry_url}}
        if registry
        else {"schema_topic": unique_name("schemas")}
    )
    config = avro_config(kafka_bootstrap, unique_name("avro"), history, format="avro", **encoder)
    run_to_end(config, spark)
    topic = config.output_topic(config.sources[0])
    output = Output.of_changefeed(kafka_bootstrap, config.changefeed_id)
    assert (output.registry is not None) == registry
    if registry:  # confluent-kafka's AvroDeserializer against the registry
        messages = consume_avro(kafka_bootstrap, topic, schema_registry_url)
        read = [(m.key(), m.value()) for m in messages]
    else:  # fastavro by the schema topic's fingerprints
        schemas = {
            bytes.fromhex(m.key.decode()): parse_schema(json.loads(m.value))
            for m in consume_all(kafka_bootstrap, config.encoder.schema_topic)
        }

        def decode(data: bytes | None) -> Any:
            if data is None:
                return None
            return schemaless_reader(io.BytesIO(data[10:]), schemas[data[2:10]], None)

        records = consume_all(kafka_bootstrap, topic)
        read = [(decode(m.key), decode(m.value)) for m in records]
    last = max(Hlc.parse(v["resolved"]) for k, v in read if k is None)
    with ChangefeedConsumer(output, unique_name("group")) as consumer:
        rows = check_order(drain(consumer, last))
    got = {
        (r.key_values["region"], r.key_values["order_id"], str(r.updated)): r.after for r in rows
    }
    read = [(k, v) for k, v in read if k is not None]
    want = {(k["region"], k["order_id"], v["updated"]): v["after"] for k, v in read}
    assert got == want
    assert len(rows) == len(want)
    assert len(rows) > 100


def tail(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "tail", *args, "--idle", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tail_prints_windows_and_names_every_bad_record(
    kafka_bootstrap: str, unique_name: Any, spark: Any, history: str
) -> None:
    changefeed = json_changefeed(kafka_bootstrap, unique_name("cf"), history, spark)
    topic = f"{changefeed}.orders"
    records = [m for m in consume_all(kafka_bootstrap, topic) if m.key]
    bad = [b"{not json", b'{"after":{"a":1}}', b'{"resolved":"soon"}', b"\xff\xfe"]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for value in bad:
        producer.produce(topic, key=b"[1]", value=value, partition=1)
    assert producer.flush(30) == 0
    ends = {m.partition: m.offset for m in consume_all(kafka_bootstrap, topic)}

    scripted = tail(changefeed, "--bootstrap-servers", kafka_bootstrap, "--json")
    assert scripted.returncode == 1, scripted.stderr  # bad records were met
    named = [line for line in scripted.stderr.splitlines() if line.startswith("bad record ")]
    first_bad = ends[1] - len(bad) + 1
    assert [n.split(":")[0] for n in named] == [
        f"bad record {topic}/1@{offset}" for offset in range(first_bad, ends[1] + 1)
    ]
    lines = [loads_exact(line) for line in scripted.stdout.splitlines()]
    rows = [line for line in lines if "table" in line]
    markers = [Hlc.parse(line["resolved"]) for line in lines if "table" not in line]
    assert markers == sorted(markers)
    assert markers
    shown = {(dumps(r["key"]).decode(), r["updated"]) for r in rows}
    assert shown == {(m.key.decode(), json.loads(m.value)["updated"]) for m in records}
    assert len(rows) == len(shown), "each change once"

    readable = tail(changefeed, "--bootstrap-servers", kafka_bootstrap)
    out = readable.stdout.splitlines()
    assert f"resolved {markers[-1]}" in out
    assert sum(line.startswith("  orders [") for line in out) == len(rows)
