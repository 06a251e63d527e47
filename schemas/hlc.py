"""Hybrid logical clock timestamps, as they travel on the wire.

A timestamp is ``"<wall nanos>.<10-digit logical>"`` (contract §2), compared by
``(wall, logical)``. Config and CLI also accept RFC 3339 times, ``now`` and relative forms
such as ``-1h``; :func:`parse_time` turns all of those into an :class:`Hlc`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

_WIRE = re.compile(r"^(\d{1,20})(?:\.(\d{1,10}))?$", re.ASCII)  # not other scripts' digits
_RELATIVE = re.compile(r"^-(\d+(?:\.\d+)?)(ns|us|ms|s|m|h|d)$")
_UNIT_NANOS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
    "d": 86_400_000_000_000,
}


class _HlcFields(NamedTuple):
    wall: int
    logical: int


MAX_WALL = 10**20  # 20 digits on the wire (the year 5138)
LOGICAL_SCALE = (
    10**10
)  # the logical part's range: a time packed into one int is wall * this + logical


class Hlc(_HlcFields):
    """A hybrid logical clock timestamp; ordering is by ``(wall, logical)``.

    A tuple underneath: the changefeed creates and compares one per source record, and tuple
    construction and comparison are several times cheaper than a dataclass's.
    """

    __slots__ = ()

    def __new__(cls, wall: int, logical: int = 0) -> Hlc:  # noqa: D102
        if not 0 <= wall < MAX_WALL or not 0 <= logical < 10_000_000_000:
            raise ValueError(f"HLC out of range: wall={wall} logical={logical}")
        return tuple.__new__(cls, (wall, logical))

    @classmethod
    def parse(cls, text: str) -> Hlc:
        """Parse the wire form ``"<wall>.<logical>"`` (the logical part may be omitted)."""
        wall_text, _, logical_text = text.partition(".")
        if (  # the common form, without a regular expression
            0 < len(wall_text) <= 20  # _WIRE's bounds
            and 0 < len(logical_text) <= 10
            and text.isascii()
            and wall_text.isdigit()
            and logical_text.isdigit()
        ):  # in range by their lengths: no check needed
            return tuple.__new__(cls, (int(wall_text), int(logical_text)))
        match = _WIRE.match(text.strip())
        if match is None:
            raise ValueError(f"not an HLC timestamp: {text!r}")
        wall, logical = match.groups()
        return cls(int(wall), int(logical) if logical else 0)

    def __str__(self) -> str:
        return f"{self[0]}.{self[1]:010d}"

    def packed(self) -> int:
        """The time as one int, ordered as the HLC (``wall * 10**10 + logical``).

        An int is one object the garbage collector does not track: a consumer holding a
        million rows' times keeps them as ints (:func:`parse_packed`, :meth:`unpack`).
        """
        return self[0] * LOGICAL_SCALE + self[1]

    @classmethod
    def unpack(cls, packed: int) -> Hlc:
        """The HLC of a :meth:`packed` time."""
        if not 0 <= packed < MAX_WALL * LOGICAL_SCALE:
            raise ValueError(f"packed HLC out of range: {packed}")
        return tuple.__new__(cls, divmod(packed, LOGICAL_SCALE))

    def next(self) -> Hlc:
        """The smallest timestamp strictly above this one."""
        return Hlc(self.wall, self.logical + 1)

    def previous(self) -> Hlc:
        """The greatest timestamp strictly below this one (``ZERO`` has none)."""
        if self.logical:
            return Hlc(self.wall, self.logical - 1)
        return Hlc(self.wall - 1, 9_999_999_999)


ZERO = Hlc(0, 0)


def parse_packed(text: str) -> int:
    """:meth:`Hlc.parse` then :meth:`Hlc.packed`, without the tuple for the wire's own form.

    ``"<wall>.<10 digits>"`` packs to the int its digits spell with the dot left out.
    """
    if len(text) > 11 and text[-11] == ".":
        digits = text.replace(".", "", 1)
        if len(digits) <= 30 and digits.isdigit() and digits.isascii():
            return int(digits)
    return Hlc.parse(text).packed()


def parse_time(text: str, *, now_nanos: int | None = None) -> Hlc:
    """Parse any user-facing time: HLC, RFC 3339, ``now``, or ``-<n><unit>``.

    ``now_nanos`` makes ``now`` and relative forms deterministic in tests.
    """
    value = text.strip()
    now = time.time_ns() if now_nanos is None else now_nanos
    if value == "now":
        return Hlc(now)
    relative = _RELATIVE.match(value)
    if relative:
        amount, unit = relative.groups()
        return Hlc(max(0, now - int(float(amount) * _UNIT_NANOS[unit])))
    if _WIRE.match(value):
        return Hlc.parse(value)
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (expected an HLC like 1701102311425045162.0000000000, "
            "an RFC 3339 time, 'now', or a relative time like '-1h')"
        ) from None
    if parsed.tzinfo is None:
        raise ValueError(f"RFC 3339 time needs a UTC offset or 'Z': {text!r}")
    seconds = int(parsed.timestamp())
    return Hlc(seconds * 1_000_000_000 + parsed.microsecond * 1_000)


class HlcClock:
    """Issues strictly increasing HLC timestamps from a wall clock.

    When the wall clock stands still or goes backwards the logical part ticks instead, as a
    database's HLC does; ``wall_nanos`` is injectable for deterministic tests.
    """

    def __init__(self, wall_nanos: Callable[[], int] | None = None) -> None:
        self._wall = wall_nanos or time.time_ns
        self._last = ZERO

    def now(self) -> Hlc:
        """A timestamp strictly above every one issued before."""
        wall = int(self._wall())
        self._last = Hlc(wall) if wall > self._last.wall else self._last.next()
        return self._last

    @property
    def last(self) -> Hlc:
        """The last timestamp issued (``ZERO`` before the first)."""
        return self._last
