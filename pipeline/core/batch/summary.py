"""A source partition's summary: what one task saw of it, sent from an executor to the driver.

Declared once (:class:`Summary`), written by both producers of it: the Python loop
(``batch/loop.py``, a row of its output the driver observes) and the JVM walk (``Walk.java``, an
accumulator). ``tests/golden/summaries.json`` holds what both write for the same records;
``tests/spark/test_summary_golden.py`` holds each producer to it. Every field is always
there; times are HLC text (``<wall nanos>.<logical>``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from schemas.errors import HighwaterError


class Summary(BaseModel):
    """One source partition's part of a batch (or scan chunk), as a task saw it."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    topic: str
    partition: int
    next_offset: int  # where the next batch of the partition starts
    resolved: str | None  # the highest marker read
    emitted: int  # rows written
    duplicates: int  # rows at or below the partition's floor, dropped
    bad: int  # records that went where on_error says
    first_bad: tuple[int, str] | None  # (offset, reason) of the first that stops the run
    bytes: int  # the emitted rows' keys and values
    # Debezium: per transaction id, (its places read, lowest time, highest time)
    transactions: dict[str, tuple[list[int], str | None, str | None]]
    position: list[int] | None  # the highest source position read (Debezium)
    resent: int  # changes dropped as re-sends (at or below a position already read)
    # (from offset, to offset, floor, transaction): the rest left to the Python loop, for a
    # transaction's END (the loop) or for anything the walk does not take (the walk)
    deferred: tuple[int, int, str, str | None] | None
    schema_change: tuple[int, str, str] | None  # (offset, reason, commit time): stopped there
    # Debezium: the offset of the last snapshot read (``op: r``) read, which may tell the driver
    # that the connector took a new snapshot (``resolved/resnapshots.py``); the walk leaves
    # PostgreSQL's and binlogs' reads to the Python loop, so it writes null
    reread: int | None = None

    @classmethod
    def parse(cls, text: str) -> Summary:
        """A summary's text, checked against the declaration (a clear error if it is not one)."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise HighwaterError(f"not a partition summary: {exc}") from None
