"""Broker, jars and Spark together: the changefeed carries the source changes across."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from pipeline.dev.generator import GeneratorSpec, write
from schemas.hlc import Hlc
from tests.support.changefeed import (
    changefeed_config,
    checkpoint_records,
    read_output,
    run_to_end,
)
from tests.support.kafka import partition_count
from tests.support.scan import check_output, expected

ROOT = Path(__file__).resolve().parents[2]


def test_streaming_query_carries_every_change(kafka_bootstrap: str, unique_name, spark) -> None:
    source = unique_name("src")
    report = write(
        GeneratorSpec(topic=source, rows=4000, partitions=4, resolved_every=1000),
        {"bootstrap.servers": kafka_bootstrap},
        keep_changes=True,
    )
    config = changefeed_config(
        kafka_bootstrap, unique_name("cf"), [(source, "orders")], encoder={"updated": True}
    )
    run_to_end(config, spark)

    out_topic = config.output_topic(config.sources[0])
    assert partition_count(kafka_bootstrap, out_topic) == 3
    out = read_output(kafka_bootstrap, out_topic)
    got = sorted((m.key, json.loads(m.value)["updated"]) for m in out.rows)
    expected = sorted(
        (json.dumps(list(c.key), separators=(",", ":")).encode(), str(c.updated))
        for c in report.changes
    )
    assert got == expected


def test_the_printed_spark_submit_command_runs_as_printed_from_any_directory(
    kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    """``highwater run --dry-run``'s line, given to a shell elsewhere, the virtualenv not on PATH.

    As a user pastes it into another terminal: a bare environment (no VIRTUAL_ENV, no
    PYSPARK_* or SPARK_HOME, PATH without the virtualenv's bin), another working directory.
    Every other test that runs ``highwater run`` covers the command it starts itself.
    """
    source = unique_name("src")
    report = write(
        GeneratorSpec(topic=source, rows=500, partitions=2, resolved_every=250),
        {"bootstrap.servers": kafka_bootstrap},
        keep_changes=True,
    )
    changefeed_id = unique_name("cf")
    config_file = tmp_path / "cf.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "changefeed_id": changefeed_id,
                "kafka": {"bootstrap_servers": kafka_bootstrap},
                "sources": [{"topic": source, "table": "orders"}],
                "sink": {"topic_prefix": changefeed_id + "."},
                "encoder": {"updated": True, "mvcc_timestamp": True},
                "spark": {"trigger": {"available_now": True}},
            }
        ),
        encoding="utf-8",
    )
    dry = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run", "--config", str(config_file), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    printed = dry.stderr.strip().splitlines()[-1]
    assert "spark-submit" in printed
    bare = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        ["/bin/sh", "-c", printed],
        cwd=elsewhere,
        env=bare,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The default for a new changefeed: the initial scan at the statement time, then the
    # stream (nothing more arrived), and the statement time as the first marker.
    out = read_output(kafka_bootstrap, changefeed_id + ".orders")
    statement = Hlc.parse(checkpoint_records(kafka_bootstrap, changefeed_id)[-1]["statement_time"])
    assert statement == min(report.last_resolved.values())
    check_output(out.rows, expected(report.changes, statement))
    assert [json.loads(m.value)["resolved"] for m in out.markers] == [str(statement)] * 3
