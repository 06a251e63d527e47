"""A class-data-sharing archive of Spark's classes for the suite's Spark JVMs.

Every Spark JVM the suite starts (the in-process session, each ``spark-submit`` a test runs)
loads and verifies the same thousands of Spark classes. A dynamic CDS archive (JDK 13+,
``-XX:ArchiveClassesAtExit``) holds them parsed and verified, once per machine: a small Spark
job took 12.7 CPU s without it and 7.9-8.4 with it (wall 10.8 -> 6.7 s), on two cores where
the suite is CPU-bound (97 % busy with a third pytest worker, docs/benchmarks.md). Semantics
are the JVM's either way; benchmarks and users keep Spark's defaults.

The archive is made by the first pytest process of a machine (the xdist controller, before its
workers start) under ``.jars/cds/``, named by the JDK and pyspark it was made with. A JVM
that cannot use it (another JDK, another class path) starts without it, silently
(``-Xlog:cds=off``): slower, never different.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.process import ROOT

FOLDER = ROOT / ".jars" / "cds"
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM that cannot use the archive says nothing

# What the archive is made from: a session as the suite's are (local, SQL, Python rows, Arrow)
_JOB = """
from pyspark.sql import SparkSession, functions as f
spark = SparkSession.builder.master("local[2]").appName("cds").getOrCreate()
frame = spark.range(1000).withColumn("k", f.col("id") % 7)
frame.groupBy("k").agg(f.sum("id")).collect()
frame.rdd.map(lambda r: r.id).sum()
frame.mapInArrow(lambda batches: batches, frame.schema).count()
spark.stop()
"""


@functools.cache
def archive() -> Path:
    """Where this machine's archive is: named by the JDK and pyspark that make and use it."""
    import pyspark  # noqa: PLC0415 - only when asked

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    tag = hashlib.sha256(f"{java.stderr}{pyspark.__version__}".encode()).hexdigest()[:12]
    return FOLDER / f"spark-{pyspark.__version__}-{tag}.jsa"


def _spark_submit() -> str:
    return str(Path(sys.executable).parent / "spark-submit")


def make(path: Path) -> bool:
    """Make the archive at ``path`` by running a small Spark job; False if that failed."""
    import pyspark  # noqa: PLC0415 - only when asked

    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="highwater-cds-") as scratch:
        job = Path(scratch) / "job.py"
        job.write_text(_JOB, encoding="utf-8")
        partial = Path(scratch) / path.name
        env = {
            **os.environ,
            "SPARK_HOME": str(Path(pyspark.__file__).parent),  # whichever python3 is on PATH
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_SUBMIT_OPTS": f"-XX:TieredStopAtLevel=1 -XX:ArchiveClassesAtExit={partial}",
        }
        done = subprocess.run(
            [_spark_submit(), str(job)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0 or not partial.is_file():
            return False
        partial.replace(path)  # whole or not there: a worker never reads half an archive
    return True


def options(*, build: bool) -> str:
    """The JVM options that use the archive ('' when there is none); ``build``: make it first."""
    try:
        path = archive()
        if build and not path.is_file():
            make(path)
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.is_file() else ""
