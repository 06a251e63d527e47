"""The one place a SparkSession is built.

Locally (tests, ``highwater`` in-process) the session gets its master and the connector jars
from here. Under ``spark-submit`` the JVM already exists with ``--master`` and ``--jars`` from
the command line (``highwater run`` builds it), and only the remaining settings are applied.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import SparkConfig
from pipeline.runtime.jars import spark_jars

SPARK_LOG4J2 = Path(__file__).resolve().parents[1] / "jvm" / "spark-log4j2.properties"

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Settings that suit a changefeed on a small local cluster; `spark.conf` in the YAML wins.
DEFAULT_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.showConsoleProgress": "false",
    # Write to Kafka through the DataSource V2 path: only there does Spark report a batch's
    # observed metrics (Dataset.observe), which the changefeed reads after every write.
    "spark.sql.sources.useV1SourceList": "avro,csv,json,orc,parquet,text",
}


def local_network_conf(master: str) -> dict[str, str]:
    """Keep the driver on loopback when its executors are on this machine.

    Local mode, or a standalone master on 127.0.0.1 (``highwater dev cluster``): nothing
    else needs to reach the driver, and another interface may not be reachable here.
    """
    if not master.startswith(("local", "spark://127.0.0.1:", "spark://localhost:")):
        return {}
    return {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}


def under_spark_submit() -> bool:
    """True when this Python process was launched by ``spark-submit``."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(
    config: SparkConfig, app_name: str, extra_jars: Sequence[Path] = ()
) -> SparkSession:
    """Build (or get) the SparkSession for ``config``, with the Kafka connector on its path.

    ``extra_jars``: more for ``spark.jars`` (Iceberg's runtime, for ``apply --engine spark``).
    """
    from pyspark.sql import SparkSession  # noqa: PLC0415 - keep Spark out of CLI start-up

    builder = SparkSession.builder.appName(config.app_name or app_name)
    if not under_spark_submit():
        if config.master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Python workers (the changefeed's Arrow loop) run this interpreter, with our
        # dependencies, not whatever python3 is first on PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        jars = [*spark_jars(), *extra_jars]  # checks they match the installed pyspark
        # The same driver logging as under spark-submit (pipeline/runtime/submit.py).
        builder = builder.config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={SPARK_LOG4J2}"
        )
        builder = builder.master(config.master).config("spark.jars", ",".join(map(str, jars)))
    conf = {**DEFAULT_CONF, **local_network_conf(config.master), **config.conf}
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
