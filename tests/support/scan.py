"""What an initial scan must emit, computed from the generator's changes, and checks on output."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from pipeline.dev.generator import Change
from schemas.hlc import Hlc
from tests.support.kafka import Message


def key_bytes(key: tuple[str, int]) -> bytes:
    return json.dumps(list(key), separators=(",", ":")).encode()


@dataclass(frozen=True)
class Expected:
    """The snapshot at ``statement`` (key -> (after, own time)) and every change after it."""

    statement: Hlc
    snapshot: dict[bytes, tuple[dict[str, Any], str]]
    later: dict[bytes, list[tuple[dict[str, Any] | None, str]]]  # per key, commit order


def expected(changes: list[Change], statement: Hlc) -> Expected:
    latest: dict[bytes, Change] = {}
    later: dict[bytes, list[tuple[dict[str, Any] | None, str]]] = defaultdict(list)
    for change in sorted(changes, key=lambda c: c.updated):
        key = key_bytes(change.key)
        if change.updated <= statement:
            latest[key] = change
        else:
            later[key].append((change.after, str(change.updated)))
    snapshot = {key: (c.after, str(c.updated)) for key, c in latest.items() if c.after is not None}
    return Expected(statement, snapshot, dict(later))


def check_output(rows: list[Message], want: Expected, *, exactly_once: bool = True) -> None:
    """The output is the snapshot (one row per live key), then every later change in order.

    With ``exactly_once`` nothing comes twice; otherwise the first emissions are checked.
    """
    statement = str(want.statement)
    per_key: dict[bytes, list[dict[str, Any]]] = defaultdict(list)
    for m in rows:
        per_key[m.key].append(json.loads(m.value))
    snapshot = {}
    for key, values in per_key.items():
        firsts = [v for v in values if v["updated"] == statement]
        if firsts:
            assert values[0]["updated"] == statement, f"{key!r}: a change before its snapshot"
            assert all(v == firsts[0] for v in firsts), f"{key!r}: two different snapshots"
            snapshot[key] = (firsts[0]["after"], firsts[0]["mvcc_timestamp"])
            if exactly_once:
                assert len(firsts) == 1, f"{key!r}: snapshot row emitted {len(firsts)} times"
    assert snapshot == want.snapshot, "the snapshot is not the state at the statement time"
    for key in set(per_key) | set(want.later):
        changes = [(v["after"], v["updated"]) for v in per_key.get(key, [])]
        changes = [c for c in changes if c[1] != statement]
        if not exactly_once:
            first: dict[str, tuple[Any, str]] = {}
            for c in changes:
                first.setdefault(c[1], c)
            changes = list(first.values())
        assert changes == want.later.get(key, []), f"{key!r}: later changes differ"
