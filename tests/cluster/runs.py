"""What the cluster tests that kill a changefeed's driver share.

The changefeed's Spark settings (the standalone master, an executor on each worker), its run
killed at a crash point and then run to its end, and the checks on the log of that last run:
no task lost, no transaction aborted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pipeline.dev.spark_cluster import SparkCluster
from tests.support.process import run as run_to_exit
from tests.support.process import run_killed_at, write_config


def on_workers(workers: SparkCluster, max_offsets: int = 600) -> dict[str, Any]:
    """A changefeed's ``spark`` section: available now, on ``workers``' two one-core workers."""
    return {
        "master": workers.master_url,
        "conf": {"spark.executor.memory": "512m", "spark.cores.max": "2"},
        "trigger": {"available_now": True},
        "max_offsets_per_trigger": max_offsets,
    }


def run_after_kill(tmp_path: Path, raw: dict[str, Any], kill: str | None) -> str:
    """``highwater run`` of ``raw``, SIGKILLed at ``kill`` first (if any), then to its end.

    Returns the log of the run to the end.
    """
    log = tmp_path / "run.log"
    config = write_config(tmp_path / "cf.yaml", raw)
    if kill is not None:
        run_killed_at(config, log, kill, timeout=600)
    restarted = log.stat().st_size if log.exists() else 0
    assert run_to_exit(config, log, timeout=600) == 0
    return log.read_bytes()[restarted:].decode(errors="replace")


def assert_no_churn(text: str, batches: int) -> None:
    """A run's log: at least ``batches`` batches, no task lost, no transaction aborted."""
    assert text.count("Lost task") == 0
    found = re.findall(r"batch \d+: .* (\d+) transactions committed, (\d+) aborted", text)
    assert len(found) >= batches, text[-2000:]
    assert sum(int(aborted) for _, aborted in found) == 0
