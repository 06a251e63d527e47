"""Iceberg tables a changefeed is applied to across kills, and the checks that they hold.

``python -m tests.support.iceberg`` is :func:`applier_process` (the kill tests' applier).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from highwater_consumer import ChangefeedConsumer, Output
from highwater_consumer.iceberg import CutError, IcebergApplier, cut, load
from highwater_consumer.iceberg.cuts import COMPACTED, applied, tables_of
from schemas.hlc import Hlc
from tests.support.process import ROOT


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


def cli(
    bootstrap: str,
    changefeed: str,
    catalog: Mapping[str, str],
    namespace: str,
    *more: str,
    entry: str = "highwater_consumer",
) -> list[str]:
    """The ``highwater apply --catalog`` command line of a changefeed into ``namespace``.

    ``entry``: the module run (``pipeline.cli``: Highwater's own, which has ``--engine spark``).
    """
    return [
        sys.executable,
        "-m",
        entry,
        "-v",
        "apply",
        changefeed,
        "--bootstrap-servers",
        bootstrap,
        *(f"--catalog={key}={value}" for key, value in catalog.items()),
        "--namespace",
        namespace,
        *more,
    ]


def applier_process(  # noqa: PLR0917 - the command line's arguments
    bootstrap: str, changefeed: str, catalog: str, namespace: str, group: str, after: int
) -> None:
    """Applies ``after`` windows, then dies (SIGKILL) between the next window's first two tables.

    ``catalog``: its properties as JSON. ``after`` below 0: applies on until killed. Reads a
    few records at a time: the output is all there already, and a consumer reading it whole
    would make it one window.
    """
    # small fetches: the partitions' records interleave as they would arriving live, so the
    # frontier rises marker by marker (one partition read ahead would make few windows)
    small = {"max.partition.fetch.bytes": 4096}
    output = Output.of_changefeed(bootstrap, changefeed, kafka=small)
    properties = json.loads(catalog)
    applier = IcebergApplier(properties, changefeed, namespace=namespace, schemas=output.schemas)
    windows = 0
    first = min(output.topics.values())  # the applier commits the tables in name order

    def reached(step: str) -> None:
        if 0 <= after <= windows and step == f"committed {first}":
            os.kill(os.getpid(), signal.SIGKILL)

    applier.reached = reached
    start = applier.start(output.topics.values())
    with ChangefeedConsumer(output, group, after=start, batch=60) as consumer:
        for window in consumer.windows(idle=30):
            applier.apply(window)
            if window.last:
                consumer.ack(window)
                windows += 1
    raise AssertionError("the applier ran out of windows before its crash")


@dataclass(frozen=True)
class Killed:
    """An applier's run across kills: the window torn between two tables, the kills landed."""

    torn: Hlc
    before: Hlc  # the complete cut the torn window's kill left as the latest
    kills: int


def apply_across_kills(  # noqa: PLR0917 - one run's parts
    bootstrap: str,
    changefeed: str,
    catalog: Mapping[str, str],
    namespace: str,
    log: Path,
    rnd: random.Random,
    *until: str,
) -> Killed:
    """The output applied to ``catalog`` across kills, then to its end (``until``: CLI options).

    1. an applier process SIGKILLed between two tables' commits of its second window (the
       cut before it stays the latest complete one; the torn window is in one table only).
       The second, not a later one: a Debezium chain's output may hold few windows (markers
       wait while a transaction is incomplete: one run under make test had 3 and the final);
    2. two applier processes SIGKILLed at random moments;
    3. ``highwater apply`` (the CLI) to the end, in the same consumer group.
    """
    group = f"highwater-apply-{changefeed}-{uuid.uuid4().hex[:8]}"
    here = [sys.executable, "-m", __name__, bootstrap, changefeed, json.dumps(dict(catalog))]
    crash = [*here, namespace, group]
    died = subprocess.run([*crash, "1"], cwd=ROOT, capture_output=True, timeout=300, check=False)
    assert died.returncode == -signal.SIGKILL, died.stderr.decode(errors="replace")[-3000:]
    loaded = load(catalog)
    held = {
        n: [r for r, _ in applied(t, changefeed)]
        for n, t in tables_of(loaded, namespace, changefeed).items()
    }
    names = sorted(held)
    torn = held[names[0]][-1]  # the window the kill tore: the first table holds it
    assert all(torn not in held[n] for n in names[1:]), held
    before = cut(loaded, namespace, changefeed)
    assert before.resolved < torn
    with pytest.raises(CutError, match=f"{names[-1]} hold no snapshot"):
        cut(loaded, namespace, changefeed, torn)
    kills = 0
    for _ in range(2):
        with log.open("ab") as out:
            process = subprocess.Popen(
                [*crash, "-1"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )
        time.sleep(rnd.uniform(3.0, 6.0))  # its start takes ~2 s; windows come every ~0.1 s
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait()
    with log.open("ab") as out:
        done = subprocess.run(
            cli(bootstrap, changefeed, catalog, namespace, "--group", group, *until),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )
    assert done.returncode == 0, log.read_text(errors="replace")[-3000:]
    return Killed(torn, before.resolved, kills)


def row_differences(where: str, want: Mapping[Any, Any], have: Mapping[Any, Any]) -> list[str]:
    """How a table's rows by key (``have``) differ from ``want``; ``where``: table and cut."""
    out = [f"{where}: missing {k}" for k in want.keys() - have.keys()]
    out += [f"{where}: not deleted {k}" for k in have.keys() - want.keys()]
    same = want.keys() & have.keys()
    return out + [f"{where}: {k}: {have[k]} != {want[k]}" for k in same if have[k] != want[k]]


def complete_cuts(catalog: Any, namespace: str, changefeed: str) -> list[Hlc]:
    """Every R every table holds, in order."""
    tables = tables_of(catalog, namespace, changefeed)
    held = [{r for r, _ in applied(t, changefeed)} for t in tables.values()]
    return sorted(set.intersection(*held))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    applier_process(*sys.argv[1:6], int(sys.argv[6]))
