"""The checkpoint-and-marker policy against the guarantees, over simulated runs.

A run is simulated with the real pure pieces (``Frontier``, ``Checkpoint`` encode/decode at a
byte budget, ``Policy``) over generated source logs, with crashes that restart from the last
durable checkpoint record. The simulation emits rows as the executors do (a row above its
partition's floor goes out; a marker raises the floor), and checks what users are promised:

* a marker is never above what a durable checkpoint covers, never sent before it, and never
  below one already sent (contract §5.3);
* every row at or below a marker was emitted before the marker went out (§5.1);
* after a crash, what a partition re-emits is at most what it emitted since the last
  checkpoint (§5.4), and a stalled partition does not make the leading ones replay (seed 000);
* a checkpoint over budget falls back only to lower floors, and is refused only when even its
  smallest form does not fit (§6).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.checkpoint import Checkpoint, decode
from pipeline.core.frontier import Frontier, SourcePartition
from pipeline.core.policy import Cadence, Decision, HighWaterWatch, Policy
from schemas.errors import CheckpointError
from schemas.hlc import ZERO, Hlc

pytestmark = pytest.mark.unit
SECOND = 1_000_000_000


@dataclass(frozen=True)
class Entry:
    """One source record: a marker, or a row with its commit time."""

    marker: bool
    ts: Hlc


def build_log(steps: list[tuple[bool, int]]) -> list[Entry]:
    """A partition's log: markers at growing walls, rows just above the marker before them."""
    wall, logical, log = 1, 0, []
    for is_marker, step in steps:
        if is_marker:
            wall += step
            logical = 0
            log.append(Entry(True, Hlc(wall * SECOND)))
        else:
            logical += 1
            log.append(Entry(False, Hlc(wall * SECOND, logical)))
    return log


@dataclass
class Simulation:
    """A changefeed's driver and executors over ``logs``, with crashes and restarts."""

    logs: list[list[Entry]]
    cadence: Cadence
    budget: int
    now: float = 0.0
    emitted: dict[tuple[int, int], int] = field(default_factory=dict)  # (p, offset) -> times
    sent: list[Hlc] = field(default_factory=list)  # every marker, across restarts
    sent_this_run: list[Hlc] = field(default_factory=list)
    durable: bytes | None = None
    durable_at: dict[int, int] = field(default_factory=dict)  # in-memory offsets when written
    emitted_since_durable: dict[int, int] = field(default_factory=dict)
    crashes: list[tuple[dict[int, int], dict[int, int], str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.die_before_marker = False
        self.parts = [SourcePartition("src", p) for p in range(len(self.logs))]
        self.frontier = Frontier(self.parts)
        self.policy = Policy(self.cadence)
        self.write_checkpoint(None)  # a new changefeed's start, durable before anything

    # -- the driver ----------------------------------------------------------------------

    def write_checkpoint(self, last_marker: Hlc | None) -> bool:
        record = Checkpoint.of(
            "cf", self.frontier, last_marker=last_marker, marker_sent=self.policy.sent
        )
        try:
            self.durable = record.encode(self.budget)
        except CheckpointError:
            return False  # the job fails; the previous record stays the durable one
        self.durable_at = {sp.partition: self.frontier[sp].offset or 0 for sp in self.parts}
        self.emitted_since_durable = dict.fromkeys(range(len(self.logs)), 0)
        self.policy.checkpointed(record.high_water, self.now)
        return True

    def carry_out(self, decision: Decision, *, final: bool = False) -> bool:
        if decision.checkpoint and not self.write_checkpoint(decision.record_marker):
            return False
        if decision.marker is not None:
            if self.die_before_marker:
                self.die_before_marker = False
                return False  # the driver dies between the checkpoint and the broadcast
            self.send(decision.marker)
        if (final or decision.finished) and self.policy.unconfirmed():
            return self.write_checkpoint(self.policy.last_marker)
        return True

    def send(self, marker: Hlc) -> None:
        self.check_marker(marker)
        self.sent.append(marker)
        self.sent_this_run.append(marker)
        self.policy.marker_sent(marker, self.now)

    def check_marker(self, marker: Hlc) -> None:
        assert self.durable is not None
        assert decode(self.durable).high_water >= marker, "marker above the durable checkpoint"
        assert marker <= self.frontier.high_water(), "marker above what was read"
        if self.sent_this_run:
            assert marker > self.sent_this_run[-1], "marker not above the last one of the run"
        if self.sent:
            assert marker >= self.sent[-1], "marker below one already sent"
        for p, log in enumerate(self.logs):
            for offset, entry in enumerate(log):
                if not entry.marker and entry.ts <= marker:
                    assert (p, offset) in self.emitted, f"row {p}@{offset} <= {marker} unsent"

    # -- the executors -------------------------------------------------------------------

    def read(self, reads: dict[int, int]) -> None:
        """Read ``reads[p]`` more records of each partition, emitting rows above the floor."""
        for p, count in reads.items():
            sp = self.parts[p]
            start = self.frontier[sp].offset or 0
            stop = min(start + count, len(self.logs[p]))
            if stop <= start:
                continue
            floor, top = self.frontier[sp].resolved, None
            for offset in range(start, stop):
                entry = self.logs[p][offset]
                if entry.marker:
                    floor = max(floor, entry.ts)
                    top = entry.ts if top is None else max(top, entry.ts)
                elif entry.ts > floor:
                    self.emitted[(p, offset)] = self.emitted.get((p, offset), 0) + 1
                    self.emitted_since_durable[p] = self.emitted_since_durable.get(p, 0) + 1
            self.frontier.forward(sp, resolved=top, next_offset=stop)
            self.policy.progressed()

    def batch(self, reads: dict[int, int], seconds: float, *, final: bool = False) -> bool:
        """A micro-batch ``seconds`` after the last one, then the policy's decision."""
        self.now += seconds
        self.read(reads)
        hw, lag = self.frontier.high_water(), self.frontier.lag_nanos() / 1e9
        return self.carry_out(self.policy.after_batch(hw, lag, self.now, final=final), final=final)

    def crash(self) -> None:
        """Kill the driver; restart from the durable record alone, then read to where it was.

        Records, per partition, what the restart re-emitted of what had been emitted before,
        next to what was emitted since the durable record was written.
        """
        assert self.durable is not None
        at_crash = {sp.partition: self.frontier[sp].offset or 0 for sp in self.parts}
        since = dict(self.emitted_since_durable)
        before = dict(self.emitted)
        restored = decode(self.durable)
        self.frontier = Frontier.restore(restored.progress(self.parts))
        self.policy = Policy(self.cadence)
        self.sent_this_run = []
        pending = self.policy.resume(
            restored.high_water, restored.last_marker, restored.marker_sent
        )
        if pending is not None:  # checkpointed, perhaps never sent: the resume sends it
            self.send(pending)
            self.write_checkpoint(pending)
        for sp in self.parts:
            self.read({sp.partition: at_crash[sp.partition] - (self.frontier[sp].offset or 0)})
        replayed = {
            p: sum(self.emitted.get((p, o), 0) - before.get((p, o), 0) for o in range(end))
            for p, end in at_crash.items()
        }
        self.crashes.append((replayed, since, restored.level))


logs_strategy = st.lists(
    st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=25), min_size=1, max_size=4
)
cadence_strategy = st.builds(
    Cadence,
    resolved=st.booleans(),
    resolved_interval=st.sampled_from([0.0, 1.0, 5.0]),
    checkpoint_frequency=st.sampled_from([0.0, 1.0, 3.0, 10.0]),
    lag_threshold=st.sampled_from([0.0, 2.0, 60.0]),
)
action = st.one_of(
    st.tuples(
        st.just("read"),
        st.dictionaries(st.integers(0, 3), st.integers(0, 6)),
        st.sampled_from([0.0, 0.5, 1.0, 4.0]),
    ),
    st.tuples(st.just("crash"), st.just({}), st.just(0.0)),
    st.tuples(st.just("die before a marker"), st.just({}), st.just(0.0)),
    st.tuples(st.just("stop"), st.just({}), st.just(0.0)),
)


@settings(max_examples=300, deadline=None)
@given(
    logs_strategy,
    cadence_strategy,
    st.lists(action, max_size=30),
    st.sampled_from([1 << 20, 700, 400, 300]),
)
def test_markers_follow_durable_checkpoints_and_nothing_beneath_them_is_lost(
    steps: list[list[tuple[bool, int]]],
    cadence: Cadence,
    actions: list[tuple[str, dict[int, int], float]],
    budget: int,
) -> None:
    logs = [build_log(s) for s in steps]
    sim = Simulation(logs, cadence, budget)
    if sim.durable is None:
        return  # even the first record does not fit: the changefeed never starts
    for kind, reads, seconds in actions:
        if kind == "crash":
            sim.crash()
        elif kind == "die before a marker":
            sim.die_before_marker = True
        else:
            ok = sim.batch(
                {p: n for p, n in reads.items() if p < len(logs)}, seconds, final=kind == "stop"
            )
            if not ok:
                sim.crash()  # a checkpoint that cannot be written fails the job
    # drain everything and stop: every row at or below the last marker was emitted
    sim.die_before_marker = False
    clean_stop = sim.batch(dict.fromkeys(range(len(logs)), 1000), 1.0, final=True)
    if not clean_stop:
        sim.crash()
    # every marker a durable record covers reached the partitions (no marker lost), and
    # after a clean stop the record says so: the next run sends nothing twice
    assert sim.durable is not None
    last = decode(sim.durable)
    if last.last_marker is not None:
        assert last.last_marker in sim.sent
        pending = Policy(cadence).resume(last.high_water, last.last_marker, last.marker_sent)
        assert pending is None or not clean_stop
    for replayed, since, level in sim.crashes:
        if level != "high_water":  # offsets kept: only what followed the checkpoint replays
            for p, count in replayed.items():
                assert count <= since.get(p, 0), f"partition {p} replayed {count} > {since}"


@settings(max_examples=200, deadline=None)
@given(
    st.integers(2, 4),
    st.sampled_from([0.0, 1.0, 3.0]),
    st.sampled_from([0.0, 2.0]),
    st.lists(st.integers(1, 4), min_size=5, max_size=30),
    st.integers(0, 29),
)
def test_a_stalled_partition_does_not_make_the_leading_ones_replay(
    partitions: int, frequency: float, threshold: float, rows: list[int], crash_at: int
) -> None:
    # partition 0 has one marker, then only rows: it pins the high-water mark for ever.
    stalled = [(True, 1)] + [(False, 0)] * 200
    leading = [step for n in rows for step in [(False, 0)] * n + [(True, 1)]]
    logs = [build_log(stalled)] + [build_log([(True, 1), *leading])] * (partitions - 1)
    cadence = Cadence(
        resolved=True,
        resolved_interval=0.0,
        checkpoint_frequency=frequency,
        lag_threshold=threshold,
    )
    sim = Simulation(logs, cadence, 1 << 20)
    step = 1.0
    lagging_since: float | None = None
    reads_by_time: list[tuple[float, dict[int, int]]] = []
    for i, n in enumerate(rows):
        before = dict(sim.emitted)
        assert sim.batch(dict.fromkeys(range(partitions), n + 1), step)
        reads_by_time.append(
            (
                sim.now,
                {
                    p: sum(1 for k in sim.emitted if k[0] == p and k not in before)
                    for p in range(partitions)
                },
            )
        )
        if sim.frontier.lag_nanos() / 1e9 > threshold and lagging_since is None:
            lagging_since = sim.now
        if i == crash_at:
            break
    assert sim.frontier.high_water() == Hlc(2 * SECOND)  # the stall pins it
    now = sim.now
    sim.crash()
    replayed, _, _ = sim.crashes[-1]
    if lagging_since is None or now - lagging_since < frequency + step:
        return  # not behind for long enough to call for a checkpoint yet
    # A checkpoint follows the leading partitions at least every `frequency` once they lead
    # by more than the threshold: a restart replays at most what they read since then.
    window_start = now - frequency - step
    for p in range(1, partitions):
        recent = sum(reads[p] for at, reads in reads_by_time if at >= window_start)
        assert replayed[p] <= recent, f"partition {p} replayed {replayed[p]} > {recent}"


@given(
    st.dictionaries(st.integers(0, 60), st.integers(1, 10**6), min_size=1),
    st.integers(100, 6000),
)
def test_a_checkpoint_over_budget_falls_back_only_to_lower_floors(
    times: dict[int, int], budget: int
) -> None:
    parts = {SourcePartition("t", p): ts for p, ts in times.items()}
    frontier = Frontier(parts)
    for sp, ts in parts.items():
        frontier.forward(sp, resolved=Hlc(ts), next_offset=sp.partition * 3 + 1)
    record = Checkpoint.of("cf", frontier, last_marker=frontier.high_water())
    smallest = len(replace(record, level="high_water").encode(1 << 30))
    try:
        data = record.encode(budget)
    except CheckpointError:
        assert smallest > budget, "refused although the high-water form fits"
        return
    assert len(data) <= budget
    resumed = decode(data)
    assert resumed.high_water == frontier.high_water()
    assert resumed.last_marker == frontier.high_water()
    progress = resumed.progress(parts)
    for sp in parts:
        assert frontier.high_water() <= progress[sp].resolved <= frontier[sp].resolved
        assert progress[sp].offset in (frontier[sp].offset, None)
        if progress[sp].offset is None:  # read from the start: only at the last level
            assert json.loads(data)["fallback"] == "high_water"


def test_end_time_caps_the_marker_and_finishes() -> None:
    end = Hlc(5 * SECOND)
    policy = Policy(Cadence(resolved_interval=100.0, checkpoint_frequency=100.0, end_time=end))
    policy.progressed()
    decision = policy.after_batch(Hlc(9 * SECOND), 0.0, now=1.0)
    assert decision == Decision(checkpoint=True, record_marker=end, marker=end, finished=True)


def test_the_scan_end_sends_the_statement_time_after_its_checkpoint() -> None:
    policy = Policy(Cadence())
    t = Hlc(7 * SECOND)
    assert policy.after_scan(t, only=False) == Decision(True, t, t, finished=False)
    assert policy.after_scan(t, only=True).finished
    quiet = Policy(Cadence(resolved=False))
    assert quiet.after_scan(t, only=False) == Decision(True, None, None, finished=False)


def test_no_marker_without_progress_above_the_last_one() -> None:
    policy = Policy(Cadence(resolved_interval=0.0, checkpoint_frequency=0.0))
    assert policy.resume(Hlc(3 * SECOND), Hlc(3 * SECOND), Hlc(3 * SECOND)) is None
    assert policy.after_batch(Hlc(3 * SECOND), 0.0, now=10.0) == Decision(
        record_marker=Hlc(3 * SECOND)
    )


def test_a_high_water_mark_standing_still_past_its_ttl_is_noticed() -> None:
    watch = HighWaterWatch(ttl=10.0)
    assert not watch.stalled(ZERO, 100.0)
    assert not watch.stalled(ZERO, 110.0)
    assert watch.stalled(ZERO, 110.5)
    assert not watch.stalled(Hlc(1), 111.0)  # it moved: counted again from here
    assert not watch.stalled(Hlc(1), 121.0)
    assert watch.stalled(Hlc(1), 121.5)
