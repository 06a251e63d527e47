"""The server's scrape: every live run's series merged into one valid exposition."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.control.changefeeds import Changefeed
from pipeline.control.metrics import aggregate
from pipeline.core.batch.contract import BatchResult
from pipeline.core.operators.lifecycle import ChangefeedSpec
from pipeline.core.operators.metrics import ChangefeedMetrics
from pipeline.core.operators.status import JobStatus

pytestmark = pytest.mark.unit


def run_text(changefeed_id: str, rows: int) -> str:
    metrics = ChangefeedMetrics(changefeed_id)
    metrics.batch(BatchResult([], emitted=rows, duplicates=1, bad=2, bytes=rows * 10), 0.5)
    metrics.state.state("running")
    return generate_latest(metrics.registry).decode()


def feed(changefeed_id: str, state: str, url: str | None) -> Changefeed:
    status = JobStatus(changefeed_id, state, metrics_url=url)
    return Changefeed(changefeed_id, ChangefeedSpec(changefeed_id, "running"), status)


def test_live_runs_merge_family_by_family_and_the_dead_are_down() -> None:
    texts = {
        "http://a/metrics": run_text("a", 5),
        "http://b/metrics": run_text("b", 7),
        "http://stale/metrics": run_text("someone-else", 99),  # a port reused by another run
    }

    def read(url: str) -> str:
        if url not in texts:
            raise ConnectionRefusedError(url)
        return texts[url]

    changefeeds = [
        feed("a", "running", "http://a/metrics"),
        feed("b", "scanning", "http://b/metrics"),
        feed("c", "running", "http://gone/metrics"),
        feed("stale", "running", "http://stale/metrics"),
        feed("d", "paused", "http://a/metrics"),  # not live: not read
        Changefeed("e", ChangefeedSpec("e", "running"), None),  # pending
    ]
    text = aggregate(changefeeds, read).decode()
    types = [line for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types))  # one TYPE line a family
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    rows = {
        s.labels["changefeed"]: s.value for s in samples if s.name == "highwater_rows_emitted_total"
    }
    assert rows == {"a": 5, "b": 7}
    up = {s.labels["changefeed"]: s.value for s in samples if s.name == "highwater_changefeed_up"}
    assert up == {"a": 1, "b": 1, "c": 0, "stale": 1}
    states = {
        (s.labels["desired"], s.labels["state"]): s.value
        for s in samples
        if s.name == "highwater_changefeeds"
    }
    assert states == {
        ("running", "running"): 3,
        ("running", "scanning"): 1,
        ("running", "paused"): 1,
        ("running", "pending"): 1,
    }


def test_the_dashboard_asks_only_for_series_a_run_serves() -> None:
    dashboard = json.loads(
        (Path(__file__).parents[2] / "docker" / "grafana" / "highwater.json").read_text()
    )
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"highwater_[a-z_]+", target["expr"])
    }
    served = set(re.findall(r"^(highwater_[a-z_]+)", run_text("x", 1), re.MULTILINE))
    metrics = ChangefeedMetrics("x")  # the labelled families show once they have a child
    metrics.scan_chunks.labels("x", "done").set(0)
    metrics.partition_lag.labels("x", "t", "0").set(0)
    metrics.under_replicated.labels("x", "t").set(0)
    served |= set(
        re.findall(
            r"^(highwater_[a-z_]+)", generate_latest(metrics.registry).decode(), re.MULTILINE
        )
    )
    assert asked, "no series in the dashboard"
    assert asked <= served, asked - served
