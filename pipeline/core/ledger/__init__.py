"""What a changefeed keeps of where it stands: plain values, and the records that carry them.

The frontier (how far each source partition has been read and resolved; its lowest resolved
time is the high-water mark), the checkpoint record and its store, the initial scan's
bookkeeping (its chunks, which are done, its progress) and every record Highwater writes to
Kafka, declared once with its format version (``records``). Everything else in
``pipeline/core`` stands on these; they stand on nothing of it but the source adapters' room.
"""

from __future__ import annotations

from . import records
from .backfill import Backfill, Chunk, ScanProgress, progress_line
from .checkpoint import Checkpoint, CheckpointStore, numbers_to_ranges, ranges_to_numbers
from .frontier import Frontier, Progress, SourcePartition
from .records import (
    Desired,
    GcRecord,
    GenerationRecord,
    OutputFields,
    PartitionStatus,
    ProgressRecord,
    SafepointFields,
    SafepointRecord,
    SpecRecord,
    StatusRecord,
    TableSchemaStatus,
    TransactionLogRecord,
    decode,
    read_part,
)

__all__ = [
    "Backfill",
    "Checkpoint",
    "CheckpointStore",
    "Chunk",
    "Desired",
    "Frontier",
    "GcRecord",
    "GenerationRecord",
    "OutputFields",
    "PartitionStatus",
    "Progress",
    "ProgressRecord",
    "SafepointFields",
    "SafepointRecord",
    "ScanProgress",
    "SourcePartition",
    "SpecRecord",
    "StatusRecord",
    "TableSchemaStatus",
    "TransactionLogRecord",
    "decode",
    "numbers_to_ranges",
    "progress_line",
    "ranges_to_numbers",
    "read_part",
    "records",
]
