"""Spark reading Iceberg tables at given snapshots, as a reader would (``VERSION AS OF``).

Run as its own process (``python -m tests.support.iceberg_spark PROPERTIES NS TABLE=ID …``):
a test process's session has no Iceberg runtime on its classpath, and a JVM takes no new
jars. Prints one JSON line per ``TABLE=ID``: ``{"table", "snapshot", "rows"}``, every value as
Spark SQL casts it to a string (an instant in UTC, the session's zone; null as null).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from tests.support.process import ROOT


def read_at(
    properties: Mapping[str, str], namespace: str, snapshots: list[tuple[str, int]]
) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Each (table, snapshot id)'s rows as Spark reads them, from a process of its own."""
    pairs = [f"{table}={snapshot}" for table, snapshot in snapshots]
    command = [sys.executable, "-m", __name__, json.dumps(dict(properties)), namespace, *pairs]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=600, check=False)
    if done.returncode != 0:
        raise AssertionError(done.stderr.decode(errors="replace")[-3000:])
    out = {}
    for line in done.stdout.decode().splitlines():
        if line.startswith("{"):
            found = json.loads(line)
            out[(found["table"], found["snapshot"])] = found["rows"]
    return out


def main(properties: str, namespace: str, pairs: list[str]) -> None:
    from pipeline.iceberg import CATALOG, SparkTarget, iceberg_session  # noqa: PLC0415

    spark = iceberg_session(SparkTarget.of(json.loads(properties), "local[1]"), "read-at")
    try:
        for pair in pairs:
            table, _, snapshot = pair.partition("=")
            name = f"{CATALOG}.`{namespace}`.`{table}`"
            columns = spark.table(name).columns
            shown = ", ".join(f"CAST(`{c}` AS STRING) AS `{c}`" for c in columns)
            query = f"SELECT {shown} FROM {name} VERSION AS OF {int(snapshot)}"
            rows = [r.asDict() for r in spark.sql(query).collect()]
            print(json.dumps({"table": table, "snapshot": int(snapshot), "rows": rows}))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
