"""The coordinator on the Spark driver: one batch, chunk or tick at a time, under one lock.

``changefeed`` is the lock, the loop and the batch hook; ``rounds`` writes a batch's rows
(the writer's first pass, then the rests the driver settles) and moves the frontier;
``setup`` opens the topics, encoders, clients and the row sink, and picks the resolver;
``start`` finds where the run starts (create or resume); ``durable`` carries out the
policy's decisions (the checkpoint, then the marker) and keeps the safepoint following;
``scan_driver`` runs the scans' chunks as Spark jobs and records each as it finishes;
``stream`` is the streaming query. Nothing in ``pipeline/core`` imports it: only the entry
points and the wings above.
"""

from __future__ import annotations

__all__ = []
