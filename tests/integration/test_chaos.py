"""Chaos: random workload, steady producer, SIGKILLs at random moments, then the validator.

The workload is seeded (``tests/support/workload.py``); the driver is killed with SIGKILL at
random moments (and, in the soak, the broker is restarted); then the validator reads what
users read.

The suite runs a short version (``HIGHWATER_SOAK_KILLS``, default 2 kills); ``make soak``
runs 20 kills and a broker restart on a broker of its own and prints the numbers that
``docs/benchmarks.md`` records, with the duplicates each kill caused (the rows the run after
it emitted again).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from pipeline.config import load_config
from pipeline.dev.broker import EmbeddedKafka
from sinks.admin import ensure_topics
from tests.support.changefeed import checkpoint_records, run_to_end
from tests.support.kafka import consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.producer import SteadyProducer
from tests.support.seeds import suite_seed
from tests.support.validator import duplicates_by_run, validate
from tests.support.workload import Workload

KILLS = int(os.environ.get("HIGHWATER_SOAK_KILLS", "2"))
SOAK = "HIGHWATER_SOAK_KILLS" in os.environ
# the suite's (make test: kills after_marker:2 and during_write:2), new in the soak; printed
SEED = suite_seed()
# exactly once: no (key, updated) twice for read_committed; at_least_once: the duplicates
# each kill caused are printed
DELIVERY = os.environ.get("HIGHWATER_SOAK_DELIVERY", "exactly_once")
POINTS = ("during_write", "after_write", "before_marker", "after_marker")
PARTITIONS = 3


def config_for(bootstrap: str, changefeed_id: str, source: str) -> dict[str, Any]:
    return {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [{"topic": source, "table": "t"}],
        "cursor": "0.0000000000",
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "encoder": {"updated": True, "diff": True},
        "resolved": {"interval": "1s"},
        "checkpoint": {"min_checkpoint_frequency": "1s"},
        "on_error": "dlq",
        "spark": {"trigger": {"processing_time": "300ms"}, "max_offsets_per_trigger": 300},
    }


def delivered(bootstrap: str, changefeed_id: str, source: str) -> dict[str, Any]:
    """:func:`config_for` with the chaos run's delivery."""
    return {**config_for(bootstrap, changefeed_id, source), "delivery": DELIVERY}


def test_a_random_workload_survives_kills_and_the_validator_finds_nothing(
    kafka_bootstrap: str, unique_name: Any, tmp_path: Path, spark: Any
) -> None:
    broker = EmbeddedKafka(tmp_path / "soak-kafka") if SOAK else None
    bootstrap = broker.start().bootstrap_servers if broker is not None else kafka_bootstrap
    try:
        chaos(bootstrap, unique_name("src"), unique_name("cf"), tmp_path, broker, spark)
    finally:
        if broker is not None:
            broker.stop()


def chaos(  # noqa: PLR0917 - one soak's parts
    bootstrap: str,
    source: str,
    changefeed_id: str,
    tmp_path: Path,
    broker: EmbeddedKafka | None,
    spark: Any,
) -> None:
    rnd = random.Random(SEED)
    workload = Workload(partitions=PARTITIONS, seed=SEED)
    ensure_topics({"bootstrap.servers": bootstrap}, {source: PARTITIONS})
    producer = SteadyProducer(bootstrap, source, workload).start()
    config = write_config(tmp_path / "cf.yaml", delivered(bootstrap, changefeed_id, source))
    log = tmp_path / "runs.log"
    started = time.monotonic()
    ends: list[dict[int, int]] = []  # where each killed run left each output partition
    for kill in range(KILLS):
        crash = f"{rnd.choice(POINTS)}:{rnd.randint(2, 5)}"
        run_killed_at(config, log, crash, timeout=240)
        ends.append(
            {m.partition: m.offset + 1 for m in consume_all(bootstrap, f"{changefeed_id}.t")}
        )
        if broker is not None and kill == KILLS // 2:  # the soak restarts its broker once
            producer.stop()
            broker.stop()
            bootstrap = broker.start().bootstrap_servers
            config = write_config(tmp_path / "cf.yaml", delivered(bootstrap, changefeed_id, source))
            producer = SteadyProducer(bootstrap, source, workload).start()
    producer.stop()
    # the kills landed in a working changefeed: rows and checkpoints were written before them
    before_drain = [m for m in consume_all(bootstrap, f"{changefeed_id}.t") if m.key is not None]
    assert before_drain, "no run wrote a row before it was killed"
    assert len(checkpoint_records(bootstrap, changefeed_id)) > 1, "no checkpoint past creation"
    producer.finish()
    drain = delivered(bootstrap, changefeed_id, source)
    drain["spark"] = {"trigger": {"available_now": True}}
    run_to_end(load_config(write_config(tmp_path / "drain.yaml", drain)), spark)  # in-process
    output = consume_all(bootstrap, f"{changefeed_id}.t")  # read_committed
    dead = consume_all(bootstrap, f"_highwater_dlq_{changefeed_id}")
    report = validate(workload, output, dead, exactly_once=DELIVERY == "exactly_once")
    replays = duplicates_by_run(output, ends)[1:]  # the run after each kill
    print(
        f"chaos ({DELIVERY}): seed {SEED}, {KILLS} kills{', a broker restart' if broker else ''}, "
        f"{len(workload.changes)} changes ({len(workload.duplicates)} upstream duplicates, "
        f"{len(workload.bad)} bad records) in {time.monotonic() - started:.0f} s: "
        f"{report.summary()}; duplicates per kill {replays} (max {max(replays, default=0)})"
    )
    assert not report.violations, dict(report.violations)
    assert report.distinct == len(workload.changes)  # every change, at least once
