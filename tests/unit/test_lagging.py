"""``lagging_threshold``: the source partitions whose resolved time lags now by more.

What an operator reads: the job status's lines (which partition, how far behind, whether it
holds the high-water back) and the log line once when a partition starts lagging.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from pipeline.core.ledger import Frontier, SourcePartition
from pipeline.core.operators.lagging import Lagging, Stuck
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


def test_a_partition_that_resolved_nothing_yet_counts_from_the_run_start() -> None:
    """A new changefeed's partitions before their first resolved time are not 56 years behind."""
    lagging = Lagging(timedelta(minutes=3), started_nanos=NOW - 10 * SECOND)
    fresh = Frontier([P0, P1, P2])
    fresh.resolve(P0, Hlc(NOW - 5 * SECOND))
    assert not lagging.look(fresh, NOW)  # 10 s into the run: nothing lags
    assert lagging.warnings() == []

    fresh.resolve(P0, Hlc(NOW + 195 * SECOND))
    assert lagging.look(fresh, NOW + 200 * SECOND)  # 3m30s in, two never resolved
    assert lagging.warnings() == [
        f"source partition orders/{p} is lagging: nothing resolved in the 3m30s since the run "
        f"started (lagging_threshold 3m0s); it holds the high-water back"
        for p in (1, 2)
    ]
    # the control: counted from 1970, as before, they lag at once
    assert Lagging(timedelta(minutes=3), started_nanos=0).look(fresh, NOW)


def test_the_run_start_is_when_it_is_attached_not_when_an_admission_began_to_wait() -> None:
    """A changefeed created paused and resumed an hour later does not lag from creation."""
    from types import SimpleNamespace  # noqa: PLC0415

    from pipeline.core.operators.observers import Observers  # noqa: PLC0415

    observers = Observers("cf", timedelta(minutes=3))
    observers._lagging.start(0)  # constructed long ago: its admission waited while paused
    fresh = Frontier([P0, P1, P2])
    assert observers._lagging.look(fresh)  # the control: counted from then, all lag at once
    observers.attach(SimpleNamespace(), SimpleNamespace(found=[]))  # type: ignore[arg-type]
    observers.lags(fresh)  # the run starts now: nothing lags yet
    assert observers._lagging.warnings() == []
    assert observers._status.lagging == []


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


def test_stuck_is_a_standing_high_water_while_records_come_said_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Stuck: the high-water stood past the threshold *and* the sources sent records meanwhile.

    A quiet source (no records) is not stuck however long it stands; the partition holding
    the high-water back is named; a high-water that moves clears it, said once each way.
    """
    stuck = Stuck(timedelta(minutes=10))
    caplog.set_level(logging.INFO, "pipeline.core.operators.lagging")
    at = frontier(700, 5, 5)  # orders/0 holds the high-water back
    t0 = NOW / SECOND
    assert not stuck.look(at, t0)  # first seen: standing counts from here
    assert not stuck.look(at, t0 + 3600)  # an hour, but nothing came: a quiet source
    assert stuck.warning is None

    stuck.read(1200)
    assert stuck.look(at, t0 + 3601)
    assert stuck.warning == (
        f"stuck: the high-water {at.high_water()} has not moved for 1h0m while 1200 records "
        "came from the sources (stuck_threshold 10m0s); held back by source partition orders/0"
    )
    stuck.read(5)
    assert not stuck.look(at, t0 + 3700)  # still stuck: no news (the text counts on)
    assert stuck.warning is not None
    assert "1205 records" in stuck.warning
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert "orders/0" in warned[0]

    at.resolve(P0, Hlc(NOW))  # it moves: cleared, said once
    assert stuck.look(at, t0 + 3701)
    assert stuck.warning is None
    assert not stuck.look(at, t0 + 3702)
    assert sum("not stuck any more" in r.getMessage() for r in caplog.records) == 1


def test_stuck_needs_the_threshold_passed_and_zero_is_off() -> None:
    at = frontier(700, 5, 5)
    t0 = NOW / SECOND
    within = Stuck(timedelta(minutes=10))
    within.look(at, t0)
    within.read(10)
    assert not within.look(at, t0 + 599)  # records came, but not for long enough
    off = Stuck(timedelta(0))
    off.read(10)
    assert not off.look(at, t0)
    assert not off.look(at, t0 + 10**6)
    assert off.warning is None


def test_the_job_status_carries_offsets_what_markers_wait_for_and_rows() -> None:
    """Set only where known: a partition's next offset, its awaited transaction, run rows."""
    import json  # noqa: PLC0415

    from pipeline.core.operators import JobStatus  # noqa: PLC0415

    partitions = [
        {"topic": "dbz.orders", "partition": 0, "resolved": str(Hlc(NOW)), "offset": 42},
        {
            "topic": "dbz.orders",
            "partition": 1,
            "resolved": str(Hlc(NOW)),
            "offset": 7,
            "waits_for": "transaction 571:2 of 'dbz.transaction', waited for 12 s",
        },
        {"topic": "other", "partition": 0, "resolved": str(Hlc(NOW))},
    ]
    status = JobStatus("cf", "running", partitions=partitions, rows=1234)
    written = json.loads(status.encode())
    assert written["partitions"] == partitions  # no null for what is not known
    assert written["rows"] == 1234
    assert JobStatus.decode(status.encode()) == status


def test_a_published_status_names_the_transaction_each_partition_waits_for() -> None:
    """The run's wiring: what the resolver waits for reaches the job status's partitions."""
    import json  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415

    from pipeline.core.operators.observers import Observers  # noqa: PLC0415
    from pipeline.core.operators.status import StatusPublisher  # noqa: PLC0415

    written: dict[str, bytes] = {}
    jobs = SimpleNamespace(put=written.__setitem__)
    waits = "transaction 571 (3 of 4 events read) of 'pg.transaction', waiting 12 s"
    resolver = SimpleNamespace(
        stuck_topics=lambda: ({}, []), warnings=list, waiting_for=lambda: {"orders": waits}
    )
    observers = Observers("cf", timedelta(minutes=3), timedelta(minutes=10))
    observers._status = StatusPublisher(jobs, "cf", warnings=[])  # type: ignore[arg-type]
    observers.resolver(resolver)  # type: ignore[arg-type]
    at = frontier(5, 5, 5)
    at.forward(P0, resolved=None, next_offset=42)
    observers.publish(SimpleNamespace(frontier=at, statement_time=None), None, "running")  # type: ignore[arg-type]
    shown = json.loads(written["cf"])["partitions"]
    assert [p.get("waits_for") for p in shown] == [waits] * 3
    assert [p.get("offset") for p in shown] == [42, None, None]
