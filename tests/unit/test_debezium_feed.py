"""The benchmark's Debezium feed reads as a connector's events do (the bench measures them)."""

from __future__ import annotations

from collections import defaultdict

import pytest

from pipeline.core.sources.debezium import DebeziumAdapter
from pipeline.dev.debezium_feed import DebeziumFeed

pytestmark = pytest.mark.unit


def test_the_feeds_events_decode_with_exact_values_rising_positions_and_transactions() -> None:
    events = list(DebeziumFeed(partitions=4, keys=300).events(2_000))
    assert len(events) == 2_000
    sizes = sorted(len(k) + len(v) for _, k, v in events)
    assert 3_000 < sizes[len(sizes) // 2] < 6_000  # a connector's events with their schemas
    adapter, latest = DebeziumAdapter(), defaultdict(tuple)
    seen: dict[tuple[str, ...], int] = {}
    for partition, key, value in events:
        change = adapter.decode(key, value)
        assert change is not None
        assert change.tx is not None
        assert change.position is not None
        assert change.position > latest[partition]  # no re-send: every event is news
        latest[partition] = change.position
        name = tuple(map(str, change.key))
        assert change.op == ("update" if name in seen else "insert")
        assert change.after is not None
        assert str(change.after["amount"]).count(".") == 1
        seen[name] = seen.get(name, 0) + 1
    assert max(seen.values()) > 1  # keys change more than once
