"""A TiCDC schema's tables created while the changefeed runs, found by listing the topics.

A ``databases`` entry of format canal-json (``pipeline/config/databases.py``) follows every
table of one TiDB schema, those created later too. TiCDC has no transaction topic that could
name a new table before its changes; what it does give is an order: it creates a table's
topic (the ``CREATE TABLE`` written to it) before any watermark passes the table's first
change, since its watermarks only pass a DDL once the DDL is written. So a resolved time the
run read from the watermarks is safe to send once the topics, **listed after** those
watermarks were read, hold no followed table the run does not read.

:class:`Listed` wraps the run's resolver: each time the frontier's high-water mark rose past
the last one cleared, it lists the source cluster's topics; none new, that mark is cleared;
one new, the run has met a table (:meth:`Listed.appeared`: it ends, and the next one reads
the table's topic from its start, ``coordinator/start.py``), and nothing it read since
counts. The frontier is held at the last mark cleared (:meth:`Frontier.hold`), so no marker
ever passes an uncleared one: not while the listing is slow, failed, or found a table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from typing_extensions import override

from pipeline.config import ChangefeedConfig
from schemas.errors import SourceError
from schemas.hlc import Hlc

from ..batch import BatchPlan, BatchResult, Deferred, faults
from ..ledger import Frontier
from .resolvers import Resolver

log = logging.getLogger(__name__)

Lister = Callable[[], Iterable[str]]  # the source cluster's topics, now


class Listed(Resolver):
    """``inner``, its frontier held where the topics were last listed without a new table."""

    def __init__(
        self, inner: Resolver, config: ChangefeedConfig, lister: Lister, frontier: Frontier
    ) -> None:
        self.inner = inner
        self._databases = [d for d in config.databases if d.format == "canal-json"]
        self._read = set(config.routes)
        self._lister = lister
        self._cleared = frontier.high_water()  # the run's start: cleared by the run before
        self._found: set[str] = set()
        frontier.hold(self._cleared)

    @classmethod
    def around(
        cls, inner: Resolver, config: ChangefeedConfig, lister: Lister, frontier: Frontier
    ) -> Resolver:
        """``inner`` wrapped where ``config`` follows a TiCDC schema; else ``inner`` itself."""
        if not any(d.format == "canal-json" for d in config.databases):
            return inner
        return cls(inner, config, lister, frontier)

    def new_topics(self) -> set[str]:
        """The followed tables' topics listed now that the run does not read."""
        listed = set(self._lister()) - self._read
        return {t for t in listed if any(d.takes(t) for d in self._databases)}

    @override
    def advance(self, frontier: Frontier) -> bool:
        rose = self.inner.advance(frontier)
        frontier.hold(None)
        high = frontier.high_water()  # as the partitions' watermarks have it
        if not self._found and high > self._cleared:
            try:
                self._found = self.new_topics()
            except Exception as exc:  # the markers wait for the next listing
                log.warning("cannot list the source topics (markers wait): %s", exc)
            else:
                if self._found:
                    log.info("table topic(s) %s created: held at %s", self._found, self._cleared)
                    faults.reached("table_listed")
                else:
                    self._cleared = high
        frontier.hold(self._cleared)
        return rose

    @override
    def check_snapshot(self, time: Hlc, frontier: Frontier) -> None:
        self.inner.check_snapshot(time, frontier)
        found = self.new_topics()
        if found:  # created between the start's listing and the snapshot's time
            raise SourceError(
                f"table topic(s) {', '.join(sorted(found))} were created while the changefeed "
                "took its snapshot, which may lack their changes: start it again"
            )

    @override
    def appeared(self) -> set[str]:
        return self.inner.appeared() | self._found

    # -- the rest is the inner resolver's ---------------------------------------------------

    @override
    def commit_times(self) -> dict[str, Mapping[str, Hlc]] | None:
        return self.inner.commit_times()

    @override
    def saw(self, result: BatchResult) -> None:
        self.inner.saw(result)

    @override
    def settle(
        self, plan: BatchPlan, rests: list[Deferred], stopping: Callable[[], bool]
    ) -> tuple[BatchPlan, list[Deferred]]:
        return self.inner.settle(plan, rests, stopping)

    @override
    def quiet(self) -> bool:
        return self.inner.quiet()

    @override
    def records(self) -> dict[str, dict[str, Any]] | None:
        return self.inner.records()

    @override
    def warnings(self) -> list[str]:
        return self.inner.warnings()

    @override
    def stuck_topics(self) -> tuple[Mapping[str, str], list[str]]:
        return self.inner.stuck_topics()

    @override
    def waiting_for(self) -> Mapping[str, str]:
        return self.inner.waiting_for()

    @override
    def close(self) -> None:
        self.inner.close()
