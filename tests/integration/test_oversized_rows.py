"""`oversized_rows: claim_check` on the real broker and Spark, both deliveries.

A native source with rows whose output records are just under, at and over the producer's
room (``max.request.size`` less Kafka's framing), and one five times over, among small ones,
with markers on every partition. Exactly once and at least once, the changefeed never stalls:
every record on the output fits Kafka; the rows over the room are references (their header
names the claimed file) on the row's own key; a confluent-kafka consumer reads every record;
and the consumer library, per row and columnar, hands over every row with its whole value,
byte for byte what the encoder writes, in commit order under the markers. Beside it: the
same source without claim checks stops at the first row over the room, naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from highwater_consumer import ChangefeedConsumer, Output
from pipeline.core.batch.contract import RECORD_FRAMING
from schemas import claims
from schemas.errors import SourceDecodeError
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from tests.integration.test_exactly_once import produce
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.kafka import consume_all
from tests.unit.test_batch import arrow, plan, run

MAX_REQUEST = 20_000
ROOM = MAX_REQUEST - RECORD_FRAMING
PARTITIONS = 3
T0 = 1_700_000_000_000_000_000


def change(order_id: int, t: int, text: str) -> tuple[bytes, bytes]:
    value = {"after": {"order_id": order_id, "v": text}, "updated": f"{T0 + t}.0000000000"}
    return json.dumps([order_id]).encode(), json.dumps(value).encode()


def sized(order_id: int, t: int, total: int) -> tuple[bytes, bytes]:
    """A change whose output record (as ``encoder: {updated: true}`` writes it) is ``total``."""
    (empty,), _ = run(plan(), arrow([change(order_id, t, "")]))
    return change(order_id, t, "y" * (total - len(empty["key"]) - len(empty["value"])))


def expected_value(record: tuple[bytes, bytes]) -> bytes:
    """The output value the encoder writes for a source record (the loop's bytes)."""
    (out,), _ = run(plan(), arrow([record]))
    return bytes(out["value"])


def write_source(bootstrap: str, topic: str) -> dict[bytes, list[bytes]]:
    """The source topic written: per key its output values in commit order."""
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: PARTITIONS})
    records: list[tuple[int, tuple[bytes, bytes]]] = []
    t = 1
    for n in range(60):  # small rows around the large ones, on every partition
        order_id = n % 12
        if n == 20:
            for total in (ROOM - 1, ROOM, ROOM + 1, 5 * ROOM):
                records.append((order_id % PARTITIONS, sized(100 + total % 7, t, total)))
                t += 1
        records.append((order_id % PARTITIONS, change(order_id, t, f"row {n} ✓")))
        t += 1
    expected: dict[bytes, list[bytes]] = {}
    for _, record in records:
        expected.setdefault(record[0], []).append(expected_value(record))
    marker = json.dumps({"resolved": f"{T0 + t}.0000000000"}).encode()
    produce(
        bootstrap,
        topic,
        [(p, k, v) for p, (k, v) in records] + [(p, None, marker) for p in range(PARTITIONS)],
    )
    return expected


@pytest.fixture
def source(kafka_bootstrap: str, unique_name: Any) -> tuple[str, dict[bytes, list[bytes]]]:
    """The source topic, and per key its output values in commit order."""
    topic = unique_name("src")
    return topic, write_source(kafka_bootstrap, topic)


def config_for(bootstrap: str, name: str, source: str, delivery: str, **more: Any) -> Any:
    return changefeed_config(
        bootstrap,
        name,
        [(source, "orders")],
        encoder={"updated": True},
        sink={"producer": {"max.request.size": str(MAX_REQUEST)}},
        delivery=delivery,
        spark={"trigger": {"available_now": True}, "max_offsets_per_trigger": 200},
        **more,
    )


@pytest.mark.parametrize("delivery", ["exactly_once", "at_least_once"])
def test_rows_over_the_room_are_claimed_and_the_consumer_reads_them_whole(  # noqa: PLR0917 - fixtures
    kafka_bootstrap: str,
    unique_name: Any,
    spark: Any,
    tmp_path: Path,
    source: tuple[str, dict[bytes, list[bytes]]],
    delivery: str,
) -> None:
    topic, expected = source
    name = unique_name("big")
    store = tmp_path / "claims"
    config = config_for(
        kafka_bootstrap,
        name,
        topic,
        delivery,
        oversized_rows="claim_check",
        claim_store=f"file://{store}",
    )
    run_to_end(config, spark)
    output = config.output_topic(config.sources[0])

    claimed_whole(kafka_bootstrap, name, output, expected, store, unique_name("reader"))


def test_without_claim_checks_the_run_stops_at_the_first_row_over_the_room(
    kafka_bootstrap: str,
    unique_name: Any,
    spark: Any,
    source: tuple[str, dict[bytes, list[bytes]]],
) -> None:
    topic, _ = source
    config = config_for(kafka_bootstrap, unique_name("stops"), topic, "exactly_once")
    with pytest.raises(SourceDecodeError, match=r"exceeds max\.request\.size") as caught:
        run_to_end(config, spark)
    assert caught.value.record.topic == topic


def claimed_whole(  # noqa: PLR0917 - what the check reads
    kafka_bootstrap: str,
    name: str,
    output: str,
    expected: dict[bytes, list[bytes]],
    store: Path,
    group: str,
) -> None:
    """The output fits Kafka, its large rows claimed; the consumer library reads them whole."""
    # on the topic (confluent-kafka, read_committed): every record fits, the large rows are
    # references on their own keys, the claimed files are whole
    raw = consume_all(kafka_bootstrap, output)
    rows = [m for m in raw if m.key is not None]
    assert {m.partition for m in raw if m.key is None} == set(range(3)), "markers everywhere"
    assert all(len(m.key or b"") + len(m.value or b"") <= ROOM for m in raw)
    references = [m for m in rows if (m.value or b"").startswith(claims.PREFIX)]
    assert len(references) == 2  # room + 1 and five times the room; at the room: as it is
    for m in references:
        (header,) = m.headers
        assert header[0] == claims.HEADER
        found = claims.Reference.decode(m.value or b"")
        assert found is not None
        assert header[1] == found.uri.encode()
        assert claims.get(found) in expected[m.key or b""]
    assert sorted(len(f.read_bytes()) for f in store.rglob("*") if f.is_file()) == sorted(
        len(claims.get(claims.Reference.decode(m.value or b"")))
        for m in references  # type: ignore[arg-type]
    )
    per_key: dict[bytes, list[bytes]] = {}
    for m in rows:
        per_key.setdefault(m.key or b"", []).append(m.value or b"")
    assert {k: len(v) for k, v in per_key.items()} == {k: len(v) for k, v in expected.items()}

    # the consumer library, per row and columnar: every row whole, in commit order (until the
    # markers' time: no waiting for more)
    until = min(Hlc.parse(json.loads(m.value or b"")["resolved"]) for m in raw if m.key is None)
    for columnar in (False, True):
        found_rows: dict[bytes, list[bytes]] = {}
        with ChangefeedConsumer(
            Output.of_changefeed(kafka_bootstrap, name), f"{group}-{columnar}", columnar=columnar
        ) as consumer:
            windows = (
                (w.to_window() for w in consumer.arrow_windows(until=until, idle=30))
                if columnar
                else consumer.windows(until=until, idle=30)
            )
            for window in windows:
                for r in window.rows:
                    found_rows.setdefault(r.key, []).append(r.value or b"")
        assert found_rows == expected, f"columnar={columnar}"
