"""The SparkSession of ``apply --engine spark``: Iceberg's Spark runtime and the target catalog.

The catalog is given as pyiceberg's properties (``--catalog KEY=VALUE``, as for the local
engine); Spark reaches the same catalog through Iceberg's own ``SparkCatalog`` under the name
:data:`CATALOG`: ``type=rest`` with its ``uri`` and ``warehouse``, every other property
(credentials, ``prefix``, ``s3.*`` …) passed on under the same key, which Iceberg's Java and
pyiceberg share for the REST catalog. The embedded SQLite catalog is refused: pyiceberg's
SQL catalog is not one Spark's Iceberg reads (its JDBC catalog keeps other tables), and a
warehouse of local files would not be where a cluster's executors write.

Built through :func:`pipeline.runtime.session.build_session` (the one place a session is
made), with the Iceberg runtime jar beside the Kafka connector's. Off local mode the
executors run the conversion of rows in Python, so our packages go with the session
(``addPyFile``) and ``python_env`` says which interpreter they run, as for a changefeed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from highwater_consumer.decoding import ApplyError
from pipeline.config import SparkConfig
from pipeline.runtime.jars import iceberg_spark_jars
from pipeline.runtime.process import state_dir
from pipeline.runtime.pyenv import packed
from pipeline.runtime.session import build_session
from pipeline.runtime.submit import ENVIRONMENT, executor_python, package_zip

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CATALOG = "target"  # the Spark catalog the applied tables are in: target.<namespace>.<table>
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
_NOT_PASSED = frozenset({"type", "name"})  # pyiceberg's own: the Spark catalog is set here


@dataclass(frozen=True)
class SparkTarget:
    """Where the Spark engine runs and writes: its master and the catalog's Spark settings."""

    master: str
    catalog: Mapping[str, str]  # spark.sql.catalog.target.* (without the prefix)
    python_env: str = "none"  # off local mode: as a changefeed's spark.python_env

    @classmethod
    def of(
        cls, properties: Mapping[str, str], master: str, python_env: str = "none"
    ) -> SparkTarget:
        """The target of pyiceberg's catalog ``properties`` (one Spark cannot reach: refused)."""
        kind = properties.get("type")
        if kind != "rest":
            given = f"type={kind}" if kind else "no type= (the embedded SQLite catalog)"
            raise ApplyError(
                f"--engine spark reaches an Iceberg REST catalog: --catalog type=rest "
                f"--catalog uri=…, not {given}; the embedded catalog is the local engine's"
            )
        if not properties.get("uri"):
            raise ApplyError("--engine spark: the REST catalog needs --catalog uri=…")
        catalog = {
            "type": "rest",
            "cache-enabled": "false",  # another writer's commits (the other engine) seen at once
            **{k: v for k, v in properties.items() if k not in _NOT_PASSED},
        }
        return cls(master, catalog, python_env)

    def conf(self) -> dict[str, str]:
        """The session's settings: the extensions and the catalog."""
        prefix = f"spark.sql.catalog.{CATALOG}"
        conf = {"spark.sql.extensions": EXTENSIONS, prefix: "org.apache.iceberg.spark.SparkCatalog"}
        conf.update({f"{prefix}.{key}": value for key, value in self.catalog.items()})
        if not self.master.startswith("local"):
            conf["spark.pyspark.python"] = executor_python(self.master, self.python_env)
            if self.python_env != "none":  # the environment unpacked in each executor's folder
                env = packed() if self.python_env == "auto" else Path(self.python_env)
                conf["spark.archives"] = f"{env}#{ENVIRONMENT}"
        return conf


def iceberg_session(target: SparkTarget, app_name: str) -> SparkSession:
    """A session on ``target``'s master with Iceberg's runtime and the catalog :data:`CATALOG`."""
    config = SparkConfig(master=target.master, conf=target.conf(), python_env="none")
    session = build_session(config, app_name, extra_jars=iceberg_spark_jars())
    if not target.master.startswith("local"):
        # the executors convert rows with the consumer library: our packages go with them
        work = Path(state_dir()) / "apply"
        session.sparkContext.addPyFile(str(package_zip(work, consumer=True)))
    return session
