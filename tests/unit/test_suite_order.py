"""The suite's own scheduling: files longest first, from a full run's durations."""

import json
from pathlib import Path

from tests.support.durations import seconds_per_file

REPORT = """\
============================= slowest durations =============================
205.51s call     tests/integration/test_crash_safety.py::test_kill[a-b]
12.00s setup    tests/integration/test_trust.py::test_one
3.20s call     tests/integration/test_trust.py::test_two
0.50s teardown tests/integration/test_trust.py::test_two
(22 durations < 0.005s hidden.  Use -vv to show these durations.)
"""


def test_a_files_setup_call_and_teardown_are_summed_longest_first() -> None:
    assert list(seconds_per_file(REPORT).items()) == [
        ("tests/integration/test_crash_safety.py", 206),
        ("tests/integration/test_trust.py", 16),
    ]


def test_the_recorded_durations_name_files_that_exist() -> None:
    root = Path(__file__).parents[2]
    timed = json.loads((root / "tests" / "durations.json").read_text(encoding="utf-8"))
    assert timed, "tests/durations.json is empty"
    missing = [path for path in timed if not (root / path).exists()]
    assert not missing, f"make durations: {missing} are gone"
