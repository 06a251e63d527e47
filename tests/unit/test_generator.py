import json
from collections import defaultdict

import pytest

from pipeline.dev.generator import (
    Change,
    GeneratorSpec,
    Marker,
    OrdersGenerator,
    encode_change,
    encode_key,
)
from schemas.hlc import HlcClock
from sinks.partitioning import default_partition


def events(**spec: object) -> list[Change | Marker]:
    ticks = iter(range(1_000_000, 10**9))
    clock = HlcClock(lambda: next(ticks))
    return list(OrdersGenerator(GeneratorSpec(topic="t", **spec), clock).events())  # type: ignore[arg-type]


def test_mix_of_operations_and_count() -> None:
    changes = [e for e in events(rows=2000, seed=3) if isinstance(e, Change)]
    ops = defaultdict(int)
    for c in changes:
        ops[c.op] += 1
    assert len(changes) == 2000
    assert ops["insert"] > ops["update"] > ops["delete"] > 0


def test_per_key_versions_chain_and_stay_on_one_partition() -> None:
    latest: dict[tuple[str, int], Change] = {}
    for event in events(rows=3000, partitions=5, seed=1):
        if not isinstance(event, Change):
            continue
        assert event.partition == default_partition(encode_key(event.key), 5)
        previous = latest.get(event.key)
        if previous is None:
            assert event.op == "insert"
        else:
            assert previous.updated < event.updated
            assert event.before == previous.after  # the diff is the previous version
        latest[event.key] = event


def test_a_marker_covers_every_row_before_it_and_none_after() -> None:
    stream = events(rows=1000, partitions=3, resolved_every=100)
    seen_max = dict.fromkeys(range(3))
    resolved = dict.fromkeys(range(3))
    for event in stream:
        if isinstance(event, Marker):
            top = seen_max[event.partition]
            assert top is None or top <= event.resolved
            resolved[event.partition] = event.resolved
        else:
            floor = resolved[event.partition]
            assert floor is None or event.updated > floor
            top = seen_max[event.partition]
            seen_max[event.partition] = event.updated if top is None else max(top, event.updated)
    assert sum(isinstance(e, Marker) for e in stream) == 10 * 3


def test_stalled_partition_gets_no_markers_after_the_stall() -> None:
    stream = events(rows=1000, partitions=3, resolved_every=100, stall_partition=1, stall_after=300)
    markers = [e for e in stream if isinstance(e, Marker)]
    assert sum(m.partition == 1 for m in markers) == 3
    assert sum(m.partition == 0 for m in markers) == 10


def test_wire_format_is_the_native_envelope() -> None:
    change = next(e for e in events(rows=5) if isinstance(e, Change))
    assert json.loads(encode_key(change.key)) == list(change.key)
    value = json.loads(encode_change(change))
    assert value == {"after": change.after, "before": None, "updated": str(change.updated)}
    assert "before" not in json.loads(encode_change(change, diff=False))


def test_spec_is_checked() -> None:
    with pytest.raises(ValueError, match="update_ratio"):
        GeneratorSpec(topic="t", update_ratio=0.8, delete_ratio=0.5)
    with pytest.raises(ValueError, match="stall_partition"):
        GeneratorSpec(topic="t", partitions=2, stall_partition=2)
