"""A CockroachDB-cdctest-style validator of a changefeed's output against its source.

It reads what users read (the output and dead-letter topics, in offset order per partition)
and checks it against what the upstream wrote (``tests/support/workload.py``), with its own
JSON reading (the standard library, every number as its text), not Highwater's:

* **order**: the first emission of each version of a key comes after the first emission of
  every earlier version of that key;
* **resolved**: after a marker R on an output partition, no row at or below R appears on it
  that had not appeared on it before;
* **complete**: every change below the last marker of every output partition was emitted;
* **values**: ``after`` and ``before`` of every row equal the source's, number texts and all
  (``before`` is the key's previous ``after`` by the workload's construction);
* **dead letters**: every bad record is in the dead-letter topic, as it was written.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.support.kafka import Message
from tests.support.workload import SourceChange, Workload


def exact(text: str | bytes) -> Any:
    """JSON with every number as its text (and strings as characters)."""
    return json.loads(text, parse_float=lambda t: ("n", t), parse_int=lambda t: ("n", t))


def hlc_order(text: str) -> tuple[int, int]:
    """A ``<wall>.<logical>`` time as a sortable pair (independent of ``schemas.hlc``)."""
    wall, _, logical = text.partition(".")
    return int(wall), int(logical or 0)


@dataclass
class Report:
    """What the validator found: violations by kind, and counts."""

    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    rows: int = 0
    distinct: int = 0
    duplicates: int = 0
    markers: int = 0

    def fail(self, kind: str, what: str) -> None:
        self.violations[kind].append(what)

    def summary(self) -> str:
        counts = {kind: len(found) for kind, found in self.violations.items()}
        return (
            f"{self.rows} rows ({self.distinct} distinct, {self.duplicates} duplicates), "
            f"{self.markers} markers, violations {counts or 'none'}"
        )


def validate(
    workload: Workload,
    output: list[Message],
    dead: list[Message],
    *,
    exactly_once: bool = False,
    diff: bool = True,
) -> Report:
    """Check ``output`` (rows and markers) and ``dead`` (the DLQ) against ``workload``.

    ``exactly_once``: ``output`` was read with ``isolation.level=read_committed``
    (``consume_all`` reads so) from a changefeed with ``delivery: exactly_once``: any
    ``(key, updated)`` seen twice is a violation (``duplicates``). ``diff``: the changefeed
    writes ``before`` (``encoder.diff``), so every row must carry it.
    """
    report = Report()
    # output keys are the source's key values printed again: compare them as JSON values
    source = {_key(c.key, c.updated): c for c in workload.changes}
    _rows(report, source, output, diff=diff)
    if exactly_once:
        _once(report, output)
    _order(report, output)
    _resolved(report, output)
    _complete(report, workload, output)
    _dead_letters(report, workload, dead)
    return report


def order_and_resolved(output: list[Message]) -> dict[str, list[str]]:
    """Guarantees 2 and 3 alone, for an output whose source no :class:`Workload` describes.

    Per key the first emissions in time order; per partition no new row at or below a
    marker, and markers never going backwards. Returns the violations by kind (none: ``{}``).
    """
    report = Report()
    _order(report, output)
    _resolved(report, output)
    return dict(report.violations)


def duplicates_by_run(output: list[Message], ends: list[dict[int, int]]) -> list[int]:
    """Per run, how many of its rows had already been emitted (by an earlier run, or by itself).

    ``ends``: where each run left each output partition (its next offset), in run order, read
    after it stopped; the rows after the last of them are one more run's (a drain). A row is
    counted by its key and ``updated``, so a restart's replay shows in the run after the kill.
    """
    runs: list[list[Message]] = [[] for _ in range(len(ends) + 1)]
    for m in output:
        if m.key is not None:
            run = next((i for i, end in enumerate(ends) if m.offset < end.get(m.partition, 0)), -1)
            runs[run].append(m)
    seen: set[tuple[str, str]] = set()
    counts = []
    for rows in runs:
        ids = [_row_id(m) for m in rows]
        counts.append(len(ids) - len(set(ids) - seen))
        seen.update(ids)
    return counts


def _key(key: bytes, updated: str) -> tuple[str, str]:
    return json.dumps(exact(key)), updated


def _row_id(m: Message) -> tuple[str, str]:
    return _key(m.key or b"null", json.loads(m.value or b"{}")["updated"])


def _rows(
    report: Report,
    source: dict[tuple[str, str], SourceChange],
    output: list[Message],
    *,
    diff: bool,
) -> None:
    seen: Counter[tuple[str, str]] = Counter()
    for m in output:
        if m.key is None:
            report.markers += 1
            continue
        report.rows += 1
        rid = _row_id(m)
        seen[rid] += 1
        change = source.get(rid)
        if change is None:
            report.fail("values", f"row {rid} was never written upstream")
            continue
        value = exact(m.value or b"null")
        if value["after"] != exact(change.after):
            report.fail("values", f"{rid}: after differs from the source")
        if diff and "before" not in value:
            report.fail("values", f"{rid}: no before (the changefeed writes its diff)")
        elif "before" in value and value["before"] != exact(change.before):
            report.fail("values", f"{rid}: before differs from the source")
    report.distinct = len(seen)
    report.duplicates = sum(seen.values()) - len(seen)


def _once(report: Report, output: list[Message]) -> None:
    seen: Counter[tuple[str, str]] = Counter(_row_id(m) for m in output if m.key is not None)
    for rid, count in sorted(seen.items()):
        if count > 1:
            report.fail("duplicates", f"{rid} emitted {count} times")


def _order(report: Report, output: list[Message]) -> None:
    first: dict[str, list[tuple[int, int]]] = defaultdict(list)
    where: dict[str, list[str]] = defaultdict(list)  # each first emission's time and place
    emitted: set[tuple[str, str]] = set()
    for m in output:
        if m.key is None:
            continue
        key, updated = _row_id(m)
        if (key, updated) not in emitted:
            emitted.add((key, updated))
            first[key].append(hlc_order(updated))
            where[key].append(f"{updated}@{m.partition}:{m.offset}")
    for key, versions in first.items():
        if versions != sorted(versions):
            shown = ", ".join(where[key][:12])
            report.fail("order", f"{key}: first emissions out of order ({shown})")


def _resolved(report: Report, output: list[Message]) -> None:
    by_partition: dict[int, list[Message]] = defaultdict(list)
    for m in output:
        by_partition[m.partition].append(m)
    for partition, messages in by_partition.items():
        resolved: tuple[int, int] | None = None
        seen: set[tuple[str, str]] = set()
        for m in messages:
            if m.key is None:
                ts = hlc_order(json.loads(m.value or b"{}")["resolved"])
                if resolved is not None and ts < resolved:
                    report.fail("resolved", f"partition {partition}: marker went backwards")
                resolved = ts
                continue
            rid = _row_id(m)
            if resolved is not None and hlc_order(rid[1]) <= resolved and rid not in seen:
                report.fail("resolved", f"partition {partition}: {rid} after a marker above it")
            seen.add(rid)


def _complete(report: Report, workload: Workload, output: list[Message]) -> None:
    last: dict[int, tuple[int, int]] = {}
    for m in output:
        if m.key is None:
            last[m.partition] = hlc_order(json.loads(m.value or b"{}")["resolved"])
    if not last:  # every run drains to a marker: without one nothing shows what was resolved
        report.fail("complete", "no marker on any output partition")
        return
    floor = min(last.values())
    emitted = {_row_id(m) for m in output if m.key is not None}
    for change in workload.changes:
        rid = _key(change.key, change.updated)
        if hlc_order(change.updated) <= floor and rid not in emitted:
            report.fail("complete", f"{rid} at or below the last marker was never emitted")


def _dead_letters(report: Report, workload: Workload, dead: list[Message]) -> None:
    got = Counter((m.key, m.value) for m in dead)
    for _, key, value in workload.bad:
        if got[(key, value)] == 0:
            report.fail("dead letters", f"bad record {key!r}: {value[:40]!r} not in the DLQ")
        else:
            got[(key, value)] -= 1
