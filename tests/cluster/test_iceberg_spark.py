"""``highwater apply --engine spark`` on a Spark standalone cluster of two workers.

``make cluster-test`` runs it (not ``make test``: a cluster beside the suite's Spark does not
fit two cores). The Iceberg apply tests' changefeed output (two typed workloads, JSON) is
applied by the Spark engine with ``--master spark://…``: its steps' Kafka reads, conversions
and MERGEs run on the workers' executors. The driver is SIGKILLed once mid-run and started
again to the final marker. What is asserted is what readers see: every table's commits once
per window, every complete cut equal to the sources at its R (pyiceberg), the last cut the
same read by Spark; and the master's record that the applier ran as an application with
executors on both workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from highwater_consumer.iceberg import cut, load
from pipeline.dev.spark_cluster import SparkCluster, master_state
from schemas.hlc import Hlc
from tests.integration.test_consumer_apply_iceberg import Applied, differences, output
from tests.integration.test_consumer_apply_iceberg_spark import (
    highwater_apply,
    namespace_for,
    spark_differences,
)
from tests.support.iceberg import complete_cuts, exactly_once_problems
from tests.support.iceberg_spark import read_at
from tests.support.process import ROOT

__all__ = ["output"]  # the changefeed's output, made once for the module
pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not os.environ.get("HIGHWATER_CLUSTER_TESTS"), reason="make cluster-test runs it"
    ),
]


def test_the_spark_engine_applies_on_two_workers_exactly_once_across_a_driver_kill(
    kafka_bootstrap: str,
    output: Applied,
    iceberg_rest: dict[str, str],
    workers: SparkCluster,
    tmp_path: Path,
) -> None:
    workloads, namespace = output.workloads, namespace_for("cluster")
    log = tmp_path / "apply.log"
    on_cluster = ["--master", workers.master_url, "--python-env", "none"]
    command = highwater_apply(
        kafka_bootstrap, output, iceberg_rest, namespace, "--group", namespace
    )
    command = [
        *command[: command.index("--master")],
        *on_cluster,
        *command[command.index("--master") + 2 :],
    ]

    with log.open("ab") as out:
        running = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    catalog = load(iceberg_rest)
    name, webui = f"highwater-apply-{output.changefeed}", workers.layout()["master"][1]
    cores = 0  # what the master granted the applier while it ran
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and running.poll() is None:  # killed once it applied
        time.sleep(2)
        active = [a for a in master_state(webui)["activeapps"] if a["name"] == name]
        cores = max([cores, *(int(a["cores"]) for a in active)])
        if len(complete_cuts_in_or_none(catalog, namespace, output.changefeed)) >= 2:
            break
    assert running.poll() is None, log.read_text(errors="replace")[-3000:]
    running.send_signal(signal.SIGKILL)
    running.wait()
    final = Hlc(max(c.wall for w in workloads.values() for c in w.changes) + 1_000)
    with log.open("ab") as out:
        done = subprocess.run(
            [*command, "--until", str(final), "--idle", "120"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=1800,
            check=False,
        )
    assert done.returncode == 0, log.read_text(errors="replace")[-3000:]

    assert exactly_once_problems(catalog, namespace, output.changefeed) == []
    cuts = complete_cuts(catalog, namespace, output.changefeed)
    assert cuts[-1] >= final
    found = [cut(catalog, namespace, output.changefeed, r) for r in cuts]
    assert [d for c in found for d in differences(catalog, c, workloads)] == []
    last = found[-1]
    read = read_at(iceberg_rest, namespace, sorted(last.snapshots.items()))
    assert spark_differences(read, last, workloads) == []

    assert cores == 2, "one core on each worker"
    finished = [a for a in master_state(webui)["completedapps"] if a["name"] == name]
    assert len(finished) == 2, finished  # killed, then to the end
    print(
        f"iceberg apply --engine spark on {workers.master_url} (2 workers): {len(cuts)} "
        f"complete cuts, each equal to the sources; the driver killed once mid-run"
    )


def complete_cuts_in_or_none(catalog: object, namespace: str, changefeed: str) -> list[Hlc]:
    """:func:`complete_cuts`, or none while the tables are not made yet."""
    try:
        return complete_cuts(catalog, namespace, changefeed)
    except Exception:
        return []
