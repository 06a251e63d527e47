"""A seeded random workload with the awkward shapes real change feeds carry.

Every source record is written as raw JSON text built here (not by a JSON library), so the
exact number texts are known: DECIMAL-like fractions with trailing zeros, exponents, -0,
integers beyond 64 bits; keys with quotes and non-ASCII text; nested JSON; nulls; deletes;
upstream duplicates re-sent after a covering marker (and, with ``late_duplicates``, changes
re-sent hundreds of changes after they were resolved); a partition whose markers lag (or, with
``stalled``, one that never sends a marker); a column added mid-stream; bad records sprinkled
in. What was written is kept for the validator.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from sinks.partitioning import default_partition

START = 1_700_000_000_000_000_000  # wall nanoseconds below every change
REGIONS = ['eu-"west"', "Zürich", "東京", "a\\b", "plain"]
NUMBERS = [
    "12345678901234567.89",
    "1.10",
    "1E+2",
    "-0",
    "18446744073709551617",
    "0.000001",
    "-2.50e-3",
    "42",
    "3.14159265358979323846",
]
NOTES = ["café", 'say \\"hi\\"', "tab\\there", "😀", "", "line\\nbreak", "\\u00e9"]
BAD = [b"{not json", b'{"after": {"x": "\\ud800"}, "updated": "1.0"}', b"[1, 2]", b'{"after": {}}']


@dataclass(frozen=True)
class SourceChange:
    """One row change as written: its key and value text, time, and where it went."""

    partition: int
    key: bytes
    after: str  # JSON text, "null" for a delete
    before: str  # JSON text of the previous version, "null" for a new key
    wall: int  # the HLC's wall part (logical is always 0 here)

    @property
    def updated(self) -> str:
        return f"{self.wall}.0000000000"

    def value(self) -> bytes:
        text = f'{{"after":{self.after},"before":{self.before},"updated":"{self.updated}"}}'
        return text.encode()


def live_at(changes: list[SourceChange], resolved_wall: int) -> dict[tuple[str, int], str]:
    """Each live key's ``after`` text at ``resolved_wall`` (``changes`` in commit order)."""
    state: dict[tuple[str, int], str] = {}
    for change in changes:
        if change.wall > resolved_wall:
            break
        region, number = json.loads(change.key)
        if change.after == "null":
            state.pop((region, number), None)
        else:
            state[(region, number)] = change.after
    return state


@dataclass
class Workload:
    """The records written so far, in order per partition."""

    partitions: int
    seed: int
    lagging: int = 1  # this partition's markers trail the others
    stalled: int | None = None  # this partition never gets a marker (nor an upstream duplicate)
    late_duplicates: float = 0.0  # per change, the chance of re-sending one resolved long ago
    changes: list[SourceChange] = field(default_factory=list)
    duplicates: list[SourceChange] = field(default_factory=list)  # re-sent after a marker
    bad: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # partition, key, value

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._wall = START
        self._rows: dict[bytes, str] = {}  # live rows: key -> after text
        self._extra = False  # a column added mid-stream

    @property
    def start(self) -> str:
        """A time below every change (a cursor there misses none)."""
        return f"{START}.0000000000"

    def records(self, count: int) -> list[tuple[int, bytes | None, bytes]]:
        """``count`` more changes (and markers, duplicates, bad records), ready to produce."""
        out: list[tuple[int, bytes | None, bytes]] = []
        for _ in range(count):
            out.extend(self._step())
        return out

    def final_markers(self) -> list[tuple[int, bytes | None, bytes]]:
        """A marker above every change on every partition (but a stalled one)."""
        self._wall += 1_000
        return [
            (p, None, self._marker(self._wall)) for p in range(self.partitions) if p != self.stalled
        ]

    def _step(self) -> list[tuple[int, bytes | None, bytes]]:
        rnd = self._random
        self._wall += rnd.randint(1, 50) * 1_000
        if len(self.changes) == 400:
            self._extra = True
        key = self._key()
        previous = self._rows.get(key, "null")
        delete = previous != "null" and rnd.random() < 0.1
        after = "null" if delete else self._after()
        partition = default_partition(key, self.partitions)
        change = SourceChange(partition, key, after, previous, self._wall)
        self.changes.append(change)
        if delete:
            self._rows.pop(key, None)
        else:
            self._rows[key] = after
        out: list[tuple[int, bytes | None, bytes]] = [(partition, key, change.value())]
        if rnd.random() < 0.02:
            bad = rnd.choice(BAD)
            self.bad.append((partition, key, bad))
            out.append((partition, key, bad))
        if self.late_duplicates and rnd.random() < self.late_duplicates:
            out.extend(self._late_duplicate())
        if len(self.changes) % 25 == 0:
            out.extend(self._markers())
        return out

    def _markers(self) -> list[tuple[int, bytes | None, bytes]]:
        out: list[tuple[int, bytes | None, bytes]] = []
        for p in range(self.partitions):
            if p == self.stalled or (p == self.lagging and len(self.changes) % 100):
                continue  # the lagging partition resolves four times less often
            out.append((p, None, self._marker(self._wall)))
        # an upstream duplicate: an already resolved change sent again
        resolved = [
            c for c in self.changes[-60:-30] if c.partition not in {self.lagging, self.stalled}
        ]
        if resolved and self._random.random() < 0.5:
            again = self._random.choice(resolved)
            self.duplicates.append(again)
            out.append((again.partition, again.key, again.value()))
        return out

    def _late_duplicate(self) -> list[tuple[int, bytes | None, bytes]]:
        """A change resolved hundreds of changes ago sent again, amid its partition's rows.

        Many markers of its partition came since, so only a floor at that partition's own
        resolved time (in memory, or in the checkpoint a restart resumes from) drops it.
        """
        old = [c for c in self.changes[-800:-400] if c.partition != self.stalled]
        if not old:
            return []
        again = self._random.choice(old)
        self.duplicates.append(again)
        return [(again.partition, again.key, again.value())]

    def _key(self) -> bytes:
        rnd = self._random
        if self._rows and rnd.random() < 0.6:
            return rnd.choice(sorted(self._rows))
        region = json.dumps(rnd.choice(REGIONS), ensure_ascii=False)
        return f"[{region},{rnd.randint(1, 10_000)}]".encode()

    def _after(self) -> str:
        rnd = self._random
        note = rnd.choice(NOTES)
        tag, depth = rnd.choice(NUMBERS), rnd.randint(0, 9)
        nested = f'{{"tags":["a",{tag}],"deep":{{"x":null,"y":[[{depth}]]}}}}'
        columns = [
            f'"amount":{rnd.choice(NUMBERS)}',
            f'"note":"{note}"',
            f'"meta":{nested}',
            '"maybe":null',
        ]
        if self._extra:
            columns.append(f'"extra":{rnd.choice(NUMBERS)}')
        return "{" + ",".join(columns) + "}"

    @staticmethod
    def _marker(wall: int) -> bytes:
        return f'{{"resolved":"{wall}.0000000000"}}'.encode()
