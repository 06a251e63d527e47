"""The suite's Spark JVMs start from the class-data archive (tests/support/spark_cds.py).

A JVM that cannot use the archive starts without it, silently: the suite would only get
slower (a third of a Spark JVM's start-up CPU). This test says so when it happens.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support import spark_cds


def test_the_sessions_jvm_maps_the_archive(spark: Any) -> None:
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "SharedArchiveFile" not in opts:
        pytest.skip(f"SPARK_SUBMIT_OPTS without the archive: {opts!r}")
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    mapped = {
        line.split()[-1]
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
        if line.endswith(".jsa")
    }
    # (a JVM given an archive it cannot use maps none, not even the JDK's own: run with
    # SPARK_SUBMIT_OPTS naming a missing archive, this fails with an empty set)
    assert str(spark_cds.archive()) in mapped, mapped
