"""A batch's rows in rounds (``coordinator/rounds.py``): the writer never calls back.

The writer returns its first pass with the rests a partition left; the driver settles them
(the resolver's transaction ENDs, the schema evolution's new shapes) and hands the writer
those that can run, round by round, until none is left or none can run. Written against
fakes of the writer, resolver and schema evolution: the rounds, the plans, the counted
Kafka transactions and what the frontier ends at are what the coordinator then relies on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pipeline.config import parse_config
from pipeline.core.batch import BatchPlan, BatchResult, Deferred, PartitionSeen, Settled
from pipeline.core.batch.jvm import KafkaTransactions
from pipeline.core.coordinator.rounds import Rounds
from pipeline.core.ledger import Frontier, SourcePartition
from schemas.hlc import Hlc

pytestmark = pytest.mark.unit

P0, P1 = SourcePartition("src", 0), SourcePartition("src", 1)


def seen(sp: SourcePartition, next_offset: int, *, rest: tuple[int, str] | None = None) -> Any:
    """A partition's summary; ``rest``: (from offset, transaction) left for that END."""
    deferred = None if rest is None else [rest[0], next_offset, "1.0000000000", rest[1]]
    return PartitionSeen(sp, next_offset, Hlc(5, 0), emitted=1, deferred=deferred)


@dataclass
class FakeWriter:
    """Passes as given: the first pass leaves P1's rest; each round writes what it is handed."""

    first: BatchResult
    config: Any = None
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def write(self, batch: Any, batch_id: int, plan: BatchPlan) -> BatchResult:
        self.calls.append(("write", plan))
        return self.first

    def again(
        self, spark: Any, batch_id: int, settled: Settled, result: BatchResult, round_: int
    ) -> BatchResult:
        self.calls.append(("again", (settled.plan, [r.partition for r in settled.run], round_)))
        more = BatchResult.of([seen(r.partition, r.stop) for r in settled.run])
        return result.with_rests(more.counted(KafkaTransactions(1, 0)), settled.later)


@dataclass
class FakeResolver:
    """Has read the END of the transaction a rest waits for (``ended``), or never will."""

    ended: bool
    asked: int = 0
    saw_results: list[BatchResult] = field(default_factory=list)

    def commit_times(self) -> dict[str, dict[str, Hlc]]:
        return {}

    def settle(
        self, plan: BatchPlan, rests: list[Deferred], stopping: Any
    ) -> tuple[BatchPlan, list[Deferred]]:
        self.asked += 1
        if not self.ended:
            return plan, []
        ended = replace(plan, commits={"src": {"tx-1": Hlc(4, 0)}})
        return ended, [r for r in rests if r.waits_for]

    def saw(self, result: BatchResult) -> None:
        self.saw_results.append(result)

    def advance(self, frontier: Frontier) -> bool:
        return False


class FakeSchemas:
    """No schema changes: nothing evolves, nothing is emitted again."""

    encoders: dict[str, Any] = {}  # noqa: RUF012 - a fake's constant

    def settle(self, plan: BatchPlan, rests: list[Deferred]) -> Settled:
        return Settled(plan, [])

    def take_rescans(self) -> list[Any]:
        return []


class FakeObservers:
    def schemas(self, evolution: Any) -> None:
        pass


class FakeBatch:
    sparkSession = None


CONFIG = parse_config(
    {
        "changefeed_id": "rounds",
        "kafka": {"bootstrap_servers": "127.0.0.1:9092"},
        "sources": [{"topic": "src", "table": "t"}],
    },
    env={},
)


def rounds(writer: FakeWriter, resolver: FakeResolver) -> Rounds:
    return Rounds(
        config=CONFIG,
        writer=writer,  # type: ignore[arg-type]
        resolver=resolver,  # type: ignore[arg-type]
        schemas=FakeSchemas(),  # type: ignore[arg-type]
        observers=FakeObservers(),  # type: ignore[arg-type]
        rescan=lambda rescan, result: None,
        stopping=lambda: False,
    )


def test_a_rest_runs_once_the_resolver_has_its_end_and_the_frontier_moves_past_it() -> None:
    first = BatchResult.of([seen(P0, 10), seen(P1, 8, rest=(6, "tx-1"))]).counted(
        KafkaTransactions(2, 0)
    )
    writer, resolver = FakeWriter(first), FakeResolver(ended=True)
    frontier = Frontier([P0, P1])

    result, _ = rounds(writer, resolver).write(FakeBatch(), 7, frontier, None)

    kinds = [kind for kind, _ in writer.calls]
    assert kinds == ["write", "again"]  # one round: the rest, once its END was read
    plan, again, round_ = writer.calls[1][1]
    assert (again, round_) == ([P1], 1)
    assert plan.commits == {"src": {"tx-1": Hlc(4, 0)}}  # the rest runs with the END's time
    assert result.rests == []
    assert (result.committed, result.aborted) == (3, 0)  # both passes' transactions
    assert (frontier[P0].offset, frontier[P1].offset) == (10, 8)
    assert resolver.saw_results == [result]


def test_a_rest_whose_end_never_comes_stays_in_the_result() -> None:
    first = BatchResult.of([seen(P0, 10), seen(P1, 8, rest=(6, "tx-1"))])
    writer, resolver = FakeWriter(first), FakeResolver(ended=False)
    frontier = Frontier([P0, P1])

    result, _ = rounds(writer, resolver).write(FakeBatch(), 7, frontier, None)

    assert [kind for kind, _ in writer.calls] == ["write"]
    assert [rest.partition for rest in result.rests] == [P1]
    assert resolver.asked == 1  # asked once; nothing to run: the batch ends there
