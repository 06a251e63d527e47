"""What resolves a changefeed's source partitions, one kind per source format.

A source's resolved times come either **in the stream** (CockroachDB-style markers, canal-json's
WATERMARK events: the executors read them with the rows, and the batch summaries carry them to
the frontier) or **beside it**: Debezium's transaction topic, read on the driver
(:class:`~.transaction_feed.TransactionFeed`). The coordinator talks to either through
:class:`Resolver`, so it never asks which one it has; its set-up picks one
(:func:`~.setup.resolver_of`, from what it opened).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from typing_extensions import override

from schemas.hlc import Hlc

from ..batch import BatchPlan, BatchResult, Deferred
from ..ledger import Frontier


class Resolver(Protocol):
    """The driver's side of what resolves the source partitions."""

    def commit_times(self) -> dict[str, Mapping[str, Hlc]] | None:
        """Per data topic, the commit times of its changes known so far (binlog sources)."""

    def saw(self, result: BatchResult) -> None:
        """What a batch (or scan chunk) read that counts for the resolved times."""

    def advance(self, frontier: Frontier) -> bool:
        """Resolve what can be resolved now into ``frontier``; True if a resolved time rose."""

    def settle(
        self, plan: BatchPlan, rests: list[Deferred], stopping: Callable[[], bool]
    ) -> tuple[BatchPlan, list[Deferred]]:
        """The rests that wait for something only this resolver reads, and the plan with it."""

    def check_snapshot(self, time: Hlc, frontier: Frontier) -> None:
        """After the initial scan at ``time``: raise if the snapshot may lack a change."""

    def quiet(self) -> bool:
        """True when nothing waits to resolve: a standing high-water mark is a quiet source."""

    def records(self) -> dict[str, dict[str, Any]] | None:
        """The state the checkpoint record keeps (None: nothing)."""

    def warnings(self) -> list[str]:
        """What cannot resolve, for the job status."""

    def stuck_topics(self) -> tuple[Mapping[str, str], list[str]]:
        """(what cannot complete per topic, every topic watched), for the metrics."""

    def waiting_for(self) -> Mapping[str, str]:
        """Per source topic, what its markers wait for now (the job status's partitions)."""

    def appeared(self) -> set[str]:
        """The topics of a whole database's tables created since the run started, not read."""

    def close(self) -> None:
        """Release what it reads with."""


class InStream(Resolver):
    """Markers come in the stream itself: the driver has nothing to read or wait for."""

    @override
    def commit_times(self) -> None:
        return None

    @override
    def saw(self, result: BatchResult) -> None:
        pass

    @override
    def advance(self, frontier: Frontier) -> bool:
        return False

    @override
    def settle(
        self, plan: BatchPlan, rests: list[Deferred], stopping: Callable[[], bool]
    ) -> tuple[BatchPlan, list[Deferred]]:
        return plan, []

    @override
    def check_snapshot(self, time: Hlc, frontier: Frontier) -> None:
        pass

    @override
    def quiet(self) -> bool:
        return False  # nothing tells a quiet source from a stalled one

    @override
    def records(self) -> None:
        return None

    @override
    def warnings(self) -> list[str]:
        return []

    @override
    def stuck_topics(self) -> tuple[Mapping[str, str], list[str]]:
        return {}, []

    @override
    def waiting_for(self) -> Mapping[str, str]:
        return {}

    @override
    def appeared(self) -> set[str]:
        return set()

    @override
    def close(self) -> None:
        pass
