"""Writing a micro-batch: the driver↔executor contract and the code that writes rows.

``loop`` holds the contract (the plan shipped to the executors, the result and the rests
sent back) and the Python loop the executors run over every record; ``walk`` is the JVM walk,
behind the one facade to our Java (``jvm``); ``writer`` the two writers of a batch, chosen
once when a run starts; ``summary`` what a task saw of each source partition, as both write
it; ``rows`` one Spark row per change, which the CDC ``queries`` and the initial scan read;
``kafka_clients`` every Kafka client's settings, built from the config in one place; and
``faults`` the crash points the crash-safety tests kill the job at.
"""

from __future__ import annotations

from . import faults
from .jvm import Summaries, Transactions, scan_and_write, scan_rows
from .kafka_clients import (
    client_config,
    low_offsets,
    range_reader,
    read_range,
    source_reader,
    write_records,
    writer_options,
)
from .loop import (
    OUTPUT_SCHEMA,
    RECORD_FRAMING,
    BatchAbandoned,
    BatchPlan,
    BatchResult,
    Deferred,
    Output,
    PartitionSeen,
    Settled,
    Task,
    bad_reason,
    count_transaction,
    read_result,
    records_observed,
    source_columns,
    too_large,
)
from .queries import apply_query, check_query
from .rows import pick_row, with_rows
from .writer import BatchWriter, batch_writer

__all__ = [
    "OUTPUT_SCHEMA",
    "RECORD_FRAMING",
    "BatchAbandoned",
    "BatchPlan",
    "BatchResult",
    "BatchWriter",
    "Deferred",
    "Output",
    "PartitionSeen",
    "Settled",
    "Summaries",
    "Task",
    "Transactions",
    "apply_query",
    "bad_reason",
    "batch_writer",
    "check_query",
    "client_config",
    "count_transaction",
    "faults",
    "low_offsets",
    "pick_row",
    "range_reader",
    "read_range",
    "read_result",
    "records_observed",
    "scan_and_write",
    "scan_rows",
    "source_columns",
    "source_reader",
    "too_large",
    "with_rows",
    "write_records",
    "writer_options",
]
