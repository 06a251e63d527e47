"""Runs TxnCost.java against a fresh embedded broker (docs/benchmarks.md, session 46).

    .venv/bin/python scripts/txn_cost/run.py shared,fresh,kept 5 10

(modes, rounds, the producers' retry.backoff.ms).
"""

import glob
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from pipeline.dev.broker import EmbeddedKafka
from sinks.admin import ensure_topics

ROOT = Path(__file__).resolve().parents[2]
SPARK_JARS = Path(pyspark.__file__).parent / "jars"
LIBRARIES = ("slf4j-api", "lz4", "snappy", "zstd")  # what kafka-clients needs beside it

modes, rounds, backoff = sys.argv[1:4]
classpath = [*glob.glob(str(ROOT / ".jars/spark/kafka-clients-*.jar"))]
classpath += [str(j) for j in SPARK_JARS.glob("*.jar") if j.name.startswith(LIBRARIES)]
with tempfile.TemporaryDirectory() as scratch:
    broker = EmbeddedKafka(scratch)
    info = broker.start()
    try:
        ensure_topics({"bootstrap.servers": info.bootstrap_servers}, {"out": 3, "warm": 3})
        java = Path(__file__).with_name("TxnCost.java")
        command = ["java", "-cp", ":".join(classpath), str(java), info.bootstrap_servers]
        subprocess.run([*command, str(info.pid), modes, rounds, backoff], check=True)
    finally:
        broker.stop()
