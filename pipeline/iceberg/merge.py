"""One table's commit of one window with Spark's Iceberg runtime, R in its snapshot summary.

A table with identifier fields gets one ``MERGE INTO``: a key's last version in the window
replaces its row (or is inserted), a delete removes it; a key changed upstream is two keys,
the old one's delete and the new one's row. Iceberg writes it as the table's
``write.merge.mode`` says: copy-on-write (the default: data files rewritten) or merge-on-read
(**position** deletes; Iceberg's Spark writer never writes equality deletes). A table
without identifier fields gets its rows appended. Each is **one snapshot**, empty windows
included (an empty source still commits: see :func:`commit`).

The snapshot summary carries ``highwater.resolved`` and ``highwater.changefeed``, as the local
engine's, so :mod:`highwater_consumer.iceberg.cuts` reads both. SQL has no way to name a
commit's summary, so the statement runs inside Iceberg's
``org.apache.iceberg.spark.CommitMetadata.withCommitProperties(properties, callable, class)``,
whose properties go to every commit made on the calling thread while ``callable`` runs. The
callable is a Python object implementing ``java.util.concurrent.Callable`` through py4j's
callback server (the one PySpark starts for ``foreachBatch``); PySpark's pinned threads run
the callback on the driver thread that called in, and the ``MERGE`` it issues on the same
JVM thread, where the properties are set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from highwater_consumer.iceberg import CHANGEFEED, RESOLVED
from schemas.hlc import Hlc

from .rows import DELETED

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_SOURCE = "highwater_window"  # the temporary view of a window's rows


class _Statement:
    """A ``java.util.concurrent.Callable`` (py4j) running one statement; its error kept."""

    def __init__(self, run: Callable[[], None]) -> None:
        self.run = run
        self.error: BaseException | None = None

    def call(self) -> None:
        try:
            self.run()
        except BaseException as exc:  # handed back to the caller, not to py4j
            self.error = exc
            raise

    class Java:
        implements = ["java.util.concurrent.Callable"]  # noqa: RUF012 - py4j's declaration


def with_summary(spark: SparkSession, summary: Mapping[str, str], run: Callable[[], None]) -> None:
    """``run`` (Spark statements on this thread) with ``summary`` in every snapshot it commits."""
    from pyspark.java_gateway import ensure_callback_server_started  # noqa: PLC0415

    gateway: Any = spark.sparkContext._gateway  # PySpark's own py4j gateway
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    jvm = gateway.jvm
    properties = jvm.java.util.HashMap()
    for key, value in summary.items():
        properties.put(key, value)
    statement = _Statement(run)
    failure = jvm.java.lang.Class.forName("java.lang.Exception")
    try:
        jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(
            properties, statement, failure
        )
    except Exception:
        if statement.error is not None:
            raise statement.error from None
        raise


def summary_of(changefeed: str, resolved: Hlc) -> dict[str, str]:
    """A window's snapshot summary: its R and the changefeed."""
    return {RESOLVED: str(resolved), CHANGEFEED: changefeed}


def merge_sql(table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    """``MERGE INTO`` the window's rows (:data:`_SOURCE`) into ``table`` by ``key``."""
    on = " AND ".join(f"t.{_q(c)} = s.{_q(c)}" for c in key)
    others = [c for c in columns if c not in key]
    names = ", ".join(_q(c) for c in columns)
    values = ", ".join(f"s.{_q(c)}" for c in columns)
    update = ", ".join(f"t.{_q(c)} = s.{_q(c)}" for c in others)
    matched = f"WHEN MATCHED THEN UPDATE SET {update} " if others else ""
    # names quoted (_q), no values in the text: those are the view's rows
    return (
        f"MERGE INTO {table} t USING {_SOURCE} s ON {on} "  # noqa: S608
        f"WHEN MATCHED AND s.{DELETED} THEN DELETE "
        f"{matched}"
        f"WHEN NOT MATCHED AND NOT s.{DELETED} THEN INSERT ({names}) VALUES ({values})"
    )


def commit(
    spark: SparkSession,
    table: str,
    rows: DataFrame,
    key: Sequence[str],
    summary: Mapping[str, str],
) -> None:
    """Commit ``rows`` (the window's, :func:`.rows.window_rows`) to ``table``: one snapshot.

    ``table``: its Spark name (``target.<namespace>.<table>``). Without a key, an append of
    the rows' columns (zero rows: an empty append, still a snapshot).
    """
    columns = [f.name for f in spark.table(table).schema.fields]
    if key:
        rows.createOrReplaceTempView(_SOURCE)

        def run() -> None:
            spark.sql(merge_sql(table, columns, key)).collect()
    else:
        selected = rows.select(*columns)

        def run() -> None:
            selected.writeTo(table).append()

    with_summary(spark, summary, run)


def _q(name: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"
