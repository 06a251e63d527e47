"""The driver's crash points (``pipeline/core/batch/faults.py``): which kill, and what it records.

The kill itself is replaced (a test must not SIGKILL its own process group); the integration
tests (``run_killed_at``) show real ones landing, the executor's points in Java included.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipeline.core.batch import faults


@pytest.fixture
def kills(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """The process groups ``faults`` would have SIGKILLed; the crash record in ``tmp_path``."""
    killed: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda group, _signal: killed.append(group))
    monkeypatch.setattr(faults, "_COUNTS", {})
    monkeypatch.setenv("HIGHWATER_CRASH_LOG", str(tmp_path / "crashes"))
    return killed


def test_the_nth_reach_of_the_point_records_and_kills(
    kills: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HIGHWATER_CRASH_AT", "after_write:2")
    faults.reached("before_marker")
    faults.reached("after_write")
    assert kills == []
    faults.reached("after_write")
    assert len(kills) == 1
    assert (tmp_path / "crashes").read_text() == "crash point after_write:2: SIGKILL\n"
    faults.reached("after_write")
    assert len(kills) == 1


@pytest.mark.parametrize("point", ["in_transaction", "piece_committed"])
def test_the_executors_points_are_accepted_and_never_reached_here(
    kills: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, point: str
) -> None:
    """``CrashPoints.java`` reaches them in the executor; the driver runs on untouched."""
    monkeypatch.setenv("HIGHWATER_CRASH_AT", f"{point}:1")
    for reached in (point, "during_write", "after_write"):
        faults.reached(reached)
    assert kills == []
    assert not (tmp_path / "crashes").exists()


def test_an_unknown_point_is_refused(kills: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIGHWATER_CRASH_AT", "in_transation:1")
    with pytest.raises(ValueError, match="unknown point 'in_transation'"):
        faults.reached("after_write")
    assert kills == []
