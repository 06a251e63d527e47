import json

import pytest

from pipeline.core.ledger.checkpoint import Checkpoint, decode
from pipeline.core.ledger.frontier import Frontier, SourcePartition
from schemas.errors import CheckpointError
from schemas.hlc import Hlc


def frontier_with(
    times: dict[SourcePartition, int], offsets: dict[SourcePartition, int]
) -> Frontier:
    frontier = Frontier(times)
    for sp, ts in times.items():
        frontier.forward(sp, resolved=Hlc(ts), next_offset=offsets[sp])
    return frontier


def test_full_record_round_trips_and_is_readable_json() -> None:
    parts = [SourcePartition("src", p) for p in range(4)]
    frontier = frontier_with(
        dict(zip(parts, [10, 30, 10, 20], strict=True)), dict(zip(parts, [5, 6, 7, 8], strict=True))
    )
    cp = Checkpoint.of(
        "cf", frontier, last_marker=Hlc(9), config_fingerprint="abc", topics=("src", "other")
    )
    data = cp.encode(1 << 20)
    record = json.loads(data)
    assert record["high_water"] == str(Hlc(10))
    assert record["partitions"]["src"]["offsets"] == [5, 6, 7, 8]
    assert record["partitions"]["src"]["resolved"] == [None, str(Hlc(30)), None, str(Hlc(20))]
    assert record["fallback"] is None
    back = decode(data)
    assert back.progress(parts) == frontier.progress()
    assert back.last_marker == Hlc(9)
    assert back.config_fingerprint == "abc"
    assert back.topics == ("src", "other")  # kept at every level: added tables are known
    assert decode(cp.encode(len(data) - 1)).topics == ("src", "other")


def test_budget_ladder_only_ever_lowers_resolved_times() -> None:
    parts = [SourcePartition("src", p) for p in range(300)]
    times = {sp: 1_000 + (sp.partition % 7) * 100 for sp in parts}
    frontier = frontier_with(times, {sp: 10_000 + sp.partition for sp in parts})
    cp = Checkpoint.of("cf", frontier)
    sizes = {}
    for budget in (1 << 20, 4_000, 2_200, 600):
        data = cp.encode(budget)
        assert len(data) <= budget
        record = json.loads(data)
        sizes[budget] = record["fallback"]
        resumed = decode(data).progress(parts)
        for sp in parts:
            real = frontier[sp]
            assert resumed[sp].resolved <= real.resolved  # never skips a row
            assert resumed[sp].resolved >= frontier.high_water()
            assert resumed[sp].offset in (real.offset, None)  # None: from the start
    assert sizes == {1 << 20: None, 4_000: "leading", 2_200: "offsets", 600: "high_water"}


def test_leading_partitions_are_merged_into_ranges() -> None:
    parts = [SourcePartition("src", p) for p in range(8)]
    times = dict(zip(parts, [5, 9, 9, 9, 5, 8, 5, 9], strict=True))
    cp = Checkpoint.of("cf", frontier_with(times, dict.fromkeys(parts, 1)))
    full = len(cp.encode(1 << 20))
    record = json.loads(cp.encode(full - 1))
    assert record["leading"] == {"resolved": str(Hlc(8)), "partitions": {"src": "1-3,5,7"}}


def test_too_small_a_budget_is_an_error() -> None:
    cp = Checkpoint.of("cf", Frontier([SourcePartition("src", 0)]))
    with pytest.raises(CheckpointError, match="frontier_checkpoint_max_bytes"):
        cp.encode(50)


@pytest.mark.parametrize("data", [b"{", b'{"format_version": 9}', b'{"format_version": 1}'])
def test_unreadable_records_are_checkpoint_errors(data: bytes) -> None:
    with pytest.raises(CheckpointError):
        decode(data)


def test_the_transaction_logs_travel_in_the_record_and_give_up_what_is_in_flight_last() -> None:
    parts = [SourcePartition("pg.public.orders", p) for p in range(2)]
    frontier = frontier_with(dict.fromkeys(parts, 10), dict.fromkeys(parts, 5))
    state = {
        "offset": 7,
        "resolved": str(Hlc(10)),
        "seen": {"733": ["1-2", str(Hlc(11, 1)), str(Hlc(11, 2))]},
        "horizon": None,
        "started": True,
    }
    cp = Checkpoint.of("cf", frontier, transactions={"pg.transaction": state})
    data = cp.encode(1 << 20)
    assert decode(data).transactions == {"pg.transaction": state}
    # without offsets the data topics are read again from their start: counting starts over
    last = decode(Checkpoint(**{**cp.__dict__, "level": "high_water"}).encode(1 << 20))
    assert last.offsets == {}
    assert last.transactions == {"pg.transaction": {**state, "seen": {}}}


def test_source_positions_travel_with_the_offsets_at_every_level_that_keeps_them() -> None:
    """A resume still knows what a restarted upstream sends again (Debezium's positions)."""
    parts = [SourcePartition("pg.orders", p) for p in range(3)]
    frontier = frontier_with(dict.fromkeys(parts, 10), dict(zip(parts, [4, 5, 6], strict=True)))
    frontier.forward(parts[0], resolved=None, next_offset=4, position=(24_023_800, 24_023_984))
    frontier.forward(parts[2], resolved=None, next_offset=6, position=(2**63, 7))
    frontier.forward(parts[0], resolved=None, next_offset=4, position=(1, 1))  # never lower
    cp = Checkpoint.of("cf", frontier)
    full = cp.encode(1 << 20)
    assert json.loads(full)["partitions"]["pg.orders"]["positions"] == [
        [24_023_800, 24_023_984],
        None,
        [2**63, 7],
    ]
    for level in ("full", "leading", "offsets"):
        back = decode(Checkpoint(**{**cp.__dict__, "level": level}).encode(1 << 20))
        assert back.progress(parts) == frontier.progress(), level
    # without offsets every partition is read from its start: the positions are found again
    bare = decode(Checkpoint(**{**cp.__dict__, "level": "high_water"}).encode(1 << 20))
    assert all(p.position is None for p in bare.progress(parts).values())
