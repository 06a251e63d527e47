"""The embedded broker itself: two side by side, stop one, the other keeps serving."""

import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

from pipeline.dev.broker import EmbeddedKafka
from sinks.admin import ensure_topics
from tests.support.kafka import consume_all


def produce(bootstrap: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def test_two_brokers_side_by_side_and_stopping_one_leaves_the_other(tmp_path: Path) -> None:
    first, second = EmbeddedKafka(tmp_path / "a"), EmbeddedKafka(tmp_path / "b")
    try:
        a, b = first.start(), second.start()
        assert a.port != b.port
        assert a.pid != b.pid
        for info in (a, b):
            ensure_topics({"bootstrap.servers": info.bootstrap_servers}, {"t": 1})
            produce(info.bootstrap_servers, "t", f"hello {info.port}".encode())

        assert first.stop() is True
        assert first.status() is None
        assert second.status() == b

        produce(b.bootstrap_servers, "t", b"still here")
        values = [m.value for m in consume_all(b.bootstrap_servers, "t")]
        assert values == [f"hello {b.port}".encode(), b"still here"]
        assert (tmp_path / "a" / "logs" / "server.log").stat().st_size > 0
    finally:
        first.stop()
        second.stop()
    assert second.status() is None
    assert first.stop() is False  # stopping a stopped broker is a no-op


def test_restart_keeps_topics_and_data(tmp_path: Path) -> None:
    broker = EmbeddedKafka(tmp_path / "k")
    try:
        info = broker.start()
        ensure_topics({"bootstrap.servers": info.bootstrap_servers}, {"kept": 2})
        produce(info.bootstrap_servers, "kept", b"before restart")
        broker.stop()
        info = broker.start()
        assert [m.value for m in consume_all(info.bootstrap_servers, "kept")] == [b"before restart"]
    finally:
        broker.stop()


def test_cli_start_status_stop(tmp_path: Path) -> None:
    def highwater(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "dev", "kafka", *args, "--dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    try:
        started = highwater("start")
        assert started.returncode == 0, started.stderr
        assert started.stdout.startswith("Kafka broker 127.0.0.1:")
        status = highwater("status")
        assert status.returncode == 0
        assert status.stdout.split()[2] == started.stdout.split()[2]
    finally:
        assert highwater("stop").stdout.strip() in ("stopped", "not running")
    after = highwater("status")
    assert after.returncode == 3
    assert after.stdout.strip() == "not running"
