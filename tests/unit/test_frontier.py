from hypothesis import given
from hypothesis import strategies as st

from pipeline.core.ledger.frontier import Frontier, Progress, SourcePartition
from schemas.hlc import ZERO, Hlc

PARTS = [SourcePartition("a", 0), SourcePartition("a", 1), SourcePartition("b", 0)]

updates = st.lists(
    st.tuples(st.sampled_from(PARTS), st.integers(0, 10_000), st.integers(0, 1_000)), max_size=60
)


def test_high_water_is_the_minimum_over_every_partition() -> None:
    frontier = Frontier(PARTS)
    assert frontier.high_water() == ZERO
    frontier.forward(PARTS[0], resolved=Hlc(10), next_offset=5)
    frontier.forward(PARTS[1], resolved=Hlc(20), next_offset=5)
    assert frontier.high_water() == ZERO  # b/0 has never been resolved
    frontier.forward(PARTS[2], resolved=Hlc(15), next_offset=1)
    assert frontier.high_water() == Hlc(10)
    assert frontier.leading() == {PARTS[1]: Hlc(20), PARTS[2]: Hlc(15)}


@given(updates)
def test_nothing_ever_moves_backwards(steps: list[tuple[SourcePartition, int, int]]) -> None:
    frontier = Frontier(PARTS)
    high = frontier.high_water()
    for sp, ts, offset in steps:
        before = frontier[sp]
        frontier.forward(sp, resolved=Hlc(ts), next_offset=offset)
        after = frontier[sp]
        assert after.resolved == max(before.resolved, Hlc(ts))
        assert after.offset is not None
        assert after.offset >= (before.offset or 0)
        assert frontier.high_water() >= high
        high = frontier.high_water()
        assert high == min(frontier[p].resolved for p in PARTS)


def test_forward_without_a_marker_only_moves_the_offset() -> None:
    frontier = Frontier(PARTS, start=Hlc(7))
    frontier.forward(PARTS[0], resolved=None, next_offset=42)
    assert frontier[PARTS[0]].offset == 42
    assert frontier[PARTS[0]].resolved == Hlc(7)


def test_a_partition_added_to_a_source_topic_never_drags_the_high_water_mark_back() -> None:
    old = [SourcePartition("t", 0), SourcePartition("t", 1)]
    frontier = Frontier(old)
    for sp in old:
        frontier.forward(sp, resolved=Hlc(50), next_offset=10)
    new = SourcePartition("t", 2)
    assert new not in frontier
    frontier.forward(new, resolved=Hlc(20), next_offset=3)  # its own first marker is older
    assert frontier.high_water() == Hlc(50)
    assert frontier[new] == Progress(3, Hlc(50))  # the floor a restart would give it too
