"""The Debezium chain on to Iceberg: a checked changefeed output applied across kills.

After :func:`tests.support.debezium_chaos.check` has held the output to Debezium's events and
the final ``SELECT``, :func:`apply_and_check` applies it to the embedded Iceberg catalog with
``highwater apply`` (its tables made from the schemas the changefeed derived from Debezium's
and published in its job status; none is declared), SIGKILLed between two tables' commits and
at random moments (:func:`tests.support.iceberg.apply_across_kills`), and checks:

* every table's commits are once per window (none twice, none lost);
* every complete cut read back with pyiceberg equals the output's story at its R: per key the
  last version at or below R (each ``(key, updated)`` once), value for value as text;
* the latest cut equals the database's final ``SELECT`` (but for the rows deleted while
  Debezium snapshotted again, as the output check leaves them out).

:func:`negative_control`: the cut comparison fails against an output that lost a version.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from highwater_consumer.iceberg import NAMESPACE, cut, load
from tests.support.debezium_chaos import SEED, Run, Upstream, _vanished
from tests.support.iceberg import apply_across_kills, complete_cuts, exactly_once_problems
from tests.support.kafka import Message
from tests.support.validator import exact, hlc_order

Rows = dict[str, str]  # a key's text ("[1]") -> the row's columns as psql prints them


def apply_and_check(upstream: Upstream, result: Run, bootstrap: str, tmp_path: Path) -> None:
    """Apply ``result``'s output to Iceberg across kills; every cut the output's story."""
    catalog = {"warehouse": str(tmp_path / "iceberg")}
    killed = apply_across_kills(
        bootstrap,
        result.changefeed_id,
        catalog,
        NAMESPACE,
        tmp_path / "apply.log",
        random.Random(SEED),
        "--idle",
        "10",
    )
    loaded = load(catalog)
    assert exactly_once_problems(loaded, NAMESPACE, result.changefeed_id) == []
    cuts = complete_cuts(loaded, NAMESPACE, result.changefeed_id)
    assert killed.torn in cuts, "the window torn between two tables was finished"
    step = max(1, len(cuts) // 20)
    for resolved in sorted({*cuts[::step], killed.before, killed.torn, cuts[-1]}):
        tables = read_cut(loaded, upstream, result.changefeed_id, resolved)
        for table, messages in result.outputs.items():
            want = story_at(upstream, table, messages, hlc_order(str(resolved)))
            assert tables[table] == want, differences(table, resolved, tables[table], want)
    last = read_cut(loaded, upstream, result.changefeed_id, None)
    for table in upstream.selects:
        vanished = _vanished(upstream, result.written[table])
        kept = sorted(row for key, row in last[table].items() if key not in vanished)
        assert kept == sorted(result.final[table].splitlines()), table
    negative_control(loaded, upstream, result, cuts)
    print(
        f"seed {SEED}: applied to Iceberg across {killed.kills + 1} applier kills (one between "
        f"two tables at {killed.torn}): {len(cuts)} complete cuts, every "
        f"{step} and the torn one compared with the output, the last with the final SELECT"
    )


def read_cut(catalog: Any, upstream: Upstream, changefeed: str, at: Any) -> dict[str, Rows]:
    """Each table at the cut ``at`` (None: the latest), keyed and printed as the output is."""
    found = cut(catalog, NAMESPACE, changefeed, at)
    out = {}
    for table, (_, columns) in upstream.selects.items():
        rows = found.scan(catalog, table).to_arrow().to_pylist()
        out[table] = {
            f"[{row[columns[0]]}]": upstream.separator.join(
                upstream.text(row[c], c) for c in columns
            )
            for row in rows
        }
    return out


def story_at(
    upstream: Upstream, table: str, messages: list[Message], resolved: tuple[int, int]
) -> Rows:
    """The table the output rebuilds at ``resolved``: per key its last version at or below."""
    columns = upstream.selects[table][1]
    last: dict[str, tuple[tuple[int, int], Mapping[str, Any] | None]] = {}
    for m in messages:
        if m.key is None or m.value is None:
            continue
        body = exact(m.value)
        updated = hlc_order(body["updated"])
        key = m.key.decode()
        if updated <= resolved and (key not in last or last[key][0] < updated):
            last[key] = (updated, body["after"])
    return {
        key: upstream.separator.join(upstream.text(after.get(c), c) for c in columns)
        for key, (_, after) in last.items()
        if after is not None
    }


def differences(table: str, resolved: Any, have: Rows, want: Rows) -> str:
    """What a table at a cut lacks, has too many of, or holds otherwise (a few of each)."""
    missing = sorted(want.keys() - have.keys())[:5]
    extra = sorted(have.keys() - want.keys())[:5]
    other = [(k, have[k], want[k]) for k in sorted(want.keys() & have.keys()) if have[k] != want[k]]
    return f"{table} at {resolved}: missing {missing}, not deleted {extra}, differ {other[:5]}"


def negative_control(catalog: Any, upstream: Upstream, result: Run, cuts: list[Any]) -> None:
    """The cut comparison fails on the applied tables against an output that lost a version.

    The last row version of the busiest table is taken out of its output: the story at the
    latest cut no longer matches what the table holds.
    """
    table = max(result.outputs, key=lambda t: len(result.outputs[t]))
    lost = [m for m in result.outputs[table] if m.key is not None][-1]
    broken = [m for m in result.outputs[table] if m is not lost]
    have = read_cut(catalog, upstream, result.changefeed_id, cuts[-1])[table]
    want = story_at(upstream, table, broken, hlc_order(str(cuts[-1])))
    with pytest.raises(AssertionError, match=f"{table} at "):
        assert have == want, differences(table, cuts[-1], have, want)
