"""A changefeed's life through the control plane, on a real broker with real spark-submits.

* the server runs what was created, pause stops it at a batch's end with the safepoint held,
  resume goes on, a server killed and restarted picks the changefeed up again; on a steady
  feed, the validator then finds nothing lost and no marker backwards;
* ``on_error: pause`` pauses at the bad record, naming it; a ``highwater run`` started while
  paused waits; ``resume --skip-bad-record`` sends the record to the dead-letter topic and
  the feed goes on.

What is asserted is what operators and consumers see: the spec and status records (through
the CLI and the REST API), the output and dead-letter topics, the safepoint registry.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from pipeline.cli import main as highwater
from pipeline.config import load_config
from pipeline.control.changefeeds import Changefeeds
from pipeline.control.context import OperatorContext
from schemas.errors import ConfigError, LifecycleError
from sinks.admin import ensure_topics
from tests.integration.test_chaos import SteadyProducer, config_for
from tests.support.changefeed import run_to_end
from tests.support.kafka import consume_all, produce_with_a_bad_record
from tests.support.process import run, start_run, write_config
from tests.support.process import start_server as highwater_server
from tests.support.validator import validate
from tests.support.workload import Workload

TOKEN = "lifecycle-token"  # noqa: S105 - a test token
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """An API call as any HTTP client makes it: the status and the JSON body."""
    data = None if body is None else json.dumps(body).encode()
    headers = {**AUTH, "Content-Type": "application/json"}
    request = urllib.request.Request(url, data, headers)  # noqa: S310 - our server's http URL
    request.method = method
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - our server
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(bootstrap: str, port: int, state: Path, log: Path) -> subprocess.Popen[bytes]:
    """``highwater server`` as operators start it (it runs the changefeeds created)."""
    arguments = ["--port", str(port), "--token", TOKEN, "--bootstrap-servers", bootstrap]
    return highwater_server(arguments, state, log)


def wait_for(what: str, check: Callable[[], Any], timeout: float, log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except OSError:
            found = None
        if found:
            return found
        time.sleep(1)
    runs = "\n".join(p.read_text(errors="replace")[-2000:] for p in log.parent.rglob("*.log"))
    raise AssertionError(f"timed out waiting for {what}\n{runs}")


def rows(bootstrap: str, topic: str) -> int:
    return sum(1 for m in consume_all(bootstrap, topic, timeout=30) if m.key is not None)


def test_the_server_runs_pauses_resumes_and_picks_up_a_changefeed(
    kafka_bootstrap: str, unique_name: Any, tmp_path: Path, spark: Any
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    out = f"{changefeed_id}.t"
    workload = Workload(partitions=3, seed=31)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 3})
    feed = SteadyProducer(kafka_bootstrap, source, workload).start()
    raw = config_for(kafka_bootstrap, changefeed_id, source)
    port, state, log = free_port(), tmp_path / "state", tmp_path / "server.log"
    api = f"http://127.0.0.1:{port}/api/v2/changefeeds"
    server = start_server(kafka_bootstrap, port, state, log)
    try:
        wait_for("the API", lambda: call("GET", api)[0] == 200, 60, log)
        status, created = call("POST", api, {"config": json.dumps(raw)})
        assert status == 201, created
        assert created["desired"] == "running"
        status, again = call("POST", api, {"config": json.dumps(raw)})
        assert (status, again["error_code"]) == (409, "conflict"), again  # it exists

        one = f"{api}/{changefeed_id}"
        wait_for("rows", lambda: rows(kafka_bootstrap, out) > 50, 180, log)
        status, paused = call("POST", f"{one}/pause")
        assert (status, paused["desired"]) == (200, "paused"), paused
        wait_for("paused", lambda: call("GET", one)[1]["state"] == "paused", 60, log)
        held = call("GET", one)[1]["safepoint"]
        assert held is not None, "a paused changefeed keeps its safepoint"
        written = rows(kafka_bootstrap, out)
        time.sleep(5)  # the feed goes on upstream; nothing comes out while paused
        assert rows(kafka_bootstrap, out) == written

        assert call("POST", f"{one}/resume", {})[0] == 200
        wait_for("resumed", lambda: rows(kafka_bootstrap, out) > written, 180, log)

        server.kill()  # the server dies; its changefeed's run is left to be fenced
        server.wait()
        starts = log.read_text().count("started (pid")
        server = start_server(kafka_bootstrap, port, state, log)
        before = rows(kafka_bootstrap, out)
        wait_for(
            "a new run after the server's restart",
            lambda: (
                log.read_text().count("started (pid") > starts
                and rows(kafka_bootstrap, out) > before
            ),
            180,
            log,
        )
    finally:
        feed.stop()
        server.send_signal(signal.SIGTERM)  # each run finishes its batch, checkpoints, stops
        server.wait(180)
    feed.finish()
    # the server's SIGTERM stopped its run before the server ended (none is left to fence
    # the drain below)
    last_run = int(re.findall(r"started \(pid (\d+)", log.read_text())[-1])
    with pytest.raises(ProcessLookupError):
        os.kill(last_run, 0)
    drain = {**raw, "spark": {"trigger": {"available_now": True}}}
    run_to_end(load_config(write_config(tmp_path / "drain.yaml", drain)), spark)  # in-process

    report = validate(
        workload,
        consume_all(kafka_bootstrap, out),
        consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}"),
    )
    assert not report.violations, dict(report.violations)
    assert report.distinct == len(workload.changes)


def test_on_error_pause_names_the_record_and_resume_can_skip_it(
    kafka_bootstrap: str, unique_name: Any, tmp_path: Path
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    produce_with_a_bad_record(kafka_bootstrap, source)
    raw = config_for(kafka_bootstrap, changefeed_id, source)
    raw |= {"on_error": "pause", "spark": {"trigger": {"available_now": True}}}
    config = write_config(tmp_path / "cf.yaml", raw)
    cli = ["--config", str(config)]
    log = tmp_path / "run.log"

    assert run(config, log) == 0, log.read_text()[-3000:]  # paused: not a failure
    context = OperatorContext({"bootstrap.servers": kafka_bootstrap})
    found = Changefeeds(context).get(changefeed_id)
    assert found.spec is not None
    assert found.status is not None
    assert found.spec.desired == "paused"
    assert str(found.spec.bad_record) == f"{source}/0@2"
    assert found.status.state == "paused"
    assert f"topic={source} partition=0 offset=2" in (found.status.error or "")
    out = consume_all(kafka_bootstrap, f"{changefeed_id}.t")
    assert sorted(m.key for m in out if m.key) == [b"[0]", b"[1]"]  # nothing after the record

    waiting = start_run(config, tmp_path / "waiting.log")
    try:
        wait_for(
            "a run that waits while paused",
            lambda: "is paused" in (tmp_path / "waiting.log").read_text(),
            120,
            log,
        )
        assert waiting.poll() is None
        assert highwater(["changefeed", "resume", changefeed_id, "--skip-bad-record", *cli]) == 0
        assert waiting.wait(240) == 0, (tmp_path / "waiting.log").read_text()[-3000:]
    finally:
        if waiting.poll() is None:
            waiting.kill()
    out = consume_all(kafka_bootstrap, f"{changefeed_id}.t")
    assert sorted(m.key for m in out if m.key) == [b"[0]", b"[1]", b"[3]"]
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    assert [(m.key, m.value) for m in dead] == [(b"[2]", b"not json {")]
    reason = dict(dead[0].headers)["highwater.error"].decode()
    assert reason.startswith("skipped by an operator (resume --skip-bad-record): ")
    assert Changefeeds(context).get(changefeed_id).spec.desired == "running"  # type: ignore[union-attr]


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0


def change(key: int, ts: int, after: str | None) -> tuple[bytes, bytes]:
    value = "null" if after is None else after
    return f"[{key}]".encode(), f'{{"after":{value},"updated":"{ts}.0000000000"}}'.encode()


def marker(ts: int) -> tuple[None, bytes]:
    return None, f'{{"resolved":"{ts}.0000000000"}}'.encode()


def test_update_adds_a_table_with_its_own_scan_and_refuses_what_breaks_the_output(
    kafka_bootstrap: str, unique_name: Any, tmp_path: Path, spark: Any
) -> None:
    orders, customers, changefeed_id = unique_name("orders"), unique_name("cust"), unique_name("cf")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {orders: 1, customers: 1})
    produce(kafka_bootstrap, orders, [change(1, 10, '{"id":1,"n":1.50}'), marker(40)])
    produce(
        kafka_bootstrap,
        customers,
        [
            change(7, 10, '{"id":7,"v":"old"}'),
            change(8, 15, '{"id":8,"v":"ü"}'),
            change(9, 12, '{"id":9}'),
            change(7, 20, '{"id":7,"v":"new"}'),
            change(9, 25, None),  # deleted before the update: not in the snapshot
            marker(50),
        ],
    )
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": [{"topic": orders, "table": "orders"}],
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 2},
        "encoder": {"updated": True},
        "spark": {"trigger": {"available_now": True}},
    }
    first = write_config(tmp_path / "cf.yaml", raw)
    context = OperatorContext({"bootstrap.servers": kafka_bootstrap})
    feeds = Changefeeds(context)
    feeds.create(first.read_text(), str(tmp_path))
    run_to_end(load_config(first), spark)  # in-process: the runs are not what is under test
    assert highwater(["changefeed", "pause", changefeed_id, "--config", str(first)]) == 0

    # Refused: the envelope's fields would change on the existing topic. Nothing is written.
    reshaped = write_config(tmp_path / "reshaped.yaml", raw | {"encoder": {"diff": True}})
    with pytest.raises(LifecycleError) as refusal:
        feeds.update(changefeed_id, reshaped.read_text(), str(tmp_path))
    assert refusal.value.code == "invalid_argument"
    assert "encoder.diff: shapes every message" in str(refusal.value)
    assert feeds.get(changefeed_id).spec.config == first.read_text()  # type: ignore[union-attr]

    added = {**raw, "sources": [*raw["sources"], {"topic": customers, "table": "customers"}]}
    # the cluster at another address: the same cluster (its id), so the checkpoint holds
    moved = {"bootstrap_servers": kafka_bootstrap.replace("127.0.0.1", "localhost")}
    added |= {"resolved": {"interval": "1s"}, "kafka": moved}
    second = write_config(tmp_path / "added.yaml", added)
    assert highwater(["changefeed", "update", changefeed_id, "--config", str(second)]) == 0
    assert highwater(["changefeed", "resume", changefeed_id, "--config", str(second)]) == 0
    produce(kafka_bootstrap, orders, [change(2, 60, '{"id":2}'), marker(70)])
    later = [change(8, 55, '{"id":8,"v":"live"}'), marker(70), change(7, 80, '{"id":7}')]
    produce(kafka_bootstrap, customers, later)
    run_to_end(load_config(second), spark)

    def rows_of(topic: str) -> list[tuple[bytes, bytes]]:
        return sorted((m.key, m.value) for m in consume_all(kafka_bootstrap, topic) if m.key)

    # The added table: its snapshot at its own time (its source's high-water mark when the
    # run started: 70), then the change after it; the other table: no snapshot again, only
    # what is new.
    assert rows_of(f"{changefeed_id}.customers") == [
        (b"[7]", b'{"after":{"id":7,"v":"new"},"updated":"70.0000000000"}'),
        (b"[7]", b'{"after":{"id":7},"updated":"80.0000000000"}'),
        (b"[8]", b'{"after":{"id":8,"v":"live"},"updated":"70.0000000000"}'),
    ]
    assert rows_of(f"{changefeed_id}.orders") == [
        (b"[1]", b'{"after":{"id":1,"n":1.50},"updated":"40.0000000000"}'),  # the first scan
        (b"[2]", b'{"after":{"id":2},"updated":"60.0000000000"}'),
    ]
    for topic in ("orders", "customers"):  # markers on every partition of both, up to 70
        markers = [
            (m.partition, json.loads(m.value)["resolved"])
            for m in consume_all(kafka_bootstrap, f"{changefeed_id}.{topic}")
            if m.key is None
        ]
        assert {p for p, _ in markers} == {0, 1}
        assert max(r for _, r in markers) == "70.0000000000"
    kept = consume_all(kafka_bootstrap, "_highwater_checkpoints")
    records = [json.loads(m.value) for m in kept if m.key == changefeed_id.encode()]
    assert records[-1]["backfill"] is None
    assert records[-1]["topics"] == [orders, customers]
    shapes = [json.loads(m.value) for m in kept if m.key == f"shape/{changefeed_id}".encode()]
    assert [s["topic"] for s in shapes[-1]["sources"]] == [orders, customers]
    cluster = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics().cluster_id
    assert shapes[-1]["kafka"] == {**moved, "cluster_id": cluster}
    assert shapes[0]["kafka"] == {"bootstrap_servers": kafka_bootstrap, "cluster_id": cluster}
    assert any((r["backfill"] or {}).get("time") == "70.0000000000" for r in records)

    # `highwater run` with a file that changes the envelope: refused at start, naming it.
    assert highwater(["changefeed", "pause", changefeed_id, "--config", str(second)]) == 0
    assert highwater(["changefeed", "resume", changefeed_id, "--config", str(second)]) == 0
    edited = write_config(tmp_path / "edited.yaml", added | {"encoder": {"updated": False}})
    with pytest.raises(ConfigError) as refused:
        run_to_end(load_config(edited), spark)
    assert "encoder.updated: shapes every message" in str(refused.value)

    # The checkpoint names another cluster (as if the address now led elsewhere): refused.
    elsewhere = {**shapes[-1], "kafka": {**moved, "cluster_id": "another"}}
    shape_record = (f"shape/{changefeed_id}".encode(), json.dumps(elsewhere).encode())
    produce(kafka_bootstrap, "_highwater_checkpoints", [shape_record])
    with pytest.raises(ConfigError) as other:
        run_to_end(load_config(second), spark)
    assert (
        "kafka.bootstrap_servers: the checkpoint's offsets belong to the source cluster it "
        f"names, cluster 'another'; {moved['bootstrap_servers']} answers as cluster {cluster!r}"
    ) in str(other.value)
