"""Safepoints and GC on a real broker and Spark: the seed's story, both endings (seed 003_…).

A changefeed checkpoints at T1 and stops; more changes arrive; its safepoint's TTL runs out.
With an operator's safepoint at T1, GC is held there and the changefeed resumes losing
nothing; without one, GC trims and the resume is refused, naming what is gone.
"""

import json
import time
from datetime import timedelta
from typing import Any

import pytest

from pipeline.cli import main as highwater
from pipeline.config import TriggerConfig
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.core.progress.safepoints import SafepointRegistry
from pipeline.dev.generator import GeneratorSpec, write
from schemas.errors import SafepointError
from schemas.hlc import Hlc
from tests.support.changefeed import changefeed_config, checkpoint_records, read_output
from tests.support.kafka import consume_all

TTL = 2.0  # the changefeed's gc_ttl in these tests, in seconds


def setup(kafka_bootstrap: str, unique_name: Any) -> tuple[Any, list[str]]:
    source = unique_name("src")
    cluster = unique_name("c").replace(".", "-")
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        encoder={"updated": True},
        safepoints={"topic": unique_name("sp"), "cluster": cluster, "gc_ttl": f"{TTL}s"},
        jobs={"topic": unique_name("jobs")},
    )
    cli = [
        "--bootstrap-servers",
        kafka_bootstrap,
        "--cluster",
        cluster,
        "--safepoint-topic",
        config.safepoints.topic,
        "--jobs-topic",
        config.jobs.topic,
    ]
    return config, cli


def generate(bootstrap: str, source: str, seed: int, first_id: int) -> Any:
    return write(
        GeneratorSpec(
            topic=source,
            rows=600,
            partitions=2,
            resolved_every=200,
            seed=seed,
            first_order_id=first_id,
        ),
        {"bootstrap.servers": bootstrap},
        keep_changes=True,
    )


def gc_once(cli: list[str], source: str, capsys: Any) -> str:
    command = ["gc", "run", "--once", "--topic", source, "--gc-life-time", "0s", *cli]
    assert highwater(command) == 0
    return capsys.readouterr().out


def gc_safe_point(printed: str) -> Hlc:
    line = next(x for x in printed.splitlines() if x.startswith("GC safe point:"))
    return Hlc.parse(line.split()[3])


def test_an_operator_safepoint_holds_gc_and_the_changefeed_resumes_losing_nothing(
    kafka_bootstrap: str, spark: Any, unique_name: Any, capsys: Any
) -> None:
    config, cli = setup(kafka_bootstrap, unique_name)
    source = config.sources[0].topic
    first = generate(kafka_bootstrap, source, seed=1, first_id=1)
    Changefeed(config, spark).run()  # checkpoints at T1, then stops (as if killed)
    t1 = Hlc.parse(
        checkpoint_records(kafka_bootstrap, config.changefeed_id, config.checkpoint.topic)[-1][
            "high_water"
        ]
    )
    assert t1 == min(first.last_resolved.values())
    second = generate(kafka_bootstrap, source, seed=2, first_id=100_000)

    time.sleep(TTL + 0.5)  # the changefeed's own safepoint expires
    assert highwater(["safepoint", "set", "--start-ts", str(t1), "--ttl", "3600", *cli]) == 0
    printed = gc_once(cli, source, capsys)
    assert gc_safe_point(printed) == t1, printed  # held at T1 by the operator
    assert f"{source}/0: offsets 0.." in printed  # what is at or below T1 can go
    assert f"WARNING: topic {source} has retention.ms=" in printed  # the broker's default
    assert consume_all(kafka_bootstrap, source), "GC trimmed past T1"

    Changefeed(config, spark).run()  # resumes: nothing it needs was trimmed
    output = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    emitted = {(m.key, json.loads(m.value)["updated"]) for m in output.rows}
    wanted = {
        (json.dumps(list(c.key), separators=(",", ":")).encode(), str(c.updated))
        for c in first.changes + second.changes
    }
    assert emitted == wanted, "a change was lost"

    assert highwater(["safepoint", "query", *cli]) == 0
    listed = capsys.readouterr().out
    assert f"highwater-{config.safepoints.cluster}-user-defined" in listed
    assert f"highwater-{config.safepoints.cluster}-changefeed-{config.changefeed_id}" in listed
    assert highwater(["safepoint", "delete", *cli]) == 0
    time.sleep(TTL + 0.5)  # and the changefeed's refreshed one expires too
    assert gc_safe_point(gc_once(cli, source, capsys)) > t1  # GC proceeds


def test_when_the_ttl_expires_gc_trims_and_the_resume_is_refused_naming_what_is_gone(
    kafka_bootstrap: str, spark: Any, unique_name: Any, capsys: Any
) -> None:
    config, cli = setup(kafka_bootstrap, unique_name)
    source = config.sources[0].topic
    generate(kafka_bootstrap, source, seed=3, first_id=1)
    Changefeed(config, spark).run()
    t1 = Hlc.parse(
        checkpoint_records(kafka_bootstrap, config.changefeed_id, config.checkpoint.topic)[-1][
            "high_water"
        ]
    )
    generate(kafka_bootstrap, source, seed=4, first_id=100_000)

    time.sleep(TTL + 0.5)
    printed = gc_once(cli, source, capsys)
    gc = gc_safe_point(printed)
    assert gc > t1
    assert f"{source}/0: offsets 0.." in printed  # what it trimmed

    with pytest.raises(SafepointError) as refused:
        Changefeed(config, spark).run()
    message = str(refused.value)
    assert message.startswith("GC TTL exceeded")
    assert str(t1) in message
    assert str(gc) in message
    assert f"{source} partitions 0-1" in message

    assert highwater(["changefeed", "query", config.changefeed_id, *cli]) == 1
    status = capsys.readouterr().out
    assert "state           failed" in status
    assert "GC TTL exceeded" in status
    assert f"WARNING: topic {source} has retention.ms=" in status

    # A new changefeed may not start below the GC safe point either.
    behind = config.model_copy(update={"changefeed_id": unique_name("cf2"), "cursor": t1})
    with pytest.raises(SafepointError, match="cannot start at"):
        Changefeed(behind, spark).run()


def test_operator_safepoints_are_refused_below_gc_and_for_changefeeds(
    kafka_bootstrap: str, unique_name: Any, capsys: Any
) -> None:
    _config, cli = setup(kafka_bootstrap, unique_name)
    assert highwater(["safepoint", "set", "--start-ts", "now", "--ttl", "0", *cli]) == 1
    assert "ttl must be positive" in capsys.readouterr().err
    forbidden = ["--service-id-suffix", "changefeed-x"]
    assert highwater(["safepoint", "set", "--start-ts", "now", *forbidden, *cli]) == 1
    assert "only the changefeed sets and deletes" in capsys.readouterr().err
    assert highwater(["safepoint", "delete", *forbidden, *cli]) == 1
    capsys.readouterr()
    gc_once(cli, unique_name("none"), capsys)  # a GC pass moves the GC safe point to now
    assert highwater(["safepoint", "set", "--start-ts=-1h", *cli]) == 1
    assert "is below the GC safe point" in capsys.readouterr().err


def test_a_high_water_mark_that_stands_still_longer_than_gc_ttl_fails_the_changefeed(
    kafka_bootstrap: str, spark: Any, unique_name: Any, capsys: Any
) -> None:
    config, cli = setup(kafka_bootstrap, unique_name)
    config = config.model_copy(
        update={
            "safepoints": config.safepoints.model_copy(update={"gc_ttl": timedelta(seconds=4)}),
            "spark": config.spark.model_copy(
                update={"trigger": TriggerConfig(processing_time=timedelta(seconds=0.5))}
            ),
        }
    )
    generate(kafka_bootstrap, config.sources[0].topic, seed=5, first_id=1)  # then silence
    with pytest.raises(SafepointError, match="has not moved for more than gc_ttl"):
        Changefeed(config, spark).run()
    assert highwater(["changefeed", "query", config.changefeed_id, *cli]) == 1
    assert "GC TTL exceeded" in capsys.readouterr().out


def test_clusters_whose_names_prefix_each_other_stay_apart(
    kafka_bootstrap: str, unique_name: Any
) -> None:
    topic, base = unique_name("sp"), unique_name("c").replace(".", "-")
    client = {"bootstrap.servers": kafka_bootstrap}
    short, long_ = (
        SafepointRegistry(client, topic, base),
        SafepointRegistry(client, topic, f"{base}-b"),
    )
    short.ensure()
    long_.hold("y", Hlc(5), 3600)  # highwater-<base>-b-changefeed-y
    assert short.read().safepoints == {}
    with pytest.raises(SafepointError, match="only its owner sets and deletes it") as refused:
        short.set_user("b-changefeed-y", Hlc(10), 60)
    assert refused.value.code == "forbidden"
    with pytest.raises(SafepointError, match="only its owner"):
        short.delete_user("b-changefeed-y")
    assert list(long_.read().safepoints) == [f"highwater-{base}-b-changefeed-y"]
    short.close()
    long_.close()
