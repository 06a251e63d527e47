"""The statement time (the sources' high-water mark at creation) on a real broker."""

import pytest

from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.scan.statement import statement_time
from pipeline.dev.generator import GeneratorSpec, write
from schemas.errors import SourceError
from tests.integration.test_changefeed import produce


def test_statement_time_is_the_lowest_latest_marker_read_from_the_tail(
    kafka_bootstrap: str, unique_name
) -> None:
    source = unique_name("src")
    # ~4,000 changes per partition, one round of markers after 8,000 changes in all: each
    # partition's latest marker lies ~1,300 records before its end, beyond the first
    # 1,000-record window, so the window has to grow.
    report = write(
        GeneratorSpec(topic=source, rows=12_000, partitions=3, resolved_every=8_000, seed=2),
        {"bootstrap.servers": kafka_bootstrap},
    )
    partitions = [SourcePartition(source, p) for p in range(3)]
    found = statement_time({"bootstrap.servers": kafka_bootstrap}, {source: "native"}, partitions)
    assert found.time == min(report.last_resolved.values())
    assert sum(found.end_offsets.values()) == report.total + report.markers


def test_a_partition_without_markers_is_named(kafka_bootstrap: str, unique_name) -> None:
    source = unique_name("src")
    produce(
        kafka_bootstrap,
        source,
        [(0, None, {"resolved": "1700000000000000005.0000000000"}), (1, [1], b"{}")],
        partitions=2,
    )
    partitions = [SourcePartition(source, p) for p in range(2)]
    with pytest.raises(SourceError, match=f"no resolved marker yet on {source}/1"):
        statement_time({"bootstrap.servers": kafka_bootstrap}, {source: "native"}, partitions)
