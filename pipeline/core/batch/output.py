"""What an executor's task writes: rows of :data:`OUTPUT_SCHEMA`, built in Arrow.

A task of the Python loop (``loop.py``) or of the initial scan (``scan/scan.py``) yields Kafka
records (topic, key, value, headers) and, with a null topic, the rows that are not records: one
summary per source partition and, exactly once, each partition's begin row
(:class:`OutputColumns` builds them). A dead letter carries its reason and source in
:data:`ERROR_HEADER` and :data:`SOURCE_HEADER` (:func:`bad_reason`, :func:`too_large`). On the
driver, :func:`records_observed` parts such output into the records the sink writes and the
summaries a Spark ``Observation`` carries back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from schemas import claims
from schemas.errors import EncodingError, OversizedRecord

from ..sources import BadRecord
from .contract import BatchPlan, PartitionSeen, header_bytes

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Observation

ERROR_HEADER = "highwater.error"
SOURCE_HEADER = "highwater.source"

# What a task yields (loop.py's process(), the scan's too): Kafka records (topic, key, value,
# headers) or, with a null topic, one summary per source partition (JSON text); exactly once,
# each partition's stretch also begins with a row whose progress is its first offset, and its
# summary row carries where it ends (Sink.java's PieceRows).
OUTPUT_SCHEMA = (
    "topic string, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>, summary string, progress string"
)


class OutputColumns:
    """Columns of the Arrow batch being built (plain lists: appending is the hot path).

    Topics are kept as runs (topic, count): consecutive records mostly go to one topic.
    """

    def __init__(self) -> None:
        self.topics: list[tuple[str | None, int]] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.headers: list[list[dict[str, Any]] | None] = []
        self.summary: list[str | None] = []
        self.progress: list[str | None] = []

    def mark(self, summary: str | None, progress: str | None) -> None:
        """A row that is no Kafka record: a partition's summary, or (exactly once) its begin."""
        n = len(self.key)
        self.summary.extend([None] * (n - len(self.summary)))
        self.progress.extend([None] * (n - len(self.progress)))
        self.key.append(None)
        self.value.append(None)
        self.summary.append(summary)
        self.progress.append(progress)
        self.topic_run(None, 1)

    def headed(self, headers: list[dict[str, Any]]) -> None:
        """The record appended last carries ``headers`` (a claim check's reference)."""
        self.headers.extend([None] * (len(self.key) - 1 - len(self.headers)))
        self.headers.append(headers)

    def topic_run(self, topic: str | None, count: int) -> None:
        """The next ``count`` records appended go to ``topic``."""
        if not count:
            return
        if self.topics and self.topics[-1][0] == topic:
            count += self.topics.pop()[1]
        self.topics.append((topic, count))

    def arrow(self) -> pa.RecordBatch:
        """The records as one Arrow batch of ``OUTPUT_SCHEMA``."""
        import pyarrow as pa  # noqa: PLC0415 - pyarrow loads on the executors only

        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        n = len(self.key)
        topics = [pa.repeat(pa.scalar(t, pa.string()), count) for t, count in self.topics]
        for column in (self.headers, self.summary, self.progress):
            if column:
                column.extend([None] * (n - len(column)))
        return pa.RecordBatch.from_arrays(
            [
                pa.concat_arrays(topics) if topics else pa.array([], pa.string()),
                pa.array(self.key, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.headers, pa.list_(header))
                if self.headers
                else pa.nulls(n, pa.list_(header)),
                pa.array(self.summary, pa.string()) if self.summary else pa.nulls(n, pa.string()),
                pa.array(self.progress, pa.string()) if self.progress else pa.nulls(n, pa.string()),
            ],
            names=["topic", "key", "value", "headers", "summary", "progress"],
        )


def too_large(key: bytes, value: bytes | None, limit: int) -> OversizedRecord:
    """An output record the producer would refuse: a bad record, not a failed batch."""
    return OversizedRecord(len(key) + len(value or b""), limit)


def headed_bytes(headers: list[dict[str, Any]] | None) -> int:
    """What an output row's ``headers`` add to its record's size (:func:`header_bytes`)."""
    return header_bytes((h["key"], h["value"]) for h in headers) if headers else 0


def claim_checked(
    plan: BatchPlan,
    topic: str,
    key: bytes,
    value: bytes | None,
    headers: list[dict[str, Any]] | None = None,
) -> tuple[bytes, list[dict[str, Any]]]:
    """A row too large for Kafka: its value claimed; the reference's value and headers.

    Under ``oversized_rows: claim_check`` the value goes whole to the claim store
    (``schemas/claims.py``) and the reference takes its place, with the row's ``headers`` and
    then the claim's; else (or when even the reference does not fit) :func:`too_large`, a
    bad record.
    """
    if plan.claim_store is None or value is None:
        raise too_large(key, value, plan.max_record_bytes)
    reference = claims.put(plan.claim_store, plan.claim_folder, topic, value)
    encoded = reference.encode()
    headed = [*(headers or ()), {"key": claims.HEADER, "value": reference.uri.encode()}]
    size = len(key) + len(encoded) + headed_bytes(headed)
    if size > plan.room:
        raise too_large(key, value, plan.max_record_bytes)
    return encoded, headed


def bad_reason(exc: Exception) -> str:
    """Why a record is bad: our reason, or what went wrong where nothing expected it."""
    if isinstance(exc, BadRecord):
        return str(exc)
    if isinstance(exc, EncodingError):
        return exc.reason
    return f"cannot be processed ({type(exc).__name__}: {exc})"


def count_transaction(state: PartitionSeen, exc: Exception) -> None:
    """A bad change of a Debezium transaction was read all the same: it does not hold it up."""
    if isinstance(exc, BadRecord) and exc.tx is not None and exc.ts is not None:
        state.saw(exc.tx, exc.ts)


def records_observed(
    processed: DataFrame, observation: Observation, *, framed: bool = False
) -> DataFrame:
    """The Kafka records of ``process``-shaped output; the summaries go to ``observation``.

    ``framed`` (exactly once): the begin and summary rows stay, for the sink's transactions.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark stays out of the import path

    # As JSON text: an array would come back to Python as a Java object.
    summaries = F.to_json(F.collect_list("summary")).alias("summaries")
    observed = processed.observe(observation, summaries)
    if framed:
        return observed
    return observed.where(F.col("summary").isNull()).select("topic", "key", "value", "headers")
