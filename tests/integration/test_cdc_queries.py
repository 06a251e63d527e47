"""CDC queries (``select``/``where`` as Spark SQL over the row) on a real broker and Spark."""

import json
from pathlib import Path

import pytest

from pipeline.config import ChangefeedConfig
from pipeline.core.coordinator.changefeed import Changefeed
from schemas.errors import ConfigError
from tests.integration.test_changefeed import produce
from tests.support.changefeed import changefeed_config, read_output, run_to_end
from tests.support.kafka import consume_all

SCHEMA = str(Path(__file__).resolve().parents[2] / "examples" / "orders.avsc")
T = [f"17000000000000000{n:02d}.0000000000" for n in range(10)]


def order(order_id: int, amount: float, status: str = "new") -> dict:
    return {"region": "eu", "order_id": order_id, "amount": amount, "status": status}


HISTORY = [
    (0, ["eu", 1], {"after": order(1, 50.0), "updated": T[1]}),  # filtered out
    (0, ["eu", 2], {"after": order(2, 500.0), "updated": T[2]}),  # kept
    (0, ["eu", 1], {"after": order(1, 150.0), "before": order(1, 50.0), "updated": T[3]}),
    (0, ["eu", 2], {"after": order(2, 80.0), "before": order(2, 500.0), "updated": T[4]}),
    (0, ["eu", 2], {"after": None, "before": order(2, 80.0), "updated": T[5]}),  # judged on before
    (0, ["eu", 1], {"after": None, "before": order(1, 150.0), "updated": T[6]}),  # kept
    (0, ["eu", 3], {"after": None, "updated": T[7]}),  # a delete without before: kept
    (0, None, {"resolved": T[7]}),
]


def config_with(bootstrap: str, unique_name, **encoder) -> ChangefeedConfig:
    return changefeed_config(
        bootstrap,
        unique_name("cf"),
        [
            {
                "topic": unique_name("src"),
                "table": "orders",
                "table_schema": SCHEMA,
                "primary_key": ["region", "order_id"],
            }
        ],
        encoder={"updated": True, "diff": True, **encoder},
    )


def test_where_and_select_shape_the_output(kafka_bootstrap: str, unique_name, spark) -> None:
    config = config_with(
        kafka_bootstrap,
        unique_name,
        where="amount > 100",
        select=["order_id", "amount * 2 AS doubled", "upper(status) AS status"],
    )
    produce(kafka_bootstrap, config.sources[0].topic, HISTORY)
    run_to_end(config, spark)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    shaped = lambda oid, amount: {"order_id": oid, "doubled": amount * 2, "status": "NEW"}  # noqa: E731
    by_time = sorted(out.values(), key=lambda v: v["updated"])  # keys sit on different partitions
    assert by_time == [
        {"after": shaped(2, 500.0), "before": None, "updated": T[2]},
        {"after": shaped(1, 150.0), "before": shaped(1, 50.0), "updated": T[3]},
        {"after": None, "before": shaped(1, 150.0), "updated": T[6]},
        {"after": None, "before": None, "updated": T[7]},
    ]
    keys = sorted((json.loads(m.value)["updated"], json.loads(m.key)) for m in out.rows)
    assert [k for _, k in keys] == [["eu", 2], ["eu", 1], ["eu", 1], ["eu", 3]]
    assert {json.loads(m.value)["resolved"] for m in out.markers} == {T[7]}


def test_values_that_do_not_fit_the_declared_types_follow_on_error(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    config = config_with(kafka_bootstrap, unique_name, where="amount > 100")
    config = config.model_copy(update={"on_error": "dlq"})
    bad_value = {"after": {**order(9, 1.0), "amount": "lots"}, "updated": T[2]}
    produce(
        kafka_bootstrap,
        config.sources[0].topic,
        [HISTORY[1], (0, ["eu", 9], bad_value), (0, None, {"resolved": T[3]})],
    )
    run_to_end(config, spark)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert [v["after"]["order_id"] for v in out.values()] == [2]
    (dead,) = consume_all(kafka_bootstrap, config.effective_dlq_topic)
    assert json.loads(dead.value) == bad_value
    assert dict(dead.headers)["highwater.error"] == (
        b"value does not fit the declared schema of table 'orders'"
    )


@pytest.mark.parametrize(
    ("option", "value"),
    [("where", "no_such_column > 1"), ("select", ["order_id", "nope(1)"]), ("where", "a >")],
)
def test_a_bad_query_is_a_config_error_naming_the_option(
    kafka_bootstrap: str, unique_name, spark, option: str, value
) -> None:
    config = config_with(kafka_bootstrap, unique_name, **{option: value})
    with pytest.raises(ConfigError) as caught:
        Changefeed(config, spark).run()
    assert [p for p, _ in caught.value.problems] == [f"encoder.{option}"]


def test_the_initial_scan_judges_each_key_by_its_latest_version(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    config = config_with(
        kafka_bootstrap, unique_name, where="amount > 100", select=["order_id", "amount"]
    )
    config = config.model_copy(update={"cursor": None})  # the default: scan, then stream
    produce(
        kafka_bootstrap,
        config.sources[0].topic,
        [
            (0, ["eu", 1], {"after": order(1, 150.0), "updated": T[1]}),
            (0, ["eu", 1], {"after": order(1, 50.0), "updated": T[2]}),  # latest: filtered
            (0, ["eu", 2], {"after": order(2, 50.0), "updated": T[1]}),
            (0, ["eu", 2], {"after": order(2, 500.0), "updated": T[3]}),  # latest: kept
            (0, ["eu", 3], {"after": order(3, 200.0), "updated": T[2]}),
            (0, ["eu", 3], {"after": None, "before": order(3, 200.0), "updated": T[3]}),
            (0, None, {"resolved": T[4]}),
            (0, ["eu", 2], {"after": order(2, 600.0), "before": order(2, 500.0), "updated": T[5]}),
        ],
    )
    run_to_end(config, spark)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    shaped = lambda oid, amount: {"order_id": oid, "amount": amount}  # noqa: E731
    assert [json.loads(m.key) for m in out.rows] == [["eu", 2], ["eu", 2]]
    assert out.values() == [
        {"after": shaped(2, 500.0), "before": None, "updated": T[4]},  # the snapshot at T4
        {"after": shaped(2, 600.0), "before": shaped(2, 500.0), "updated": T[5]},
    ]


LEDGER = {
    "type": "record",
    "name": "ledger",
    "fields": [
        {"name": "id", "type": "long"},
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2},
            ],
        },
        {"name": "ratio", "type": ["null", "double"]},
        {
            "name": "legs",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "bytes",
                        "logicalType": "decimal",
                        "precision": 6,
                        "scale": 3,
                    },
                },
            ],
        },
    ],
}


def ledger_row(row_id: int, price: str, ratio: str = "1.10", legs: str = "[]") -> bytes:
    return f'{{"id":{row_id},"price":{price},"ratio":{ratio},"legs":{legs}}}'.encode()


def ledger_value(after: bytes | None, before: bytes | None, updated: str) -> bytes:
    after_text = b"null" if after is None else after
    before_text = b"null" if before is None else before
    return b'{"after":%s,"before":%s,"updated":"%s"}' % (after_text, before_text, updated.encode())


@pytest.mark.parametrize("select", [None, ["id", "price", "ratio AS r", "price * 2 AS doubled"]])
def test_declared_decimals_are_exact_never_rounded(
    kafka_bootstrap: str, unique_name, spark, select
) -> None:
    """A decimal that does not fit its declared type is a bad record, never rounded.

    Selected columns keep the source's text; computed ones are Spark's exact decimals.
    """
    source = unique_name("src")
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [{"topic": source, "table": "ledger", "table_schema": LEDGER, "primary_key": ["id"]}],
        encoder={"updated": True, "diff": True, "where": "price > 1.00", "select": select},
        on_error="dlq",
    )
    big = ledger_row(1, "12345678901234567.89", legs="[1.500,2E+0]")
    big_later = ledger_row(1, "12345678901234567.90", ratio="1E+2")
    rounded = ledger_row(2, "1.105")  # decimal(20,2) would round it to 1.11
    cheap = ledger_row(3, "0.50")  # filtered out by where
    leg_rounded = ledger_row(4, "7.00", legs="[1.5,1.0005]")  # a nested decimal(6,3)
    hundred = ledger_row(5, "1E+2", ratio="-0")
    records = [
        (0, b"[1]", ledger_value(big, None, T[1])),
        (0, b"[2]", ledger_value(rounded, None, T[2])),
        (0, b"[3]", ledger_value(cheap, None, T[3])),
        (0, b"[1]", ledger_value(big_later, big, T[4])),
        (1, b"[4]", ledger_value(leg_rounded, None, T[2])),
        (1, b"[5]", ledger_value(hundred, None, T[3])),
        (0, None, {"resolved": T[5]}),
        (1, None, {"resolved": T[5]}),
    ]
    produce(kafka_bootstrap, source, records, partitions=2)
    run_to_end(config, spark)

    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    if select is None:  # where alone: the source's bytes
        expected = [records[0][2], records[3][2], records[5][2]]
    else:
        expected = [
            ledger_value(
                b'{"id":1,"price":12345678901234567.89,"r":1.10,"doubled":24691357802469135.78}',
                None,
                T[1],
            ),
            ledger_value(
                b'{"id":1,"price":12345678901234567.90,"r":1E+2,"doubled":24691357802469135.80}',
                b'{"id":1,"price":12345678901234567.89,"r":1.10,"doubled":24691357802469135.78}',
                T[4],
            ),
            ledger_value(b'{"id":5,"price":1E+2,"r":-0,"doubled":200.00}', None, T[3]),
        ]
    assert sorted(m.value for m in out.rows) == sorted(expected)
    dead = {
        m.value: dict(m.headers) for m in consume_all(kafka_bootstrap, config.effective_dlq_topic)
    }
    assert set(dead) == {records[1][2], records[4][2]}  # the source records, as they came
    assert b"price" in dead[records[1][2]]["highwater.error"]
    assert b"1.105" in dead[records[1][2]]["highwater.error"]
    assert b"1.0005" in dead[records[4][2]]["highwater.error"]
    assert dead[records[4][2]]["highwater.source"] == f"{source}/1@0".encode()
    assert {json.loads(m.value)["resolved"] for m in out.markers} == {T[5]}


def test_select_star_with_a_new_column_upstream_pauses_rather_than_drop_it(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    """JSON output with ``select *`` pauses at a row with a column the table does not declare.

    Spark's ``*`` is the declared columns, so the row would lose it. The changefeed pauses
    there (``stop``, the default for a declared schema), naming the column; under ``evolve``
    too, saying why (the query's columns are the declared ones).
    """
    from pipeline.control.changefeeds import Changefeeds  # noqa: PLC0415
    from pipeline.control.context import OperatorContext  # noqa: PLC0415

    config = config_with(kafka_bootstrap, unique_name, select=["*"])
    wider = {"after": {**order(4, 200.0), "vip": True}, "updated": T[4]}
    produce(
        kafka_bootstrap,
        config.sources[0].topic,
        [HISTORY[1], (0, None, {"resolved": T[3]}), (0, ["eu", 4], wider)],
    )
    changefeeds = Changefeeds(OperatorContext({"bootstrap.servers": kafka_bootstrap}))
    for policy in ("stop", "evolve"):
        run_to_end(config.model_copy(update={"schema_change_policy": policy}), spark)
        status = changefeeds.get(config.changefeed_id).status
        assert status is not None
        assert status.state == "paused"
        assert status.error is not None
        assert "table 'orders' changed shape: column(s) vip not in its output schema" in (
            status.error
        )
        assert (
            "writes the declared table_schema's columns (a CDC query's select *" in status.error
        ) == (policy == "evolve")
        changefeeds.resume(config.changefeed_id)
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    (after,) = [v["after"] for v in out.values()]
    declared = [f["name"] for f in json.loads(Path(SCHEMA).read_text())["fields"]]
    assert list(after) == declared  # the row's columns, as declared
    assert {c: v for c, v in after.items() if v is not None} == order(2, 500.0)
