"""A changefeed on a cluster: three KRaft Kafka nodes and Spark workers, killed and restarted.

``make cluster-test`` runs it (not ``make test``: a three-node cluster does not fit the
suite's time on two cores). What is asserted is what operators and consumers see: the
replicas and in-sync replicas of every topic the changefeed relies on (Kafka's own
metadata), the job status ``highwater changefeed query`` prints, and the output rows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from pipeline.cli import main as highwater
from pipeline.config import load_config
from pipeline.core.coordinator.setup import relied_on
from pipeline.dev.cluster import KafkaCluster, KafkaClusterInfo
from pipeline.dev.generator import GeneratorSpec, write
from pipeline.dev.service import kill
from pipeline.dev.spark_cluster import SparkCluster
from sinks.admin import ensure_topics
from tests.integration.test_chaos import DELIVERY, SteadyProducer, delivered
from tests.support.changefeed import changefeed_config, read_output, run_to_end
from tests.support.kafka import consume_all
from tests.support.process import run as run_to_exit
from tests.support.process import run_killed_at, start_run, write_config
from tests.support.validator import validate
from tests.support.workload import Workload

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not os.environ.get("HIGHWATER_CLUSTER_TESTS"), reason="make cluster-test runs it"
    ),
]


def replicas(bootstrap: str, topics: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Per topic, each partition's (replicas, in-sync replicas), as Kafka reports them."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return {
        topic: [
            (len(p.replicas), len(p.isrs))
            for _, p in sorted(metadata.topics[topic].partitions.items())
        ]
        for topic in topics
    }


def query(changefeed_id: str, bootstrap: str, capsys: Any) -> str:
    capsys.readouterr()
    assert highwater(["changefeed", "query", changefeed_id, "--bootstrap-servers", bootstrap]) == 0
    return str(capsys.readouterr().out)


def orders(bootstrap: str, seed: int, first_id: int) -> int:
    """600 generated changes on 3 partitions (the topic made with Highwater's defaults)."""
    spec = GeneratorSpec(
        topic="orders",
        rows=600,
        partitions=3,
        resolved_every=100,
        seed=seed,
        first_order_id=first_id,
    )
    return write(spec, {"bootstrap.servers": bootstrap}).total


def test_three_copies_of_everything_and_a_lost_node_is_reported_while_the_feed_goes_on(
    cluster: KafkaCluster, spark: Any, capsys: Any, tmp_path: Path
) -> None:
    info: KafkaClusterInfo = cluster.start()
    bootstrap = info.bootstrap_servers
    written = orders(bootstrap, seed=1, first_id=1)
    config = changefeed_config(
        bootstrap, "cf", [("orders", "orders")], encoder={"updated": True}, on_error="dlq"
    )
    run_to_end(config, spark)
    on_sink, on_source = relied_on(config)
    relied = sorted({*on_sink, *on_source})
    assert set(relied) >= {"cf.orders", "cf.checkpoints", "_highwater_dlq_cf", "orders"}
    assert replicas(bootstrap, relied) == {
        topic: [(3, 3)] * len(parts) for topic, parts in replicas(bootstrap, relied).items()
    }
    assert "replica" not in query("cf", bootstrap, capsys)  # (retention is warned of)

    # Node 2 lost: 2 of 3 copies stay in sync (min.insync.replicas=2), so acks=all writes,
    # checkpoints and markers go on; the status names what is under-replicated.
    cluster.kill(2)
    written += orders(bootstrap, seed=2, first_id=10_000)
    run_to_end(config, spark)
    status = query("cf", bootstrap, capsys)
    assert "WARNING: topic cf.orders: partitions [0, 1, 2] are under-replicated" in status
    assert "WARNING: topic cf.checkpoints: partitions [0] are under-replicated" in status

    # Node 2 back at its address: it catches up, and the next run's status is clean.
    cluster.start()
    deadline = time.monotonic() + 120
    while any(isr < 3 for parts in replicas(bootstrap, relied).values() for _, isr in parts):
        assert time.monotonic() < deadline, replicas(bootstrap, relied)
        time.sleep(1)
    run_to_end(config, spark)
    assert "replica" not in query("cf", bootstrap, capsys)

    rows = read_output(bootstrap, "cf.orders").rows
    assert len({(m.key, m.value) for m in rows}) == written  # every change, none lost


def written_to(bootstrap: str, topic: str, partitions: int) -> int | None:
    """Records on ``topic`` so far (its partitions' end offsets); None while one has no leader."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "highwater-cluster-test"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            for p in range(partitions)
        )
    except KafkaException:
        return None
    finally:
        consumer.close()


def leader(bootstrap: str, topic: str, partition: int) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return int(metadata.topics[topic].partitions[partition].leader)


def until(what: str, check: Any, timeout: float = 180) -> float:
    """Seconds until ``check()`` is true (an AssertionError naming ``what`` after timeout)."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"timed out waiting for {what}"
        time.sleep(0.5)
    return time.monotonic() - started


_SUPERVISED: list[Supervised] = []  # runs a test started and has not stopped


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test() -> Iterator[None]:
    """A failed test's runs stopped (they went on for minutes, holding the machine's cores)."""
    yield
    while _SUPERVISED:
        _SUPERVISED.pop().abandon()


class Supervised:
    """``highwater run`` restarted whenever it exits, as the server's supervisor does."""

    def __init__(self, config: Path, log: Path) -> None:
        self.config, self.log = config, log
        self.exits: list[int] = []
        self.process = start_run(config, log)
        _SUPERVISED.append(self)

    def check(self) -> None:
        code = self.process.poll()
        if code is not None:
            self.exits.append(code)
            self.process = start_run(self.config, self.log)

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.exits.append(self.process.wait(120))
        if self in _SUPERVISED:
            _SUPERVISED.remove(self)

    def abandon(self) -> None:
        """Stop the run now (a failed test's): SIGTERM, then SIGKILL to its driver."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        kill(driver_pids(self.config))  # a spark-submit JVM left behind


class SteadyFeed:
    """The chaos workload written steadily to ``<name>.src``, and a changefeed over it."""

    def __init__(
        self,
        bootstrap: str,
        name: str,
        seed: int,
        tmp_path: Path,
        master: str | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.bootstrap, self.name, self.tmp_path = bootstrap, name, tmp_path
        self.output = f"{name}.t"
        self.workload = Workload(partitions=3, seed=seed)
        source = f"{name}.src"
        ensure_topics({"bootstrap.servers": bootstrap}, {source: 3})
        self.producer = SteadyProducer(bootstrap, source, self.workload).start()
        self.raw = delivered(bootstrap, name, source)  # exactly once unless the soak says
        self.raw["metrics"] = {"replication_check_interval": "1s"}
        if headers is not None:  # sink.extra_headers: on every record, whichever executor
            self.raw["sink"] = {**self.raw["sink"], "extra_headers": headers}
        if master is not None:
            self.raw["spark"] |= {
                "master": master,
                "conf": {"spark.executor.memory": "512m", "spark.cores.max": "2"},
            }
        self.config = write_config(tmp_path / "cf.yaml", self.raw)
        self.log = tmp_path / "runs.log"

    def written(self) -> int:
        return written_to(self.bootstrap, self.output, 3) or 0

    def rows_again(self, what: str, run: Supervised, timeout: float = 180) -> float:
        """Seconds until rows beyond those written now appear (restarting ``run`` if it exits)."""
        before = self.written()

        def moved_on() -> bool:
            run.check()
            return self.written() > before

        return until(what, moved_on, timeout)

    def mark(self) -> int:
        """Where the runs' log ends now (for :meth:`churn` since then)."""
        return self.log.stat().st_size if self.log.exists() else 0

    def churn(self, since: int) -> dict[str, int]:
        """Since ``since`` in the runs' log: batches, transactions aborted, tasks lost, fences.

        Exactly once, a source partition's transactional producer stays on the executor its
        tasks run on (``Placement.java``); a task that fails (a fence, a lost producer) is
        lost and runs again, and its transaction is aborted: neither should happen once the
        executors are settled.
        """
        with self.log.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
        return {
            "batches": len(re.findall(r"batch \d+: .* rows emitted", text)),
            "aborted": sum(
                int(n) for n in re.findall(r"transactions committed, (\d+) aborted", text)
            ),
            "lost tasks": text.count("Lost task"),
            "fenced": text.count("ProducerFenced"),
        }

    def settled(self, run: Supervised, what: str) -> dict[str, int]:
        """The churn over a settled run's next batches (20 s after it moved on, two at least).

        Counted in whole batches, not seconds: a run's first batch takes 25 - 35 s here (its
        rows commit early; the batch ends after its bad records' Python loop, whose Python
        workers start on the executors then), so rows can move on 20 s before its line.
        """
        since = self.mark()
        self.rows_again(what, run)
        time.sleep(20)

        def two_batches() -> bool:
            run.check()
            return self.churn(since)["batches"] >= 2

        until(f"two batches ended ({what})", two_batches)
        churn = self.churn(since)
        assert {k: v for k, v in churn.items() if k != "batches"} == {
            "aborted": 0,
            "lost tasks": 0,
            "fenced": 0,
        }, churn
        return churn

    def drain_and_validate(self, run: Supervised, spark: Any) -> Any:
        """Stop the producer and the run, drain in-process, validate; the validator's report."""
        self.producer.stop()
        run.stop()
        self.producer.finish()
        drain = {**self.raw, "spark": {"trigger": {"available_now": True}}}  # local, in-process
        run_to_end(load_config(write_config(self.tmp_path / "drain.yaml", drain)), spark)
        report = validate(
            self.workload,
            consume_all(self.bootstrap, self.output),  # read_committed
            consume_all(self.bootstrap, f"_highwater_dlq_{self.name}"),
            exactly_once=DELIVERY == "exactly_once",  # and then no (key, updated) twice
            diff=False,  # encoder: updated alone
        )
        assert not report.violations, dict(report.violations)
        assert report.distinct == len(self.workload.changes)
        return report


def under_replicated(changefeed_id: str, bootstrap: str, capsys: Any) -> tuple[str, int]:
    """The job status' warnings of replicas, and the run's under-replicated partitions gauge."""
    status = query(changefeed_id, bootstrap, capsys)
    warnings = "\n".join(
        line for line in status.splitlines() if line.startswith("WARNING") and "replica" in line
    )  # (not the source topic's retention, warned of from the start)
    url = next(line.split()[1] for line in status.splitlines() if line.startswith("metrics "))
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - the run's own
        exposition = response.read().decode()
    gauge = sum(
        int(float(sample.value))
        for family in text_string_to_metric_families(exposition)
        if family.name == "highwater_under_replicated_partitions"
        for sample in family.samples
    )
    return warnings, gauge


def reported(found: tuple[str, int], topic: str) -> bool:
    """Whether the status' warnings name ``topic``'s partition 0 and the gauge counts it."""
    warnings, gauge = found
    return f"topic {topic}: partitions [0" in warnings and gauge > 0


def test_leaders_killed_mid_stream_lose_nothing(
    cluster: KafkaCluster, spark: Any, capsys: Any, tmp_path: Path
) -> None:
    """Kill -9 the leader of an output partition, then of the checkpoints, over a steady feed.

    While a node is down the running changefeed's status and gauge name the under-replicated
    partitions; each node is restarted after a while (they clear); then the feed is drained
    and validated.
    """
    bootstrap = cluster.start().bootstrap_servers
    feed = SteadyFeed(bootstrap, "faults", 11, tmp_path)
    checkpoints = "_highwater_checkpoints"
    run = Supervised(feed.config, feed.log)
    until("the first rows", lambda: feed.written() > 0, timeout=240)
    recovered, noticed, cleared = {}, {}, {}
    for victim_topic in (feed.output, checkpoints):
        node = leader(bootstrap, victim_topic, 0)
        cluster.kill(node)
        recovered[victim_topic] = feed.rows_again(f"rows after node {node} died", run)
        # the gauge is set when the replicas are re-read, the job status once the batch going
        # on then ends: wait for both (each has to come within the timeout)
        noticed[victim_topic] = until(
            "the running changefeed's status and gauge to report the lost copies",
            lambda topic=victim_topic: reported(
                under_replicated(feed.name, bootstrap, capsys), topic
            ),
            timeout=60,
        )
        time.sleep(10)  # the feed goes on on two nodes
        cluster.start()
        until(
            f"node {node} back in sync",
            lambda: all(
                isr == 3
                for parts in replicas(bootstrap, [feed.output, checkpoints]).values()
                for _, isr in parts
            ),
        )
        cleared[victim_topic] = until(
            "the warnings and the gauge to clear",
            lambda: under_replicated(feed.name, bootstrap, capsys) == ("", 0),
            timeout=60,
        )
        run.check()
    report = feed.drain_and_validate(run, spark)
    print(
        f"cluster faults: {len(feed.workload.changes)} changes; rows again after the output "
        f"leader's kill in {recovered[feed.output]:.1f} s, after the checkpoint leader's in "
        f"{recovered[checkpoints]:.1f} s; under-replication reported "
        f"{', '.join(f'{t} {s:.1f} s' for t, s in noticed.items())} after the rows came back, "
        f"cleared {', '.join(f'{t} {s:.1f} s' for t, s in cleared.items())} after the node "
        f"was in sync; run exits {run.exits}; {report.summary()}"
    )


def test_a_spark_worker_killed_mid_stream_loses_nothing(
    cluster: KafkaCluster, workers: SparkCluster, spark: Any, tmp_path: Path
) -> None:
    """``highwater run`` on the standalone master; kill -9 a worker and its executor.

    Its tasks rerun on the other worker's executor; the worker is restarted; then drain and
    validate.
    """
    feed = SteadyFeed(
        cluster.start().bootstrap_servers, "workers", 13, tmp_path, workers.master_url
    )
    run = Supervised(feed.config, feed.log)
    until("the first rows", lambda: feed.written() > 0, timeout=300)
    workers.kill_worker(1)
    recovered = feed.rows_again("rows after worker 1 died", run)
    time.sleep(10)
    workers.start()  # worker 1 back; the application may take its core again
    time.sleep(10)
    run.check()
    settled = feed.settled(run, "rows with worker 1 back")
    report = feed.drain_and_validate(run, spark)
    ran_on = [
        i for i in (1, 2) if list((workers.directory / f"spark-worker-{i}" / "work").glob("app-*"))
    ]
    print(
        f"worker kill: {len(feed.workload.changes)} changes; rows again {recovered:.1f} s after "
        f"worker 1 died; run exits {run.exits}; executors on workers {ran_on}; settled after: "
        f"{settled}; {report.summary()}"
    )
    assert ran_on == [1, 2]  # the changefeed's tasks ran on the cluster's workers
    assert "Lost executor" in feed.log.read_text(errors="replace")  # the kill landed


def test_the_driver_killed_on_the_cluster_resumes_from_its_checkpoint(
    cluster: KafkaCluster, workers: SparkCluster, spark: Any, tmp_path: Path
) -> None:
    """``highwater run`` on the standalone master, SIGKILLed at two crash points mid-stream.

    Executors on the workers may outlive their driver for a moment; the next run resumes
    from the checkpoint; the validator's resolved check is what holds a late write.
    """
    workers.start()
    feed = SteadyFeed(cluster.start().bootstrap_servers, "driver", 17, tmp_path, workers.master_url)
    for crash in ("after_write:3", "before_marker:2"):
        run_killed_at(feed.config, feed.log, crash, timeout=300)
    run = Supervised(feed.config, feed.log)
    resumed = feed.rows_again("rows after the restart", run, timeout=300)
    time.sleep(10)
    settled = feed.settled(run, "rows of the resumed run")
    report = feed.drain_and_validate(run, spark)
    print(
        f"driver kills: {len(feed.workload.changes)} changes; 2 SIGKILLs; rows again "
        f"{resumed:.1f} s after the third run started; run exits {run.exits}; settled after: "
        f"{settled}; {report.summary()}"
    )


def test_an_executor_killed_mid_stream_loses_nothing_and_its_partitions_settle(
    cluster: KafkaCluster, workers: SparkCluster, spark: Any, tmp_path: Path
) -> None:
    """SIGKILL worker 1's executor under an exactly-once feed; the worker launches another.

    The lost executor's tasks rerun on the other one; its partitions' producers open there,
    then move back once the new executor is there (Spark's Kafka source prefers an executor
    per partition among those alive): after that, no aborted transaction, lost task or fence.
    """
    workers.start()
    headers = {"app": "örders ✓", "zone": "eu-west-1"}  # as the YAML is written: keys sorted
    feed = SteadyFeed(
        cluster.start().bootstrap_servers,
        "executor",
        23,
        tmp_path,
        workers.master_url,
        headers=headers,
    )
    run = Supervised(feed.config, feed.log)
    until("the first rows", lambda: feed.written() > 0, timeout=300)
    before = feed.settled(run, "rows before the kill")  # the control: settled from the start
    killed = workers.kill_executors(1)
    assert killed, "worker 1 ran no executor of the changefeed"
    recovered = feed.rows_again("rows after the executor died", run)
    until("a new executor on worker 1", lambda: bool(workers.executors(1)), timeout=120)
    time.sleep(10)
    settled = feed.settled(run, "rows with the new executor")
    report = feed.drain_and_validate(run, spark)
    print(
        f"executor kill: {len(feed.workload.changes)} changes; executor {killed} killed; rows "
        f"again {recovered:.1f} s after; churn before the kill {before}, settled after "
        f"{settled}; run exits {run.exits}; {report.summary()}"
    )
    assert "Lost executor" in feed.log.read_text(errors="replace")  # the kill landed
    # every record committed, by whichever executor (tasks rerun, producers reopened), has
    # the feed's headers after its own
    fixed = tuple((name, value.encode()) for name, value in headers.items())
    output = consume_all(feed.bootstrap, feed.output)
    assert output
    assert {m.headers for m in output} == {fixed}


def test_rows_over_the_room_are_claimed_on_the_cluster_exactly_once(
    cluster: KafkaCluster, workers: SparkCluster, tmp_path: Path
) -> None:
    """``oversized_rows: claim_check`` by ``highwater run`` on the standalone master.

    The executors on both workers write the claimed values (a folder they share here, as a
    cluster's would be shared storage) and their references in their transactions; the output
    is checked as in local mode: every record fits, the consumer library reads every row whole.
    """
    from tests.integration.test_oversized_rows import (  # noqa: PLC0415 - its workload
        MAX_REQUEST,
        claimed_whole,
        write_source,
    )

    workers.start()
    bootstrap = cluster.start().bootstrap_servers
    expected = write_source(bootstrap, "big.src")
    store = tmp_path / "claims"
    raw = {
        "changefeed_id": "big",
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [{"topic": "big.src", "table": "orders"}],
        "cursor": "0.0000000000",
        "sink": {"topic_prefix": "big.", "producer": {"max.request.size": str(MAX_REQUEST)}},
        "encoder": {"updated": True},
        "oversized_rows": "claim_check",
        "claim_store": f"file://{store}",
        "spark": {
            "master": workers.master_url,
            "conf": {"spark.executor.memory": "512m", "spark.cores.max": "2"},
            "trigger": {"available_now": True},
            "max_offsets_per_trigger": 25,
        },
    }

    def apps(worker: int) -> set[Path]:
        return set((workers.directory / f"spark-worker-{worker}" / "work").glob("app-*"))

    before = {i: apps(i) for i in (1, 2)}
    log = tmp_path / "run.log"
    assert run_to_exit(write_config(tmp_path / "cf.yaml", raw), log, timeout=600) == 0
    claimed_whole(bootstrap, "big", "big.orders", expected, store, "big-reader")
    ran_on = [i for i in (1, 2) if apps(i) - before[i]]  # this run's application, on each
    print(f"claim checks on the cluster: executors on workers {ran_on}")
    assert ran_on == [1, 2]


def test_workers_that_cannot_see_the_submitters_python_run_the_shipped_one(
    cluster: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Workers in a mount namespace where the submitter's virtualenv and interpreter are empty.

    ``highwater run`` packs the runtime environment and ships it (``spark.python_env:
    auto``); the changefeed's Python loop (``key_in_value`` is not the JVM walk's) runs on
    the workers in it. With ``python_env: none`` the same run cannot start its Python there.
    """
    hidden = (Path(sys.prefix), Path(sys.base_prefix))  # the virtualenv, what it links to
    assert hidden[0] != hidden[1]
    isolated = SparkCluster(tmp_path_factory.mktemp("isolated"), workers=2, hide=hidden)
    isolated.start()
    try:
        bootstrap = cluster.start().bootstrap_servers
        spec = GeneratorSpec(topic="shipped.src", rows=300, partitions=2, resolved_every=50)
        written = write(spec, {"bootstrap.servers": bootstrap}).total
        tmp = tmp_path_factory.mktemp("shipped")
        raw = {
            "changefeed_id": "shipped",
            "kafka": {"bootstrap_servers": bootstrap},
            "sources": [{"topic": "shipped.src", "table": "orders"}],
            "cursor": "0.0000000000",
            "sink": {"topic_prefix": "shipped."},
            "encoder": {"updated": True, "key_in_value": True},
            "spark": {
                "master": isolated.master_url,
                "trigger": {"available_now": True},
                "conf": {"spark.executor.memory": "512m", "spark.cores.max": "2"},
            },
        }
        assert run_to_exit(write_config(tmp / "cf.yaml", raw), tmp / "run.log", timeout=600) == 0
        rows = read_output(bootstrap, "shipped.orders").rows
        assert len(rows) == written
        assert all(json.loads(m.value)["key"] == json.loads(m.key) for m in rows if m.value)
        unpacked = list(isolated.directory.glob("spark-worker-*/work/app-*/*/environment/bin"))
        assert unpacked, "no executor unpacked the shipped environment"

        raw["changefeed_id"] = raw["sink"]["topic_prefix"] = "unshipped"  # type: ignore[index]
        raw["spark"]["python_env"] = "none"  # type: ignore[index]
        code = run_to_exit(write_config(tmp / "none.yaml", raw), tmp / "none.log", timeout=600)
        assert code != 0
        assert str(Path(sys.executable)) in (tmp / "none.log").read_text(errors="replace")
    finally:
        isolated.stop()


def driver_pids(config: Path) -> list[int]:
    """The driver of a ``highwater run``: its JVM (spark-submit) and its Python (job.py)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"pipeline/job.py") for a in argv) and str(config).encode() in argv:
            found.append(int(entry.name))
    return found


def test_a_driver_a_worker_and_a_leader_killed_at_once_lose_nothing(
    cluster: KafkaCluster, workers: SparkCluster, spark: Any, tmp_path: Path
) -> None:
    """Faults together: the driver, a worker and an output leader, kill -9 in one moment.

    A steady feed on the standalone master; worker 1 dies with its executor. The run is
    restarted at once, as the server's supervisor does, while the node and the worker are
    still down; they come back after 10 s; then drain and validate.
    """
    workers.start()
    bootstrap = cluster.start().bootstrap_servers
    feed = SteadyFeed(bootstrap, "together", 19, tmp_path, workers.master_url)
    run = Supervised(feed.config, feed.log)
    until("the first rows", lambda: feed.written() > 0, timeout=300)
    node = leader(bootstrap, feed.output, 0)
    driver = driver_pids(feed.config)
    assert len(driver) == 2, driver  # a lost driver machine: both go at once
    kill(driver)
    cluster.kill(node)
    workers.kill_worker(1)
    recovered = feed.rows_again("rows after the three kills", run, timeout=300)
    time.sleep(10)
    cluster.start()
    workers.start()
    until(
        f"node {node} back in sync",
        lambda: all(isr == 3 for _, isr in replicas(bootstrap, [feed.output])[feed.output]),
    )
    time.sleep(5)
    run.check()
    report = feed.drain_and_validate(run, spark)
    print(
        f"together: {len(feed.workload.changes)} changes; driver, worker 1 and node {node} "
        f"killed at once; rows again after {recovered:.1f} s; run exits {run.exits}; "
        f"{report.summary()}"
    )
    assert run.exits[0] != 0  # the driver's kill ended the first run
