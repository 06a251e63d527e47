"""``highwater apply --catalog … --engine spark``: windows applied by Spark's Iceberg runtime.

The same guarantees and marks as the local engine (:mod:`highwater_consumer.iceberg`), so
its cuts read both: one commit per table per window, empty ones too, ``highwater.resolved``
and ``highwater.changefeed`` in each snapshot summary; each table's last R read from its own
history at start, the windows it holds skipped (exactly once across kills); copy-on-write or
position deletes, never equality deletes (:mod:`.merge`). The tables are made and claimed,
and their R read, by the local engine's :class:`IcebergApplier` (pyiceberg, on the driver).

Each **step** works on the frontier as it stands (a bigger window than the local engine's,
whose R is still a real resolved time every table gets):

1. each output partition's end now; ``[start, end)`` of every partition read as one Spark
   batch, kept for the step (:mod:`.ranges`);
2. one job finds each partition's latest marker; the frontier F is the lowest. Not above
   what every table holds: wait and read again;
3. each table's records converted on the executors (:mod:`.rows`), all of them before any
   commit, so a record that cannot be written stops the step with nothing committed; a row
   with a column its table lacks is read again on the driver and the table altered by it
   by the local engine's rules (:mod:`highwater_consumer.iceberg.evolution`: added from the
   record's writer schema or the declared one; ``--schema-changes stop`` or a retyped
   column stops, naming both), then the table's records converted again. The column is
   added in a commit of its own, just before the window's (the local engine makes both
   one): the latest table shows it, empty, until that window lands; a cut reads as before;
4. the tables behind another one (a kill between two tables' commits) are first committed
   at exactly the R the others hold, from their rows up to it; then every table at F, each
   with its rows in (its R, F]: a table never skips an R another holds, every table holds
   the same cuts;
5. the group's offsets committed with F (the first row above F or the latest marker, per
   partition): a restart reads from there, and skips what each table holds.

Two appliers at once: before each commit the table's R is read again, and a table holding
the R already (or a later one) is left alone, so it never goes back; a commit refused for a
concurrent one is re-checked the same way before it is tried again. A catalog that does not
answer (down, restarting) is waited for with back-off, as by the local engine
(``--catalog-patience``): the step is taken again, the tables it committed before the outage
held already.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from highwater_consumer.decoding import ApplyError
from highwater_consumer.iceberg import IcebergApplier
from highwater_consumer.iceberg.applier import Outage, unreachable
from highwater_consumer.output import Output
from highwater_consumer.windows import Row
from schemas.errors import RecordRef
from schemas.hlc import Hlc

from . import merge, ranges
from .ranges import Partition
from .rows import OFFSET, PARTITION, TIME, TOPIC, Converter, row_schema, window_rows
from .session import CATALOG

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

_ATTEMPTS = 3  # commits of one table at one R refused before the applier gives up
_POLL = 1.0  # seconds between looks at the output while nothing resolves


@dataclass
class Table:
    """A changefeed table as the Spark engine applies it: its Spark name, key and last R."""

    name: str  # the changefeed's
    spark_name: str  # target.<namespace>.<table>
    key: tuple[str, ...]
    resolved: Hlc | None
    converter: Converter | None = None


class SparkIcebergApplier:
    """Applies ``output``'s windows to Iceberg tables with Spark (``spark``: its session).

    ``tables``: the local engine's applier, which makes the tables and reads what they hold;
    ``offsets``: the group's; ``max_offsets``: the most records a step reads of a partition
    (None: all there are), doubled for the next step while a step so bounded finds no new
    frontier (a partition whose markers are further apart). ``reached`` is called with
    ``committed <table>`` after each table's commit: the crash tests' knob.
    """

    def __init__(
        self,
        spark: SparkSession,
        output: Output,
        tables: IcebergApplier,
        offsets: ranges.Offsets,
        max_offsets: int | None = None,
    ) -> None:
        if max_offsets is not None and max_offsets < 1:
            raise ApplyError(f"--max-offsets {max_offsets}: at least 1 record a partition")
        self.max_offsets = max_offsets
        self._cap = max_offsets
        # the ranges of the last step that found no new frontier (read again once they grow)
        self._looked: tuple[dict[Partition, int], dict[Partition, int]] | None = None
        self.spark = spark
        self.output = output
        self.applier = tables
        self.offsets = offsets
        self.tables: dict[str, Table] = {}
        self.windows = 0  # the R every table got
        self.applied = 0  # rows written (a delete counts)
        self.reached: Callable[[str], None] = lambda step: None

    def start(self) -> Hlc | None:
        """Make or load the tables and open the offsets; the R every table holds (or None)."""
        low = self.applier.start(self.output.topics.values())
        for name, target in sorted(self.applier.targets.items()):
            namespace, table = target.table.name()
            spark_name = f"{CATALOG}.{_q(namespace)}.{_q(table)}"
            self.tables[name] = Table(name, spark_name, target.key, target.resolved)
        self.offsets.open()
        return low

    @property
    def low(self) -> Hlc | None:
        """The R every table holds (None: one holds none)."""
        held = [t.resolved for t in self.tables.values()]
        if any(r is None for r in held):
            return None
        return min(r for r in held if r is not None)

    def run(self, *, until: Hlc | None = None, idle: float | None = None) -> int:
        """Apply steps until ``until`` is held by every table, or ``idle`` seconds without one.

        A step the catalog did not answer (down, restarting, a 5xx) is tried again with
        back-off for the applier's ``patience`` (then :class:`CatalogUnreachable`): it
        committed nothing, or some tables, which the next step catches up first.
        """
        quiet = time.monotonic()
        outage = Outage(self.applier.patience)
        while True:
            if until is not None and self.low is not None and self.low >= until:
                return self.windows
            try:
                stepped = self.step()
            except Exception as exc:
                if not catalog_down(exc):
                    raise
                outage.wait("every table", exc)
                continue
            outage = Outage(self.applier.patience)
            if stepped:
                quiet = time.monotonic()
                continue
            if idle is not None and time.monotonic() - quiet > idle:
                return self.windows
            time.sleep(_POLL)

    def step(self) -> bool:
        """One step (the module's docstring): True when every table got a new R."""
        starts, ends = dict(self.offsets.starts), self.offsets.ends()
        if all(ends[p] <= starts[p] for p in starts) or (starts, ends) == self._looked:
            return False  # nothing to read, or nothing since a look that resolved nothing
        cap = self._cap
        bounded = {p: end if cap is None else min(end, starts[p] + cap) for p, end in ends.items()}
        records = ranges.read(self.spark, self.output, starts, bounded).persist()
        converted: dict[str, DataFrame] = {}
        try:
            try:
                latest = ranges.markers(records, self.output)
            except Exception as exc:
                raise _named(exc) from exc
            found = ranges.frontier(latest, sorted(starts))
            low = self.low
            if found is None or (low is not None and Hlc.parse(found.text) <= low):
                if cap is not None and bounded != ends:
                    self._cap = cap * 2  # no new frontier within the bound: read further
                else:
                    self._looked = (starts, ends)
                return False
            self._cap = self.max_offsets
            resolved = Hlc.parse(found.text)
            converted = self._converted(records)
            for stage in self._stages(resolved):
                for table in self.tables.values():
                    self._commit(table, converted[table.name], stage)
            self.offsets.commit(self._restart_offsets(latest, converted, resolved), resolved)
            self.windows += 1
            log.info("every table holds %s (%d rows so far)", resolved, self.applied)
            return True
        finally:
            for frame in converted.values():
                frame.unpersist()
            records.unpersist()

    def _stages(self, resolved: Hlc) -> list[Hlc]:
        """The R the step commits, in order: those some tables hold and others not, then F."""
        held = {t.resolved for t in self.tables.values() if t.resolved is not None}
        low = self.low
        behind = sorted(r for r in held if (low is None or r > low) and r < resolved)
        return [*behind, resolved]

    def _converted(self, records: DataFrame) -> dict[str, DataFrame]:
        """Each table's rows of the step, converted and kept; a bad record stops it here."""
        from pyspark.sql import functions as f  # noqa: PLC0415

        out: dict[str, DataFrame] = {}
        try:
            for table in self.tables.values():
                topics = [t for t, name in self.output.topics.items() if name == table.name]
                mine = records.where(f.col("topic").isin(topics))
                while table.name not in out:
                    schema = row_schema(self.spark.table(table.spark_name).schema)
                    converter = table.converter or self._converter(table, schema.json())
                    rows = mine.mapInArrow(converter, schema).persist()
                    try:
                        rows.count()  # converted now: a record that cannot be written stops here
                    except Exception as exc:
                        rows.unpersist()
                        seen = column_seen(exc)
                        if seen is None:
                            raise
                        self._evolve(table, seen, mine)
                        continue
                    out[table.name] = rows
        except Exception as exc:
            for frame in out.values():
                frame.unpersist()
            raise _named(exc) from exc
        return out

    def _evolve(self, table: Table, seen: RecordRef, records: DataFrame) -> None:
        """The table altered by the record ``seen`` (a column it lacks), or the reason it stops.

        The local engine's :class:`~highwater_consumer.iceberg.evolution.Evolution` judges the
        record on the driver (its writer schema, or the declared schema for JSON output), and
        the change is committed on its own; Spark and the converter then see the new schema.
        """
        from pyspark.sql import functions as f  # noqa: PLC0415

        place = (
            (f.col("topic") == seen.topic)
            & (f.col("partition") == seen.partition)
            & (f.col("offset") == seen.offset)
        )
        found = records.where(place).select("key", "value").collect()
        if not found:
            raise ApplyError(f"{seen}: a record the step read is not found again")
        key, value = (None if part is None else bytes(part) for part in found[0])  # bytearrays
        reader = self.output.decoder().reader
        read = reader.read(key, value)
        if type(read) is not int or key is None:
            raise ApplyError(f"{seen}: a marker, not the row change the step read")
        row = Row(
            read, table.name, key, value, (seen.topic, seen.partition), seen.offset, reader.change
        )
        target = self.applier.targets[table.name]
        _, after = row.image()
        target.evolution.see(row, after or {}, target.table, target.convert)
        if not target.evolution.staged:
            raise ApplyError(
                f"{seen}: table {table.name}: a column the converter lacks, none to add"
            )
        with target.table.transaction() as transaction:
            target.evolution.alter(transaction)
        target.evolution.committed()
        target.table = self.applier.catalog.load_table(target.table.name())
        log.info("%s: %s altered by %s", table.name, ".".join(target.table.name()), seen)
        self.spark.catalog.refreshTable(table.spark_name)
        table.converter = None

    def _converter(self, table: Table, schema: str) -> Converter:
        target = self.applier.targets[table.name]
        table.converter = Converter(
            table.name, target.table.schema().model_dump_json(), table.key, schema, self.output
        )
        return table.converter

    def _commit(self, table: Table, rows: DataFrame, resolved: Hlc) -> None:
        """Commit ``table`` at ``resolved`` unless it holds it; re-checked after a refusal."""
        for attempt in range(1, _ATTEMPTS + 1):
            table.resolved = self._held(table)
            if table.resolved is not None and table.resolved >= resolved:
                return  # held already (a restart, or another applier)
            lo = None if table.resolved is None else table.resolved.packed()
            window = window_rows(rows, table.key, lo, resolved.packed())
            summary = merge.summary_of(self.applier.changefeed, resolved)
            try:
                merge.commit(self.spark, table.spark_name, window, table.key, summary)
            except Exception as exc:
                if attempt == _ATTEMPTS:
                    raise ApplyError(
                        f"{table.name}: {_ATTEMPTS} commits of window {resolved} failed"
                    ) from exc
                log.warning(
                    "%s: the commit of %s failed (%s); read again", table.name, resolved, exc
                )
                continue
            table.resolved = resolved
            self.applied += window.count()
            self.reached(f"committed {table.name}")
            return

    def _held(self, table: Table) -> Hlc | None:
        """The table's last R as the catalog has it now."""
        from highwater_consumer.iceberg.cuts import applied  # noqa: PLC0415

        target = self.applier.targets[table.name]
        loaded = self.applier.catalog.load_table(target.table.name())
        return max((r for r, _ in applied(loaded, self.applier.changefeed)), default=None)

    def _restart_offsets(
        self,
        latest: Mapping[Partition, ranges.Marker],
        converted: Mapping[str, DataFrame],
        resolved: Hlc,
    ) -> dict[Partition, int]:
        """Per partition: the first row above ``resolved``, or its latest marker's offset."""
        from pyspark.sql import functions as f  # noqa: PLC0415

        out = {p: marker.offset for p, marker in latest.items()}
        bound = f.lit(str(resolved.packed())).cast("decimal(38,0)")
        for rows in converted.values():
            above = rows.where(f.col(TIME) > bound).groupBy(TOPIC, PARTITION).agg(f.min(OFFSET))
            for topic, partition, offset in above.collect():
                out[(topic, partition)] = min(out[(topic, partition)], offset)
        return out


# What Iceberg's Java REST client (in Spark) says when the catalog does not answer: the
# connection refused or lost, a 5xx, a commit whose outcome is unknown.
_DOWN = re.compile(
    r"ConnectException|HttpHostConnectException|NoHttpResponseException|SocketTimeoutException"
    r"|ServiceUnavailableException|ServiceFailureException|CommitStateUnknownException"
    r"|Connection refused"
)


def catalog_down(exc: BaseException) -> bool:
    """Whether ``exc`` (pyiceberg's on the driver, or Spark's) says the catalog did not answer."""
    for cause in _chain(exc):
        if isinstance(cause, Exception) and unreachable(cause):
            return True
        if type(cause).__module__.startswith(("py4j", "pyspark")) and _DOWN.search(str(cause)):
            return True
    return False


def _chain(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in out:
        out.append(cause)
        cause = cause.__cause__ or cause.__context__
    return out


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


_RAISED = re.compile(r"(?:UnwritableRecord|ApplyError|BadRecord): (.+)")
_SEEN = re.compile(r"ColumnSeen: (\S+): table ")


def column_seen(exc: BaseException) -> RecordRef | None:
    """The record an executor's :class:`~.rows.ColumnSeen` names (None: another error)."""
    found = _SEEN.findall(str(exc))
    return RecordRef.parse(found[-1]) if found else None


def _named(exc: Exception) -> Exception:
    """An executor's error naming a record, as the applier's own error; others as they are."""
    found = _RAISED.findall(str(exc))
    return ApplyError(found[-1]) if found else exc


def apply_with_spark(args: Any, output: Output, properties: Mapping[str, str]) -> int:
    """``highwater apply … --engine spark`` (pipeline/cli.py hands it over): exit status."""
    from highwater_consumer.iceberg import NAMESPACE  # noqa: PLC0415
    from highwater_consumer.iceberg.catalog import default_group  # noqa: PLC0415

    from .session import SparkTarget, iceberg_session  # noqa: PLC0415

    local_only = {
        "--on-error dlq": getattr(args, "on_error", "fail") != "fail",
        "--spill": getattr(args, "spill", None) is not None,
    }
    given = [flag for flag, on in local_only.items() if on]
    if given:
        raise ApplyError(
            f"{', '.join(given)}: the local engine's; --engine spark stops at a record it "
            f"cannot write and holds no window in memory"
        )
    target = SparkTarget.of(properties, args.master, args.python_env)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per callback at INFO
    namespace = args.namespace or NAMESPACE
    tables = IcebergApplier(
        properties,
        args.changefeed,
        namespace=namespace,
        schemas=output.schemas,
        names=dict(t.split("=", 1) for t in args.table),
        schema_changes=getattr(args, "schema_changes", None) or "evolve",
        patience=args.catalog_patience,
    )
    group = args.group or default_group(args.changefeed, properties, namespace)
    spark = iceberg_session(target, f"highwater-apply-{args.changefeed}")
    offsets = ranges.Offsets(output, group)
    engine = SparkIcebergApplier(spark, output, tables, offsets, args.max_offsets)
    try:
        engine.start()
        windows = engine.run(until=args.until, idle=args.idle)
    finally:
        offsets.close()
        spark.stop()
    print(f"applied {windows} windows, {engine.applied} rows (Spark)", file=sys.stderr)
    return 0
