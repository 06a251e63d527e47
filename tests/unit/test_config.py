from datetime import timedelta
from pathlib import Path

import pytest

from pipeline.config import load_config, parse_config
from schemas.errors import ConfigError
from schemas.hlc import Hlc

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def minimal(**overrides: object) -> dict[str, object]:
    raw: dict[str, object] = {
        "changefeed_id": "cf",
        "kafka": {"bootstrap_servers": "127.0.0.1:9092"},
        "sources": [{"topic": "src.orders", "table": "orders"}],
    }
    raw.update(overrides)
    return raw


def problems(raw: object) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, env={})
    return dict(caught.value.problems)


def test_example_config_loads_with_defaults_filled_in() -> None:
    config = load_config(EXAMPLES / "orders.yaml")
    assert config.changefeed_id == "orders-demo"
    assert config.output_topic(config.sources[0]) == "hw.orders"
    assert config.resolved.interval == timedelta(0)
    assert config.checkpoint.topic == "_highwater_checkpoints"
    assert config.checkpoint.frontier_checkpoint_max_bytes == 1 << 20
    assert config.spark.trigger.available_now is False  # the demo runs until stopped
    assert config.spark.trigger.processing_time == timedelta(seconds=1)


def test_invalid_example_names_all_three_problems_by_key_path() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(EXAMPLES / "invalid.yaml")
    found = dict(caught.value.problems)
    assert set(found) == {"sink.partitons", "sink.replication_factor", "encoder.diff"}
    assert "did you mean 'partitions'" in found["sink.partitons"]
    assert "integer" in found["sink.replication_factor"]
    assert "key_only" in found["encoder.diff"]


def test_config_is_frozen() -> None:
    config = parse_config(minimal(), env={})
    with pytest.raises(ValueError, match="frozen"):
        config.changefeed_id = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("10s", timedelta(seconds=10)),
        ("1h30m", timedelta(minutes=90)),
        (2, timedelta(seconds=2)),
        ("1d", timedelta(days=1)),
    ],
)
def test_durations(text: object, expected: timedelta) -> None:
    config = parse_config(minimal(resolved={"interval": text}), env={})
    assert config.resolved.interval == expected


def test_bad_duration_names_the_key() -> None:
    found = problems(minimal(resolved={"interval": "ten seconds"}))
    assert list(found) == ["resolved.interval"]
    assert "not a duration" in found["resolved.interval"]


def test_nested_list_paths_and_unknown_keys_in_lists() -> None:
    found = problems(minimal(sources=[{"topic": "a", "table": "t", "tabel": "x"}, {"topic": "b"}]))
    assert found.keys() == {"sources[0].tabel", "sources[1].table"}
    assert "did you mean 'table'" in found["sources[0].tabel"]


def test_cross_section_combinations_are_refused_together() -> None:
    found = problems(
        minimal(
            cursor="1700000000000000000.0000000000",
            end_time="1600000000000000000.0000000000",
            dlq_topic="dead",
            sources=[{"topic": "a", "table": "t"}, {"topic": "a", "table": "u"}],
        )
    )
    assert found.keys() == {"end_time", "dlq_topic", "sources[1].topic"}


def test_yaml_yes_no_for_initial_scan() -> None:
    assert parse_config(minimal(initial_scan={"mode": True}), env={}).initial_scan.mode == "yes"
    assert parse_config(minimal(initial_scan={"mode": False}), env={}).initial_scan.mode == "no"
    found = problems(minimal(initial_scan={"mode": "maybe"}))
    assert list(found) == ["initial_scan.mode"]


def test_initial_scan_shorthand_and_default_mode() -> None:
    assert parse_config(minimal(initial_scan="only"), env={}).scan_mode == "only"
    assert parse_config(minimal(initial_scan=False), env={}).scan_mode == "no"  # YAML's `no`
    assert parse_config(minimal(), env={}).scan_mode == "yes"
    with_cursor = parse_config(minimal(cursor="2023-11-27T16:25:11Z"), env={})
    assert with_cursor.scan_mode == "no"
    found = problems(minimal(initial_scan={"mode": "yes", "rate_limit": 0}))
    assert list(found) == ["initial_scan.rate_limit"]


def test_times_accept_hlc_and_rfc3339() -> None:
    config = parse_config(minimal(cursor="2023-11-27T16:25:11Z"), env={})
    assert config.cursor == Hlc(1701102311_000_000_000)
    found = problems(minimal(cursor="yesterday-ish"))
    assert "not a time" in found["cursor"]


def test_environment_substitution_and_missing_variables() -> None:
    raw = minimal(
        kafka={"bootstrap_servers": "${BROKERS}"}, sink={"topic_prefix": "${PREFIX:-hw.}"}
    )
    config = parse_config(raw, env={"BROKERS": "k1:9092,k2:9092"})
    assert config.kafka.bootstrap_servers == "k1:9092,k2:9092"
    assert config.sink.topic_prefix == "hw."
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, env={})
    assert caught.value.problems == (
        ("kafka.bootstrap_servers", "environment variable BROKERS is not set"),
    )


def test_secrets_never_appear_in_repr() -> None:
    config = parse_config(
        minimal(
            kafka={
                "bootstrap_servers": "b:9092",
                "options": {"sasl.password": "hunter2", "security.protocol": "SASL_SSL"},
            }
        ),
        env={},
    )
    assert "hunter2" not in repr(config)
    assert "SASL_SSL" in repr(config.kafka)
    assert config.kafka.options["sasl.password"] == "hunter2"


def test_cluster_deploy_mode_is_refused_naming_the_key() -> None:
    found = problems(minimal(spark={"conf": {"spark.submit.deployMode": "cluster"}}))
    assert "must stay 'client'" in found["spark.conf"]
    ok = parse_config(minimal(spark={"conf": {"spark.submit.deployMode": "client"}}), env={})
    assert ok.spark.conf == {"spark.submit.deployMode": "client"}


def test_producer_settings_that_break_guarantees_are_refused() -> None:
    found = problems(minimal(sink={"producer": {"acks": "1"}}))
    assert "acks" in found["sink.producer"]


def test_topic_naming() -> None:
    config = parse_config(
        minimal(sink={"topic_prefix": "cdc_"}, encoder={"full_table_name": True}), env={}
    )
    assert config.output_topic(config.sources[0]) == "cdc_defaultdb.public.orders"
    single = parse_config(minimal(sink={"topic_name": "all"}), env={})
    assert single.output_topic(single.sources[0]) == "all"


def test_not_a_mapping_and_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        parse_config(["a"], env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_one_topic_for_several_tables_is_refused_as_keys_could_collide() -> None:
    raw = minimal(sink={"topic_name": "all"})
    raw["sources"] = [{"topic": "src.a", "table": "a"}, {"topic": "src.b", "table": "b"}]
    with pytest.raises(ConfigError) as caught:
        parse_config(raw, env={})
    assert "sink.topic_name: cannot hold several tables" in str(caught.value)


def test_every_format_takes_an_initial_scan_debezium_with_its_transaction_topic() -> None:
    canal = [{"topic": "tidb-orders", "table": "orders", "format": "canal-json"}]
    assert parse_config(minimal(sources=canal), env={}).scan_mode == "yes"
    debezium = {**canal[0], "format": "debezium"}
    assert "transaction topic" in problems(minimal(sources=[debezium]))["sources[0].transactions"]
    with_topic = {**debezium, "topic": "pg.public.orders", "transactions": "pg.transaction"}
    assert parse_config(minimal(sources=[with_topic]), env={}).scan_mode == "yes"
    assert parse_config(minimal(sources=[debezium], initial_scan="no"), env={}).scan_mode == "no"


def test_debezium_sources_name_their_transaction_topic_and_tables() -> None:
    def source(**extra: object) -> dict[str, object]:
        return {"topic": "pg.public.orders", "table": "orders", "format": "debezium", **extra}

    config = parse_config(
        minimal(sources=[source(transactions="pg.transaction")], initial_scan="no"), env={}
    )
    assert config.transaction_topics == {"pg.transaction": {"public.orders": "pg.public.orders"}}
    assert config.unmarked_sources == []
    bare = parse_config(minimal(sources=[source()], initial_scan="no"), env={})
    assert bare.transaction_topics == {}
    assert bare.unmarked_sources == ["pg.public.orders"]  # rows flow, no marker is promised
    elsewhere = source(topic="cdc_orders", transactions="pg.transaction")
    assert (
        "does not start with"
        in problems(minimal(sources=[elsewhere], initial_scan="no"))["sources[0].collection"]
    )
    named = parse_config(
        minimal(sources=[{**elsewhere, "collection": "public.orders"}], initial_scan="no"), env={}
    )
    assert named.transaction_topics == {"pg.transaction": {"public.orders": "cdc_orders"}}
    native = {"topic": "src.orders", "table": "orders", "transactions": "pg.transaction"}
    assert (
        "only used with format: debezium"
        in problems(minimal(sources=[native]))["sources[0].transactions"]
    )
    query = minimal(sources=[source(transactions="pg.transaction")], initial_scan="no")
    query["encoder"] = {"where": "id > 1"}
    assert "table_schema" in problems(query)["encoder.where"]  # queries read every format
    # a config without them keeps the shape it had: existing changefeeds resume unchanged
    assert "transactions" not in parse_config(minimal(), env={}).shape["sources"][0]


def test_a_debezium_source_in_avro_names_its_registry() -> None:
    source = {"topic": "pg.public.orders", "table": "orders", "format": "debezium"}
    registry = {"url": "http://registry:8080/apis/ccompat/v7", "basic_auth_user_info": "u:secret"}
    config = parse_config(
        minimal(sources=[{**source, "schema_registry": registry}], initial_scan="no"), env={}
    )
    assert config.registries == {
        "pg.public.orders": {"url": registry["url"], "basic.auth.user.info": "u:secret"}
    }
    assert config.shape["sources"][0]["schema_registry"] == {"url": registry["url"]}  # no secret
    native = {"topic": "src.orders", "table": "orders", "schema_registry": registry}
    found = problems(minimal(sources=[native]))
    assert "only used with format: debezium" in found["sources[0].schema_registry"]
