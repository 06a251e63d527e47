"""Iceberg tables that are a consistent cut at resolved times (``highwater apply --catalog``).

Needs the ``[iceberg]`` extra (pyiceberg with SQLite and pyarrow); nothing else of the
consumer library imports this package.

* :class:`IcebergApplier` and :func:`apply`: windows into Iceberg tables, one commit per
  table per window with R in its snapshot summary, exactly once across crashes, a catalog
  that does not answer waited for with back-off (:class:`CatalogUnreachable` after its
  patience) (:mod:`.applier`; copy-on-write in :mod:`.writes`, types in :mod:`.columns`);
* a column added upstream added to its table, a retyped one refused (:class:`SchemaChange`,
  :mod:`.evolution`); a big window's rows written ahead past a bound (:mod:`.spill`);
* :func:`cut` and :class:`Cut`: every table of a changefeed at one R (:mod:`.cuts`);
* :func:`maintain` and :class:`Keep`: small files compacted, snapshots expired by the cuts
  kept, orphan files removed, alongside a running applier (:mod:`.maintenance`);
* :func:`load`: a pyiceberg catalog from its properties, the embedded SQLite one by default
  (:mod:`.catalog`).
"""

from .applier import NAMESPACE, CatalogUnreachable, IcebergApplier, UnwritableRecord, apply
from .catalog import embedded, load
from .columns import NoIcebergType, iceberg_schema
from .cuts import CHANGEFEED, RESOLVED, Cut, CutError, complete, cut
from .evolution import SchemaChange
from .maintenance import Keep, MaintenanceError, TableReport, maintain

__all__ = [
    "CHANGEFEED",
    "NAMESPACE",
    "RESOLVED",
    "CatalogUnreachable",
    "Cut",
    "CutError",
    "IcebergApplier",
    "Keep",
    "MaintenanceError",
    "NoIcebergType",
    "SchemaChange",
    "TableReport",
    "UnwritableRecord",
    "apply",
    "complete",
    "cut",
    "embedded",
    "iceberg_schema",
    "load",
    "maintain",
]
