"""Checks of whole-database changefeeds (``databases:``) on what users read, shared by tests."""

from __future__ import annotations

import json
import time
from typing import Any

from pipeline.core.coordinator import changefeed as coordinator
from tests.support.kafka import Message
from tests.support.validator import hlc_order


def wait_for(what: str, done: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(1.0)


def rows(messages: list[Message]) -> list[tuple[str, dict[str, Any] | None]]:
    out = []
    for m in messages:
        if m.key is not None and m.value is not None:
            value = json.loads(m.value)
            out.append((value["updated"], value["after"]))
    return sorted(out, key=lambda r: hlc_order(r[0]))


def markers_never_passed_a_row(outputs: dict[str, list[Message]]) -> None:
    """No row at or below a marker the brokers took before it, on any output topic."""
    markers = [
        (m.timestamp_ms, hlc_order(json.loads(m.value or b"")["resolved"]))
        for messages in outputs.values()
        for m in messages
        if m.key is None
    ]
    for topic, messages in outputs.items():
        for m in messages:
            if m.key is None:
                continue
            time_ = hlc_order(json.loads(m.value or b"")["updated"])
            passed = [r for at, r in markers if at < m.timestamp_ms and r >= time_]
            assert not passed, f"{topic}@{m.offset}: a marker at {passed[0]} came first"


def slow_restart(monkeypatch: Any, seconds: float) -> None:
    """The run ends ``seconds`` after it first meets the new table, not at once.

    Meanwhile its batches and markers go on: the window in which a marker could pass the new
    table's changes, were its transactions not held (the mutation that leaves the new table
    uncounted fails this test: its markers pass them, or its floor drops them).
    """
    first: list[float] = []
    real = coordinator.met_tables

    def later(config: Any, resolver: Any) -> set[str]:
        if not resolver.appeared():
            return set()
        first.append(first[0] if first else time.monotonic())
        return real(config, resolver) if time.monotonic() - first[0] >= seconds else set()

    monkeypatch.setattr(coordinator, "met_tables", later)
