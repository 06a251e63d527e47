"""The initial scan on the executors, and the time it is taken at.

``statement`` finds a new changefeed's statement time (the sources' high-water mark when it is
created: a consistent snapshot's time), ``scan`` takes a chunk's snapshot in Python (every
key's latest version at or below that time; ``key_versions`` what it keeps of the key it is at)
and ``scan_walk`` in the JVM where it can, byte for byte the same. The driver's side, which
runs the chunks as Spark jobs and records each as it finishes, is the coordinator's
(``coordinator.scan_driver``).
"""

from __future__ import annotations

from .scan import ScanPlan, chunk_records
from .scan_walk import scan_walk_plan, write_chunk
from .statement import statement_time

__all__ = ["ScanPlan", "chunk_records", "scan_walk_plan", "statement_time", "write_chunk"]
