"""``highwater apply --catalog``: the real chain's workloads and checks, and what it refuses.

Two seeded workloads (the apply tests' :class:`Workload`, with columns an Iceberg table types:
exact decimals, instants with their zone, text of any characters, nested JSON, booleans,
nulls, deletes, a column set only from mid-stream, upstream duplicates, bad records) flow
through a real changefeed (declared table schemas, JSON output) into its output topics
(:func:`through_changefeed`, the module fixture ``output``). Both engines apply that one
output in tests/integration/test_consumer_apply_iceberg_spark.py (one changefeed for both:
it is a minute of the suite); here are the exactly-once check's negative control on windows
a changefeed's consumer hands over, and the records a table cannot hold, sent to the dead
letters.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from highwater_consumer import Window
from highwater_consumer.dead_letters import DeadLetters
from highwater_consumer.iceberg import Cut, IcebergApplier, cut, load
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.iceberg import (
    exactly_once_problems,
    row_differences,
)
from tests.support.kafka import consume_all
from tests.support.workload import NOTES, Workload, live_at

PARTITIONS = 3
SEED = int(os.environ.get("HIGHWATER_APPLY_SEED", "11"))
CHANGES = 1000  # per table; the column `extra` is set from the 400th change on
TABLES = ("customers", "orders")  # in name order: the applier commits customers first
AMOUNTS = ["12345678901234567.89", "1.10", "1E+2", "-0", "0.000001", "-2.50e-3", "42"]
INSTANTS = ["2024-02-29T23:59:59.123456+05:30", "1970-01-01T00:00:00Z", "2038-01-19T03:14:08-08:00"]
NAMESPACE = "shop"


def decimal_type(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def record(name: str) -> dict[str, Any]:
    optional = {
        "amount": decimal_type(38, 18),
        "note": "string",
        "meta": "string",
        "maybe": "string",
        "flag": "boolean",
        "at": {"type": "long", "logicalType": "timestamp-micros"},
        "extra": decimal_type(38, 18),
    }
    fields: list[dict[str, Any]] = [
        {"name": "region", "type": "string"},
        {"name": "id", "type": "long"},
    ]
    fields += [{"name": n, "type": ["null", t], "default": None} for n, t in optional.items()]
    return {"type": "record", "name": name, "fields": fields}


class TypedWorkload(Workload):
    """The apply tests' workload with columns of the kinds an Iceberg table holds.

    ``meta_as_text``: the nested JSON as a JSON string (Avro output: a string column holds
    text, not an object), else as the object itself (JSON output passes it as written).
    """

    meta_as_text = False

    def _after(self) -> str:
        rnd = self._random
        tag, depth = rnd.choice(AMOUNTS), rnd.randint(0, 9)
        nested = f'{{"tags":["a",{tag}],"deep":{{"x":null,"y":[[{depth}]]}}}}'
        columns = [
            f'"amount":{rnd.choice(AMOUNTS)}',
            f'"note":"{rnd.choice(NOTES)}"',
            f'"meta":{json.dumps(nested) if self.meta_as_text else nested}',
            '"maybe":null',
            f'"flag":{rnd.choice(["true", "false"])}',
            f'"at":"{rnd.choice(INSTANTS)}"',
        ]
        if self._extra:
            columns.append(f'"extra":{rnd.choice(AMOUNTS)}')
        return "{" + ",".join(columns) + "}"


def expected_row(after: str) -> tuple[Any, ...]:
    """What a table holds of an ``after`` text: numbers by value, JSON by its text."""
    values = json.loads(after, parse_float=Decimal, parse_int=Decimal)
    meta = re.search(r'"meta":(\{"tags".*?\]\]\}\})', after)
    text = values["meta"] if isinstance(values["meta"], str) else None  # meta_as_text
    assert meta is not None or text is not None
    at = datetime.datetime.fromisoformat(values["at"]).astimezone(datetime.timezone.utc)
    return (
        values["amount"],
        values["note"],
        text if meta is None else meta.group(1),
        None,
        values["flag"],
        at,
        values.get("extra"),
    )


def table_at(catalog: Any, found: Cut, table: str) -> dict[tuple[str, int], Any]:
    rows = found.scan(catalog, table).to_arrow().to_pylist()
    columns = ("amount", "note", "meta", "maybe", "flag", "at", "extra")
    return {(r["region"], r["id"]): tuple(r[c] for c in columns) for r in rows}


def differences(catalog: Any, found: Cut, workloads: dict[str, Workload]) -> list[str]:
    """How the tables at a cut differ from the sources at its R (empty: equal)."""
    out = []
    for table, workload in workloads.items():
        live = live_at(workload.changes, found.resolved.wall)
        want = {key: expected_row(after) for key, after in live.items()}
        have = table_at(catalog, found, table)
        out += row_differences(f"{table} at {found.resolved}", want, have)
    return out


def produce(bootstrap: str, topics: dict[str, Workload]) -> None:
    """Each workload's changes (markers, duplicates, bad records among them), then its end."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    written = {topic: workload.records(CHANGES) for topic, workload in topics.items()}
    end = max(w.changes[-1].wall for w in topics.values())
    for topic, workload in topics.items():
        workload._wall = end  # one final marker time for both: every change below it
        for partition, key, value in [*written[topic], *workload.final_markers()]:
            producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(60) == 0


@dataclass(frozen=True)
class Applied:
    """The module's changefeed: its name and the workloads that went through it."""

    changefeed: str
    workloads: dict[str, Workload]


def through_changefeed(kafka_bootstrap: str, spark: Any, name: str, **encoder: Any) -> Applied:
    """The workloads through a changefeed ``name`` into its output topics (``encoder``'s)."""
    changefeed = f"{name}.cf.{uuid.uuid4().hex[:8]}"
    # no lagging partition: markers every 25 changes on every partition, so many windows
    workloads = {t: TypedWorkload(PARTITIONS, SEED + n, lagging=-1) for n, t in enumerate(TABLES)}
    for workload in workloads.values():
        workload.meta_as_text = encoder.get("format") == "avro"
    topics = {f"{changefeed}.src-{t}": workloads[t] for t in TABLES}
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, dict.fromkeys(topics, PARTITIONS))
    produce(kafka_bootstrap, topics)
    sources = [
        {
            "topic": topic,
            "table": table,
            "table_schema": record(table),
            "primary_key": ["region", "id"],
        }
        for topic, table in zip(topics, TABLES, strict=True)
    ]
    config = changefeed_config(
        kafka_bootstrap,
        changefeed,
        sources,
        encoder={"updated": True, "diff": True, **encoder},
        on_error="dlq",
        spark={"max_offsets_per_trigger": 50},  # many batches: many markers, many windows
    )
    run_to_end(config, spark)
    return Applied(changefeed, workloads)


@pytest.fixture(scope="module")
def output(kafka_bootstrap: str, spark: Any) -> Applied:
    """The workloads through a changefeed into its JSON output, once for every catalog."""
    return through_changefeed(kafka_bootstrap, spark, "iceberg-apply")


def test_a_window_applied_twice_fails_the_exactly_once_check(tmp_path: Path) -> None:
    """The negative control of the check above, on windows a changefeed's consumer hands over.

    An applier whose skip is defeated (it forgets what the tables hold) applies the same
    windows again: the check names each window twice, while the rows alone cannot tell.
    """
    from tests.unit.test_iceberg import SCHEMAS, windows  # noqa: PLC0415

    warehouse = {"warehouse": str(tmp_path)}
    first = IcebergApplier(warehouse, "cf", namespace=NAMESPACE, schemas=SCHEMAS)
    first.start(SCHEMAS)
    for window in windows():
        first.apply(window)
    catalog = load(warehouse)
    assert exactly_once_problems(catalog, NAMESPACE, "cf") == []
    forgetful = IcebergApplier(warehouse, "cf", namespace=NAMESPACE, schemas=SCHEMAS)
    forgetful.start(SCHEMAS)
    for target in forgetful.targets.values():
        target.resolved = None  # the bug: what the table holds is not read
    forgetful.apply(windows()[-1])
    problems = exactly_once_problems(catalog, NAMESPACE, "cf")
    with pytest.raises(AssertionError) as failed:
        assert problems == []
    print(f"the check failed as it must: {failed.value}")
    assert problems == [
        "customers: window 30.0000000000 applied twice",
        "customers: window 30.0000000000 after a later one",
        "orders: window 30.0000000000 applied twice",
        "orders: window 30.0000000000 after a later one",
    ]


def dead_lettering(
    kafka_bootstrap: str, tmp_path: Path
) -> tuple[str, dict[str, str], IcebergApplier]:
    """An applier on an embedded catalog whose unwritable records go to a new topic, started."""
    from tests.unit.test_iceberg import SCHEMAS  # noqa: PLC0415

    topic = f"apply-dlq-{uuid.uuid4().hex[:8]}"
    catalog = {"warehouse": str(tmp_path)}
    made = IcebergApplier(
        catalog,
        "cf",
        namespace=NAMESPACE,
        schemas=SCHEMAS,
        dead_letters=DeadLetters(kafka_bootstrap, topic),
    )
    made.start(SCHEMAS)
    return topic, catalog, made


def test_a_record_its_table_cannot_hold_goes_to_the_dead_letters_named(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """``--on-error dlq``: the record as it came, with why and where, and the window goes on.

    Without dead letters the same record stops the applier (the unit test
    ``test_a_value_its_column_cannot_hold_stops_the_applier_naming_the_record``).
    """
    from tests.unit.test_iceberg import change, windows  # noqa: PLC0415

    topic, catalog, made = dead_lettering(kafka_bootstrap, tmp_path)
    made.apply(windows()[0])
    good = change(20, "customers", ["us", 1], {"note": "kept"}, 41)
    bad = change(21, "orders", ["eu", 3], {"amount": 0.001}, 42)  # decimal(20,2) cannot hold it
    assert made.apply(Window(Hlc(40), (good, bad)))
    made.close()

    letters = consume_all(kafka_bootstrap, topic)
    assert [(m.key, m.value) for m in letters] == [(bad.key, bad.value)]  # as it came
    assert dict(letters[0].headers) == {
        "highwater.error": b"cannot be written to Iceberg table shop.orders: column 'amount': "
        b"0.001 does not fit decimal(20,2) without rounding",
        "highwater.source": b"out/0@42",
    }
    loaded = load(catalog)
    at = cut(loaded, NAMESPACE, "cf")
    assert at.resolved == Hlc(40)  # the window committed without it
    customers = at.scan(loaded, "customers").to_arrow().to_pylist()
    assert [(c["region"], c["id"], c["note"]) for c in customers] == [("us", 1, "kept")]
    orders = {(o["region"], o["id"]) for o in at.scan(loaded, "orders").to_arrow().to_pylist()}
    assert ("eu", 3) not in orders
    assert exactly_once_problems(loaded, NAMESPACE, "cf") == []


@pytest.mark.parametrize("lossy", [False, True], ids=["sent", "control"])
def test_many_bad_records_at_once_each_go_to_the_dead_letters_once(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lossy: bool
) -> None:
    """A window of 600 records, half of them bad in six ways: each bad one a dead letter.

    Values its column cannot hold (a decimal too fine, text for a number, a number too big,
    a number for text), a key that is not the table's, a null key column; every good row
    applied, the window committed once, no dead letter twice, each named by where it was.
    The control: dead letters that drop one in a hundred fail the comparison.
    """
    if lossy:
        send = DeadLetters.send

        def dropping(self: DeadLetters, record: str, *rest: Any) -> None:
            if not record.endswith("01"):
                send(self, record, *rest)

        monkeypatch.setattr(DeadLetters, "send", dropping)
    from tests.unit.test_iceberg import change  # noqa: PLC0415

    topic, catalog, made = dead_lettering(kafka_bootstrap, tmp_path)
    bad_ones = [
        (["eu", 1], {"amount": 0.001}),  # decimal(20,2) cannot hold it
        (["eu", 1], {"amount": "many"}),
        (["eu", 1], {"amount": 10**40}),
        (["eu", 1], {"note": 5}),
        (["eu"], {"note": "short key"}),
        ([None, 1], {"note": "null key column"}),
    ]
    rows, bad, good = [], [], {}
    for n in range(600):
        if n % 2:
            key, after = bad_ones[n % len(bad_ones)]
            row = change(1_000 + n, "orders", key, after, n)
            bad.append(row)
        else:
            row = change(1_000 + n, "orders", ["eu", n], {"note": f"good {n} é"}, n)
            good[("eu", n)] = f"good {n} é"
        rows.append(row)
    assert made.apply(Window(Hlc(5_000), tuple(rows)))
    made.close()

    letters = consume_all(kafka_bootstrap, topic)
    sources = [dict(m.headers)["highwater.source"] for m in letters]
    if lossy:
        assert sorted(sources) != sorted(f"out/0@{r.offset}".encode() for r in bad)
        return
    assert sorted((m.key, m.value) for m in letters) == sorted((r.key, r.value) for r in bad)
    assert sorted(sources) == sorted(f"out/0@{r.offset}".encode() for r in bad)  # each once
    assert all(dict(m.headers)["highwater.error"] for m in letters)
    loaded = load(catalog)
    at = cut(loaded, NAMESPACE, "cf")
    assert at.resolved == Hlc(5_000)
    table = at.scan(loaded, "orders").to_arrow().to_pylist()
    orders = {(o["region"], o["id"]): o["note"] for o in table}
    assert orders == good
    assert exactly_once_problems(loaded, NAMESPACE, "cf") == []
