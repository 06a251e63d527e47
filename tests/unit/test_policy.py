"""The checkpoint-and-marker policy against the guarantees, over simulated runs.

A run is simulated with the real pure pieces (``Frontier``, ``Checkpoint`` encode/decode at a
byte budget, ``Policy``) over generated source logs, with crashes that restart from the last
durable checkpoint record. The simulation emits rows as the executors do (a row above its
partition's floor goes out; a marker raises the floor), and checks what users are promised:

* a marker is never above what a durable checkpoint covers, never sent before it, and never
  below one already sent (contract §5.3);
* every row at or below a marker was emitted before the marker went out (§5.1);
* after a crash, what a partition re-emits is at most what it emitted since the last
  checkpoint (§5.4); with a partition that never sends a marker (the high-water mark never
  moves), the others re-emit at most their last batch when ``min_checkpoint_frequency`` is at
  most the batch spacing, and in general what they read within one ``min_checkpoint_frequency``
  (seed 000); the record they resume from carries each partition's offset and resolved time,
  so a change re-sent upstream below a partition's checkpointed time is not emitted again;
* a checkpoint over budget falls back only to lower floors, and is refused only when even its
  smallest form does not fit (§6).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.ledger.checkpoint import Checkpoint, decode
from pipeline.core.ledger.frontier import Frontier, Progress, SourcePartition
from pipeline.core.progress.policy import Cadence, Decision, HighWaterWatch, Policy
from schemas.errors import CheckpointError
from schemas.hlc import ZERO, Hlc

pytestmark = pytest.mark.unit
SECOND = 1_000_000_000


@dataclass(frozen=True)
class Entry:
    """One source record: a marker, or a row with its commit time.

    ``resent``: an upstream duplicate of a row that a marker before it already covers.
    """

    marker: bool
    ts: Hlc
    resent: bool = False


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
    durable_progress: dict[SourcePartition, Progress] = field(default_factory=dict)  # the same
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
        self.durable_progress = self.frontier.progress()
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
        return self.decide(final=final)

    def decide(self, *, final: bool = False) -> bool:
        """What the policy says now, carried out (after a batch, or a tick between batches)."""
        decision = self.policy.after_batch(self.frontier.high_water(), self.now, final=final)
        return self.carry_out(decision, final=final)

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


TICK = 1.0  # between batches the coordinator asks the policy again about once a second


def marked_log(segments: list[tuple[int, int, bool]]) -> list[Entry]:
    """A partition that advances: per segment, ``rows`` rows, then a marker ``step`` s later.

    With ``resend``, the segment's rows end with an upstream duplicate of the last row the
    marker before them covers (so it is at or below that partition's resolved time).
    """
    wall, log, covered = 1, list[Entry](), list[Hlc]()
    for rows, step, resend in segments:
        current = [Hlc(wall * SECOND, i + 1) for i in range(rows)]
        log.extend(Entry(False, ts) for ts in current)
        if resend and covered:
            log.append(Entry(False, covered[-1], resent=True))
        wall += step
        log.append(Entry(True, Hlc(wall * SECOND)))
        covered.extend(current)
    return log


batch_strategy = st.tuples(
    st.sampled_from([0.25, 0.5, 1.0, 2.5]),  # seconds since the batch before
    st.lists(st.integers(0, 6), min_size=4, max_size=4),  # records read, per partition
    st.sampled_from([None, None, "after_write", "after_checkpoint"]),  # the driver dies there
)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(2, 4),
    st.sampled_from([0.0, 0.5, 1.0, 3.0]),
    st.lists(
        st.lists(st.tuples(st.integers(0, 4), st.integers(1, 3), st.booleans()), max_size=30),
        min_size=3,
        max_size=3,
    ),
    st.lists(batch_strategy, min_size=1, max_size=40),
    st.sampled_from([1 << 20, 1 << 20, 372, 330]),  # full, or leading, or offsets only
)
def test_a_partition_without_markers_does_not_make_the_others_replay(
    partitions: int,
    frequency: float,
    segments: list[list[tuple[int, int, bool]]],
    batches: list[tuple[float, list[int], str | None]],
    budget: int,
) -> None:
    # Partition 0 never sends a marker: the high-water mark stays at the start for the whole
    # run, no marker goes out, and only "every min_checkpoint_frequency" saves the others.
    logs = [build_log([(False, 0)] * 200)] + [marked_log(s) for s in segments[: partitions - 1]]
    sim = Simulation(logs, Cadence(resolved_interval=0.0, checkpoint_frequency=frequency), budget)
    spaced = all(gap >= frequency for gap, _, _ in batches)  # frequency <= the batch spacing
    # per batch: when it read, and per partition the records it read and the rows it emitted
    read: list[tuple[float, Counter[int], Counter[int]]] = []

    def offsets() -> Counter[int]:
        return Counter({sp.partition: sim.frontier[sp].offset or 0 for sp in sim.parts})

    def restart() -> None:
        """The driver dies now; the next run resumes from the durable record and re-reads."""
        assert sim.durable is not None
        at, reached, written, resumed = sim.now, offsets(), sim.durable_progress, sim.durable
        sim.crash()
        replayed, _, level = sim.crashes[-1]
        # the record carries each partition's own offset (and, in full, its resolved time)
        start = decode(resumed).progress(sim.parts)
        for sp in sim.parts:
            if level != "high_water":
                assert start[sp].offset == written[sp].offset, f"{sp}: not its own offset"
            if level == "full":
                assert start[sp].resolved == written[sp].resolved, f"{sp}: not its own time"
            assert decode(resumed).high_water <= start[sp].resolved <= written[sp].resolved
        reread = reached - Counter({sp.partition: start[sp].offset or 0 for sp in sim.parts})
        if level != "high_water":  # offsets kept
            # In general a resume re-reads at most what was read within one
            # min_checkpoint_frequency (and the tick that carries out what fell due between
            # batches); with a record that kept every partition's time, it re-emits at most
            # what those batches emitted (below it, a floor dropped re-sent changes).
            recent = [batch for batch in read if batch[0] >= at - frequency - TICK]
            for p in range(partitions):
                assert reread[p] <= sum(records[p] for _, records, _ in recent), (p, read)
                if spaced:  # every batch was checkpointed but the last
                    assert reread[p] <= read[-1][1][p], f"{p} re-read {reread[p]} > last batch"
                if level == "full":
                    assert replayed[p] <= sum(rows[p] for _, _, rows in recent), (p, read)
                    assert not spaced or replayed[p] <= read[-1][2][p], (p, read)
        read.append((at, reread, Counter(replayed)))  # the resumed run's first batch
        assert sim.decide(), "a record that fitted before does not fit now"

    for gap, counts, crash in batches:
        until = sim.now + gap
        while sim.now + TICK < until:  # the wait loop between batches
            sim.now += TICK
            assert sim.decide()
        sim.now = until
        emitted, reached = dict(sim.emitted), offsets()
        sim.read(dict(enumerate(counts[:partitions])))
        rows = Counter(p for (p, o), n in sim.emitted.items() if n > emitted.get((p, o), 0))
        read.append((sim.now, offsets() - reached, rows))
        if crash == "after_write":  # written, not yet checkpointed
            restart()
            continue
        assert sim.decide()
        if crash == "after_checkpoint":
            restart()
    # a change re-sent upstream below its partition's resolved time is never emitted, even by
    # a run that resumed from a record that kept every partition's resolved time
    if all(level == "full" for _, _, level in sim.crashes):
        resent = [(p, o) for p, o in sim.emitted if logs[p][o].resent]
        assert not resent, f"upstream duplicates emitted again: {resent}"


def test_progress_is_checkpointed_while_the_high_water_mark_stands_still() -> None:
    policy = Policy(Cadence(checkpoint_frequency=5.0))
    policy.checkpointed(ZERO, now=0.0)
    policy.progressed()
    assert not policy.after_batch(ZERO, now=4.0).checkpoint  # at most every 5 s
    assert policy.after_batch(ZERO, now=5.0).checkpoint  # the high-water mark did not move
    policy.checkpointed(ZERO, now=5.0)
    assert not policy.after_batch(ZERO, now=60.0).checkpoint  # no progress: nothing to save


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
    decision = policy.after_batch(Hlc(9 * SECOND), now=1.0)
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
    assert policy.after_batch(Hlc(3 * SECOND), now=10.0) == Decision(record_marker=Hlc(3 * SECOND))


def test_a_high_water_mark_standing_still_past_its_ttl_is_noticed() -> None:
    watch = HighWaterWatch(ttl=10.0)
    assert not watch.stalled(ZERO, 100.0)
    assert not watch.stalled(ZERO, 110.0)
    assert watch.stalled(ZERO, 110.5)
    assert not watch.stalled(Hlc(1), 111.0)  # it moved: counted again from here
    assert not watch.stalled(Hlc(1), 121.0)
    assert watch.stalled(Hlc(1), 121.5)
