"""Seconds per test file from pytest's ``--durations=0`` report, as ``tests/durations.json``.

    python -m tests.support.durations RUN.log > tests/durations.json

(``make durations`` runs the suite and writes it.) The suite's conftest orders files longest
first from it, so its workers end together.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

_LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+([^:\s]+)::")


def seconds_per_file(report: str) -> dict[str, int]:
    """Each file's setup, call and teardown seconds summed, the longest first."""
    files: Counter[str] = Counter()
    for line in report.splitlines():
        found = _LINE.match(line)
        if found:
            files[found.group(2)] += float(found.group(1))
    return {path: round(seconds) for path, seconds in files.most_common()}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as log:
        json.dump(seconds_per_file(log.read()), sys.stdout, indent=0)
    sys.stdout.write("\n")
