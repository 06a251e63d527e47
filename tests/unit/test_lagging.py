"""``lagging_threshold``: the source partitions whose resolved time lags now by more.

What an operator reads: the job status's lines (which partition, how far behind, whether it
holds the high-water back) and the log line once when a partition starts lagging.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from pipeline.core.ledger import Frontier, SourcePartition
from pipeline.core.operators.lagging import Lagging
from schemas.hlc import Hlc

SECOND = 10**9
NOW = 1_800_000_000 * SECOND
P0, P1, P2 = (SourcePartition("orders", p) for p in range(3))


def frontier(*behind: int) -> Frontier:
    """Each partition resolved ``behind`` seconds before NOW."""
    found = Frontier([P0, P1, P2])
    for sp, seconds in zip((P0, P1, P2), behind, strict=True):
        found.resolve(sp, Hlc(NOW - seconds * SECOND))
    return found


def test_the_partition_past_the_threshold_is_named_once_and_cleared_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lagging = Lagging(timedelta(minutes=3))
    caplog.set_level(logging.INFO, "pipeline.core.operators.lagging")
    assert not lagging.look(frontier(5, 60, 2), NOW)  # within the threshold: nothing
    assert lagging.warnings() == []

    assert lagging.look(frontier(5, 252, 2), NOW)  # 4m12s behind, the lowest
    said = lagging.warnings()
    assert said == [
        f"source partition orders/1 is lagging: resolved {Hlc(NOW - 252 * SECOND)}, 4m12s "
        f"behind now (lagging_threshold 3m0s); it holds the high-water back"
    ]
    assert not lagging.look(frontier(5, 300, 2), NOW)  # still lagging: no news, no new line
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == said

    assert lagging.look(frontier(3700, 300, 2), NOW)  # another, further behind, now holds it
    assert [w.split(":")[0] for w in lagging.warnings()] == [
        "source partition orders/0 is lagging",
        "source partition orders/1 is lagging",
    ]
    assert lagging.warnings()[0].endswith(
        "1h1m behind now (lagging_threshold 3m0s); it holds the high-water back"
    )
    assert "holds" not in lagging.warnings()[1]

    assert lagging.look(frontier(1, 1, 1), NOW)  # caught up: cleared, said once each
    assert lagging.warnings() == []
    assert sum("caught up" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("threshold", [timedelta(0), timedelta(minutes=-1)])
def test_a_threshold_of_zero_is_off(threshold: timedelta) -> None:
    lagging = Lagging(threshold)
    assert not lagging.look(frontier(10**6, 10**6, 10**6), NOW)
    assert lagging.warnings() == []


def test_the_option_is_a_duration_named_when_wrong() -> None:
    from pipeline.config import parse_config  # noqa: PLC0415
    from schemas.errors import ConfigError  # noqa: PLC0415

    base = {
        "changefeed_id": "cf",
        "kafka": {"bootstrap_servers": "localhost:9092"},
        "sources": [{"topic": "src", "table": "orders"}],
    }
    assert parse_config(base).lagging_threshold == timedelta(minutes=3)
    assert parse_config({**base, "lagging_threshold": "30s"}).lagging_threshold == timedelta(
        seconds=30
    )
    with pytest.raises(ConfigError, match="lagging_threshold"):
        parse_config({**base, "lagging_threshold": "soon"})


def test_the_job_status_carries_each_partitions_resolved_time() -> None:
    """What the console's changefeed page shows per partition; old records have none."""
    import json  # noqa: PLC0415

    from pipeline.core.operators import JobStatus  # noqa: PLC0415

    partitions = [
        {"topic": "orders", "partition": 0, "resolved": str(Hlc(NOW - 5 * SECOND))},
        {"topic": "orders", "partition": 1, "resolved": str(Hlc(NOW - 300 * SECOND, 2))},
    ]
    status = JobStatus(
        "cf", "running", high_water=Hlc(NOW - 300 * SECOND, 2), partitions=partitions
    )
    assert json.loads(status.encode())["partitions"] == partitions
    assert JobStatus.decode(status.encode()) == status
    older = JobStatus.decode(json.dumps({"changefeed_id": "o", "state": "running"}).encode())
    assert older.partitions is None
    assert "partitions" not in json.loads(JobStatus("o", "running").encode())  # only when set


def test_the_job_status_names_at_most_a_thousand_partitions_those_furthest_behind() -> None:
    """A changefeed of 3,000 partitions: its status stays small, and shows the laggards."""
    from types import SimpleNamespace  # noqa: PLC0415

    from pipeline.core.operators import status  # noqa: PLC0415

    partitions = [SourcePartition("big", p) for p in range(3000)]
    found = Frontier(partitions)
    for sp in partitions:
        found.resolve(sp, Hlc(NOW - (sp.partition % 7 == 0) * 3600 * SECOND + sp.partition))
    shown = status._partitions(SimpleNamespace(frontier=found))  # type: ignore[arg-type]
    assert len(shown) == status.SHOWN_PARTITIONS
    named = [p["partition"] for p in shown]
    assert named == sorted(named)
    behind = [p for p in range(3000) if p % 7 == 0]  # an hour behind: every one is shown
    others = [p for p in range(3000) if p % 7][: status.SHOWN_PARTITIONS - len(behind)]
    assert named == sorted(behind + others)  # then the next furthest behind
