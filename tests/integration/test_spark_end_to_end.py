"""Broker, jars and Spark together: a streaming query carries every source record across."""

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

from pipeline import changefeed
from pipeline.config import parse_config
from pipeline.dev.generator import GeneratorSpec, write
from tests.support.kafka import consume_all, partition_count

ROOT = Path(__file__).resolve().parents[2]


def config_for(bootstrap: str, source: str, prefix: str, tmp_path: Path) -> dict[str, object]:
    return {
        "changefeed_id": "e2e",
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [{"topic": source, "table": "orders"}],
        "sink": {"topic_prefix": prefix, "partitions": 3},
        "spark": {
            "trigger": {"available_now": True},
            "checkpoint_location": str(tmp_path / "spark-checkpoint"),
        },
    }


def test_streaming_query_copies_every_record(
    kafka_bootstrap: str, unique_name, spark, tmp_path: Path
) -> None:
    source = unique_name("src")
    write(
        GeneratorSpec(topic=source, rows=4000, partitions=4, resolved_every=1000),
        {"bootstrap.servers": kafka_bootstrap},
    )
    prefix = unique_name("out") + "."
    config = parse_config(config_for(kafka_bootstrap, source, prefix, tmp_path), env={})

    query = changefeed.start(config, spark)
    query.awaitTermination(300)
    assert query.exception() is None

    out_topic = prefix + "orders"
    assert partition_count(kafka_bootstrap, out_topic) == 3
    sent = Counter((m.key, m.value) for m in consume_all(kafka_bootstrap, source))
    received = Counter((m.key, m.value) for m in consume_all(kafka_bootstrap, out_topic))
    assert received == sent
    assert sum(sent.values()) == 4000 + 4 * 4


def test_highwater_run_submits_the_job_with_spark_submit(
    kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    source = unique_name("src")
    write(
        GeneratorSpec(topic=source, rows=500, partitions=2, resolved_every=250),
        {"bootstrap.servers": kafka_bootstrap},
    )
    prefix = unique_name("out") + "."
    config_file = tmp_path / "cf.yaml"
    config_file.write_text(
        yaml.safe_dump(config_for(kafka_bootstrap, source, prefix, tmp_path)), encoding="utf-8"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    result = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "spark-submit" in result.stderr.splitlines()[0]
    received = consume_all(kafka_bootstrap, prefix + "orders")
    assert len(received) == 500 + 2 * 2
