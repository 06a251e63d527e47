"""GC never deletes a needed record: properties over random safepoints, TTLs and clocks."""

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.control.gc import next_safe_point, protected_offsets, trim_offset
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.progress.safepoints import Safepoint
from schemas.hlc import Hlc

SP = SourcePartition("src", 0)
BASE = 1_700_000_000.0  # seconds


def hlc(seconds: float) -> Hlc:
    return Hlc(int(seconds * 1e9))


@st.composite
def safepoints(draw: st.DrawFn) -> Safepoint:
    changefeed = draw(st.booleans())
    offsets = {SP: draw(st.integers(0, 60))} if changefeed and draw(st.booleans()) else {}
    return Safepoint(
        service_id=f"highwater-c-{draw(st.text('abc', min_size=1, max_size=3))}",
        safepoint=hlc(BASE + draw(st.floats(0, 1000))),
        ttl=draw(st.floats(1, 500)),
        updated_at=BASE + draw(st.floats(0, 1000)),
        owner="changefeed:x" if changefeed else "user",
        offsets=offsets,
    )


@st.composite
def partitions(draw: st.DrawFn) -> list[tuple[int, Hlc | None]]:
    """A partition's records: times rising in commit order, duplicates and bad ones mixed in."""
    out: list[tuple[int, Hlc | None]] = []
    t = BASE
    for offset in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from(["row", "row", "row", "dup", "bad"]))
        if kind == "row":
            t += draw(st.floats(0.001, 40))
            out.append((offset, hlc(t)))
        elif kind == "dup":
            out.append((offset, hlc(t - draw(st.floats(0, 50)))))
        else:
            out.append((offset, None))
    return out


@settings(max_examples=400, deadline=None)
@given(
    held=st.lists(safepoints(), max_size=6),
    records=partitions(),
    clocks=st.lists(st.floats(0, 2000), min_size=1, max_size=4),
    life_time=st.floats(0, 1500),
    low=st.integers(0, 5),
)
def test_gc_never_deletes_a_needed_record_and_never_moves_back(
    held: list[Safepoint],
    records: list[tuple[int, Hlc | None]],
    clocks: list[float],
    life_time: float,
    low: int,
) -> None:
    current = Hlc(0)
    records = [r for r in records if r[0] >= low]
    high = records[-1][0] + 1 if records else low
    for step in sorted(clocks):
        now = BASE + step
        gc = next_safe_point(now, life_time, held, current)
        assert gc >= current, "the GC safe point moved backwards"
        alive = [s for s in held if not s.expired(now)]
        assert gc == current or all(gc <= s.safepoint for s in alive)
        assert gc == current or gc <= hlc(now - life_time)
        protect = protected_offsets(held, now).get(SP)
        end = trim_offset(iter(records), low, high, gc, protect)
        assert low <= end <= max(low, high)
        deleted = [(o, ts) for o, ts in records if o < end]
        for offset, ts in deleted:
            assert ts is not None, "a record that does not decode was deleted"
            assert ts <= gc
            for s in alive:
                assert ts <= s.safepoint, f"deleted a record above {s.service_id}'s time"
                if SP in s.offsets:
                    assert offset < s.offsets[SP], "deleted at or after a checkpointed offset"
        current = gc
        records = [r for r in records if r[0] >= end]
        low = end


def test_an_expired_safepoint_no_longer_holds_gc() -> None:
    held = [Safepoint("highwater-c-u", hlc(BASE + 10), ttl=60, updated_at=BASE, owner="user")]
    assert next_safe_point(BASE + 59, 0, held, Hlc(0)) == hlc(BASE + 10)
    assert next_safe_point(BASE + 60, 0, held, Hlc(0)) == hlc(BASE + 60)


def test_the_trim_stops_at_the_first_record_above_the_safe_point() -> None:
    records = [(3, hlc(BASE + 1)), (4, hlc(BASE + 2)), (5, hlc(BASE + 9)), (6, hlc(BASE + 3))]
    assert trim_offset(iter(records), 3, 7, hlc(BASE + 5), None) == 5
    assert trim_offset(iter(records), 3, 7, hlc(BASE + 5), 4) == 4
    assert trim_offset(iter(records), 3, 7, hlc(BASE + 10), None) == 7
