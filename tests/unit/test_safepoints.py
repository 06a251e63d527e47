"""Safepoint records and a changefeed's own safepoint, over an in-memory registry."""

from typing import Any

import pytest

from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.operators.status import JobStatus
from pipeline.core.progress.safepoints import ChangefeedSafepoint, Registry, Safepoint
from schemas.errors import SafepointError
from schemas.hlc import ZERO, Hlc

NOW = 1_700_000_000.0


class MemoryRegistry:
    """The parts of SafepointRegistry a ChangefeedSafepoint uses, in memory."""

    cluster = "c"

    def __init__(self, gc: Hlc = ZERO) -> None:
        self.now = NOW
        self.gc = gc
        self.safepoints: dict[str, Safepoint] = {}
        self.holds = 0

    def clock(self) -> float:
        return self.now

    def changefeed_service_id(self, changefeed_id: str) -> str:
        return f"highwater-c-changefeed-{changefeed_id}"

    def read(self) -> Registry:
        return Registry(dict(self.safepoints), self.gc)

    def hold(self, changefeed_id: str, ts: Hlc, ttl: float, offsets: Any = None) -> Safepoint:
        self.holds += 1
        sp = Safepoint(
            self.changefeed_service_id(changefeed_id),
            ts,
            ttl,
            self.now,
            "changefeed:x",
            dict(offsets or {}),
        )
        self.safepoints[sp.service_id] = sp
        return sp

    def release(self, changefeed_id: str) -> None:
        self.safepoints.pop(self.changefeed_service_id(changefeed_id), None)


def gone(gc: Hlc) -> str:
    return f"changes up to {gc} on src partitions 0-1 may be gone"


def test_a_record_round_trips_with_its_expiry_and_offsets() -> None:
    sp = Safepoint(
        "highwater-c-changefeed-x",
        Hlc(5, 1),
        60.0,
        NOW,
        "changefeed:x",
        {SourcePartition("src", 1): 42},
    )
    record = sp.to_json()
    assert record["expires_at"] == "2023-11-14T22:14:20.000+00:00"
    assert record["offsets"] == {"src": {"1": 42}}
    assert Safepoint.from_json(record) == sp
    assert not sp.expired(NOW + 59.9)
    assert sp.expired(NOW + 60)


def test_start_holds_then_refreshes_at_most_once_a_minute() -> None:
    registry = MemoryRegistry()
    own = ChangefeedSafepoint(registry, "x", ttl=3600)  # type: ignore[arg-type]
    offsets = {SourcePartition("src", 0): 7}
    own.start(Hlc(10), offsets, gone)
    assert registry.safepoints["highwater-c-changefeed-x"].offsets == offsets
    registry.now += 30
    own.refresh(Hlc(20), offsets)
    assert registry.safepoints["highwater-c-changefeed-x"].safepoint == Hlc(10)
    registry.now += 31
    own.refresh(Hlc(20), offsets)
    assert registry.safepoints["highwater-c-changefeed-x"].safepoint == Hlc(20)
    own.release()
    assert not registry.safepoints


def test_start_below_the_gc_safe_point_is_refused_and_says_when_the_ttl_ran_out() -> None:
    registry = MemoryRegistry(gc=Hlc(50))
    registry.hold("x", Hlc(10), 60)  # an earlier run's safepoint, since expired
    registry.now += 120
    own = ChangefeedSafepoint(registry, "x", ttl=60)  # type: ignore[arg-type]
    with pytest.raises(SafepointError) as refused:
        own.start(Hlc(10), {}, gone)
    message = str(refused.value)
    assert message.startswith("GC TTL exceeded: changefeed 'x' cannot start at")
    assert "its safepoint expired at 2023-11-14T22:14:20.000+00:00" in message
    assert "changes up to 50.0000000000 on src partitions 0-1 may be gone" in message


def test_an_initial_scan_holds_at_zero_without_the_check() -> None:
    registry = MemoryRegistry(gc=Hlc(50))
    own = ChangefeedSafepoint(registry, "x", ttl=60)  # type: ignore[arg-type]
    own.start(Hlc(0), {}, gone, check=False)
    assert registry.safepoints["highwater-c-changefeed-x"].safepoint == Hlc(0)


def test_job_status_round_trip() -> None:
    status = JobStatus(
        "x",
        "scanning",
        Hlc(5),
        Hlc(4),
        None,
        {
            "chunks_done": 1,
            "chunks_total": 3,
            "records_done": 10,
            "records_total": 30,
            "rows": 9,
            "rows_per_second": 4.5,
            "eta_seconds": None,
        },
        None,
        Safepoint("s", Hlc(4), 60.0, 1_700_000_000.0, "changefeed:x").to_json(),
        ["topic src has retention.ms=1"],
        "2026-11-21T00:00:00+00:00",
    )
    assert JobStatus.decode(status.encode()) == status
