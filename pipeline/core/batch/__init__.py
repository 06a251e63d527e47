"""Writing a micro-batch: the driver↔executor contract and the code that writes rows.

``contract`` is what driver and executors exchange (the plan shipped to the tasks, each
source partition's summary and rest sent back, merged into the batch's result); ``loop`` the
Python loop the executors run over every record, ``bad_records`` what it does with a record
it cannot write as a row (a schema change found, a dead letter), and ``output`` what a task
writes (its and the initial scan's); ``walk`` is the JVM walk, behind the one facade to our
Java (``jvm``), and ``boundary`` what crosses to that Java (plans, progress rows, options),
declared once; ``writer`` the two writers of a batch, chosen once when a run starts; ``sink``
the row sink, the one owner of every row written (stream, walk, rests, scans); ``summary``
what a task saw of each source partition, as both write it; ``rows`` one Spark row per change,
which the CDC ``queries`` and the initial scan read; ``kafka_clients`` every Kafka client's
settings, built from the config in one place; and ``faults`` the crash points the
crash-safety tests kill the job at.
"""

from __future__ import annotations

from . import faults
from .boundary import (
    DeliveryOptions,
    PieceAbandon,
    PieceBegin,
    PieceEnd,
    ProgressRow,
    ScanWalkPlan,
    WalkPlan,
)
from .contract import (
    RECORD_FRAMING,
    BatchAbandoned,
    BatchPlan,
    BatchResult,
    Deferred,
    PartitionSeen,
    Settled,
    header_bytes,
    read_result,
)
from .jvm import KafkaTransactions, Summaries, scan_rows
from .kafka_clients import (
    client_config,
    low_offsets,
    own_writer_settings,
    range_reader,
    read_range,
    source_reader,
    watermarks,
)
from .loop import Task, source_columns
from .output import (
    OUTPUT_SCHEMA,
    OutputColumns,
    bad_reason,
    claim_checked,
    count_transaction,
    headed_bytes,
    records_observed,
    too_large,
)
from .queries import apply_query, check_query
from .rows import pick_row, with_rows
from .sink import RowSink
from .writer import BatchWriter, batch_writer

__all__ = [
    "OUTPUT_SCHEMA",
    "RECORD_FRAMING",
    "BatchAbandoned",
    "BatchPlan",
    "BatchResult",
    "BatchWriter",
    "Deferred",
    "DeliveryOptions",
    "KafkaTransactions",
    "OutputColumns",
    "PartitionSeen",
    "PieceAbandon",
    "PieceBegin",
    "PieceEnd",
    "ProgressRow",
    "RowSink",
    "ScanWalkPlan",
    "Settled",
    "Summaries",
    "Task",
    "WalkPlan",
    "apply_query",
    "bad_reason",
    "batch_writer",
    "check_query",
    "claim_checked",
    "client_config",
    "count_transaction",
    "faults",
    "headed_bytes",
    "header_bytes",
    "low_offsets",
    "own_writer_settings",
    "pick_row",
    "range_reader",
    "read_range",
    "read_result",
    "records_observed",
    "scan_rows",
    "source_columns",
    "source_reader",
    "too_large",
    "watermarks",
    "with_rows",
]
