import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.hlc import Hlc, HlcClock, parse_packed, parse_time

walls = st.integers(min_value=0, max_value=2**63 - 1)
logicals = st.integers(min_value=0, max_value=10**10 - 1)


@given(walls, logicals)
def test_wire_form_round_trips(wall: int, logical: int) -> None:
    ts = Hlc(wall, logical)
    text = str(ts)
    assert text == f"{wall}.{logical:010d}"
    assert Hlc.parse(text) == ts


@given(walls, logicals, walls, logicals)
def test_order_is_wall_then_logical(w1: int, l1: int, w2: int, l2: int) -> None:
    assert (Hlc(w1, l1) < Hlc(w2, l2)) == ((w1, l1) < (w2, l2))


def test_parse_examples() -> None:
    assert Hlc.parse("1701102311425045162.0000000000") == Hlc(1701102311425045162, 0)
    assert Hlc.parse("5") == Hlc(5, 0)
    with pytest.raises(ValueError, match="not an HLC"):
        Hlc.parse("1.2.3")


def test_user_facing_times() -> None:
    now = 1_800_000_000_000_000_000
    assert parse_time("now", now_nanos=now) == Hlc(now)
    assert parse_time("-1h", now_nanos=now) == Hlc(now - 3_600_000_000_000)
    assert parse_time("-90s", now_nanos=now) == Hlc(now - 90_000_000_000)
    assert parse_time("2023-11-27T16:25:11.5+01:00") == Hlc(1701098711_500_000_000)
    with pytest.raises(ValueError, match="UTC offset"):
        parse_time("2023-11-27T16:25:11")


def test_clock_is_strictly_increasing_even_when_wall_stands_still() -> None:
    walls_seen = iter([100, 100, 90, 200])
    clock = HlcClock(lambda: next(walls_seen))
    issued = [clock.now() for _ in range(4)]
    assert issued == [Hlc(100, 0), Hlc(100, 1), Hlc(100, 2), Hlc(200, 0)]
    assert clock.last == Hlc(200, 0)


@given(
    st.one_of(
        st.text(alphabet="0123456789.", max_size=34),
        st.text(max_size=34),
        st.builds(str, st.builds(Hlc, st.integers(0, 10**20 - 1), logicals)),
    )
)
def test_a_packed_time_is_the_parsed_one_in_one_int(text: str) -> None:
    try:
        want: int | None = Hlc.parse(text).packed()
    except ValueError:
        want = None
    try:
        got: int | None = parse_packed(text)
    except ValueError:
        got = None
    assert got == want
    if want is not None:
        assert Hlc.unpack(want) == Hlc.parse(text)


def test_packed_times_order_as_their_hlcs_and_other_scripts_digits_are_not_a_time() -> None:
    times = [Hlc(1, 9_999_999_999), Hlc(2, 0), Hlc(2, 1), Hlc(10**19, 0)]
    assert [t.packed() for t in times] == sorted(t.packed() for t in times)
    with pytest.raises(ValueError, match="not an HLC"):
        Hlc.parse("\uff11.0000000000")  # a fullwidth one
