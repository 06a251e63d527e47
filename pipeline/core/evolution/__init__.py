"""Output schemas that follow their tables: ``schema_change_policy``.

``evolution`` settles a row its output schema cannot hold by the policy (``stop``, ``evolve``,
``backfill``) and keeps each table's schema versions; ``start`` finds each table's schema at
the start (derived from its source's newest change, or declared); ``rescan`` is the
``backfill`` policy's own part (pure): the table emitted again from its source topic as it
stood just before the change, with the initial scan's machinery.
"""

from __future__ import annotations

from .evolution import SchemaEvolution, written
from .rescan import Rescan, rescan_backfill

__all__ = ["Rescan", "SchemaEvolution", "rescan_backfill", "written"]
