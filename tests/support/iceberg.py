"""Checks of Iceberg tables a changefeed was applied to: exactly once, and cuts that hold."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from highwater_consumer.iceberg import load
from highwater_consumer.iceberg.cuts import COMPACTED, applied, tables_of
from schemas.hlc import Hlc


def exactly_once_problems(catalog: Any, namespace: str, changefeed: str) -> list[str]:
    """How the tables' commits differ from once per window each, in R order (empty: none).

    A window applied twice to a table shows as its R in two snapshots; a window lost in a
    table as an R the other tables hold and it does not; one applied out of order as an R
    below the one before it. A compaction's snapshot (R's rows again, ``highwater.compacted``)
    is no window applied: it counts for what a table holds, not as a second commit of R.
    """
    sequences, holds = {}, {}
    for name, table in tables_of(catalog, namespace, changefeed).items():
        compacted = {
            s.snapshot_id for s in table.snapshots() if s.summary and s.summary.get(COMPACTED)
        }
        found = applied(table, changefeed)
        sequences[name] = [r for r, snapshot in found if snapshot not in compacted]
        holds[name] = {r for r, _ in found}
    problems = []
    every: set[Hlc] = set().union(*holds.values()) if holds else set()
    for name, sequence in sorted(sequences.items()):
        twice = sorted(r for r, n in Counter(sequence).items() if n > 1)
        problems += [f"{name}: window {r} applied twice" for r in twice]
        backwards = [b for a, b in pairwise(sequence) if b <= a]
        problems += [f"{name}: window {r} after a later one" for r in backwards]
        problems += [f"{name}: window {r} lost" for r in sorted(every - holds[name])]
    return problems


def empty(properties: Mapping[str, str]) -> None:
    """Drop every table and namespace of the catalog (a shared test catalog between tests)."""
    catalog = load(properties)
    for namespace in catalog.list_namespaces():
        for table in catalog.list_tables(namespace):
            catalog.drop_table(table)
        catalog.drop_namespace(namespace)
