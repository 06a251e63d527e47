"""What a changed config may change of a changefeed (``pipeline/core/operators/update.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import parse_config
from pipeline.core.operators.update import REFUSED, SAFE, ConfigUpdate, check_update, identified
from schemas.errors import ConfigError
from tests.unit.test_config import minimal

pytestmark = pytest.mark.unit

ORDERS = {"topic": "src.orders", "table": "orders"}
CUSTOMERS = {"topic": "src.customers", "table": "customers"}


def full(**overrides: object) -> dict[str, Any]:
    """A config as the control plane compares it: every option, defaults filled in."""
    return parse_config(minimal(**overrides), env={}).model_dump(mode="json")


def shape(**overrides: object) -> dict[str, Any]:
    """A config as a checkpoint record keeps it."""
    return parse_config(minimal(**overrides), env={}).shape


def refused(before: dict[str, Any], after: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        check_update(before, after)
    return dict(caught.value.problems)


@pytest.mark.parametrize("compare", [full, shape])
def test_tables_are_added_and_dropped(compare: Any) -> None:
    before = compare(sources=[ORDERS])
    both = compare(sources=[ORDERS, CUSTOMERS])
    assert check_update(before, both) == ConfigUpdate(added=("src.customers",))
    assert check_update(both, compare(sources=[CUSTOMERS])) == ConfigUpdate(dropped=("src.orders",))
    assert not check_update(before, compare(sources=[ORDERS]))


def test_safe_options_change_and_are_named() -> None:
    before = full()
    after = full(
        resolved={"interval": "2s"},
        checkpoint={"min_checkpoint_frequency": "5s"},
        initial_scan={"rate_limit": 500},
        on_error="dlq",
        kafka={"bootstrap_servers": "127.0.0.1:9092", "options": {"sasl.password": "new"}},
    )
    update = check_update(before, after)
    assert update.options == (
        "checkpoint.min_checkpoint_frequency",
        "initial_scan.rate_limit",
        "kafka.options.sasl.password",
        "on_error",
        "resolved.interval",
    )
    assert "changed checkpoint.min_checkpoint_frequency" in update.describe()


@pytest.mark.parametrize(
    ("overrides", "option", "reason"),
    [
        ({"encoder": {"envelope": "bare"}}, "encoder.envelope", "shapes every message"),
        ({"encoder": {"envelope": "key_only"}}, "encoder.envelope", "shapes every message"),
        ({"encoder": {"diff": True}}, "encoder.diff", "shapes every message"),
        ({"encoder": {"key_in_value": True}}, "encoder.key_in_value", "shapes every message"),
        ({"sink": {"topic_prefix": "cdc."}}, "sink.topic_prefix", "output topics"),
        ({"sink": {"kafka": {"bootstrap_servers": "b:9092"}}}, "sink.kafka", "sink cluster"),
        ({"checkpoint": {"topic": "other"}}, "checkpoint.topic", "own records"),
        ({"initial_scan": "no"}, "initial_scan.mode", "has started"),
        ({"cursor": "1700000000000000000"}, "cursor", "has started"),
        ({"jobs": {"topic": "j"}}, "jobs.topic", "own records"),
    ],
)
def test_a_change_the_output_cannot_follow_is_refused_naming_the_option(
    overrides: dict[str, Any], option: str, reason: str
) -> None:
    problems = refused(full(), full(**overrides))
    assert option in problems, problems
    assert reason in problems[option]


MOVES = [  # the config overrides moving each cluster, and the ids a run records
    ({"kafka": {"bootstrap_servers": "elsewhere:9092"}}, "kafka", "offsets"),
    (
        {"sink": {"kafka": {"bootstrap_servers": "elsewhere:9092"}}},
        "sink.kafka",
        "output topics",
    ),
]
SINK = {"sink": {"kafka": {"bootstrap_servers": "sink:9092"}}}


def recorded(overrides: dict[str, Any], **ids: str | None) -> dict[str, Any]:
    """The shape a run records: the config's, and the id each cluster answered with."""
    return identified(shape(**{**SINK, **overrides}), {"kafka": None, "sink.kafka": None, **ids})


@pytest.mark.parametrize(("overrides", "section", "_reason"), MOVES)
def test_a_cluster_may_move_to_a_new_address_while_it_stays_itself(
    overrides: dict[str, Any], section: str, _reason: str
) -> None:
    ids = {"kafka": "source-id", "sink.kafka": "sink-id"}
    update = check_update(recorded({}, **ids), recorded(overrides, **ids))
    assert update.options == (f"{section}.bootstrap_servers",)
    # two configs carry no ids: the run compares what its checkpoint recorded
    assert check_update(full(**SINK), full(**{**SINK, **overrides})).options == (
        f"{section}.bootstrap_servers",
    )


@pytest.mark.parametrize(("overrides", "section", "reason"), MOVES)
def test_an_address_answering_as_another_cluster_is_refused_naming_both(
    overrides: dict[str, Any], section: str, reason: str
) -> None:
    before = recorded({}, **{section: "first"})
    for moved in ({}, overrides):  # the same address (a reformatted cluster), or a new one
        problems = refused(before, recorded(moved, **{section: "second"}))
        assert list(problems) == [f"{section}.bootstrap_servers"]
        message = problems[f"{section}.bootstrap_servers"]
        assert reason in message
        assert "'first'" in message
        assert "'second'" in message


@pytest.mark.parametrize(("overrides", "section", "_reason"), MOVES)
def test_a_checkpoint_without_ids_takes_them_at_its_own_address_only(
    overrides: dict[str, Any], section: str, _reason: str
) -> None:
    older = recorded({})  # a shape an older release wrote: no ids
    assert not check_update(older, recorded({}, **{section: "id"}))  # recorded, no change
    problems = refused(older, recorded(overrides, **{section: "id"}))
    assert "run once at the old address first" in problems[f"{section}.bootstrap_servers"]


def test_a_kept_table_must_stay_as_it_was() -> None:
    changed = {**ORDERS, "database": "other"}
    problems = refused(shape(sources=[ORDERS]), shape(sources=[CUSTOMERS, changed]))
    assert list(problems) == ["sources[1].database"]
    assert "'src.orders'" in problems["sources[1].database"]


def test_a_kept_table_may_evolve_its_columns() -> None:
    schema = {"type": "record", "name": "orders", "fields": [{"name": "id", "type": "long"}]}
    wider = {**schema, "fields": [*schema["fields"], {"name": "note", "type": ["null", "string"]}]}
    before = shape(sources=[{**ORDERS, "table_schema": schema, "primary_key": ["id"]}])
    after = shape(sources=[{**ORDERS, "table_schema": wider, "primary_key": ["id"]}])
    assert not check_update(before, after)  # the registry's compatibility rule decides (Avro)


def test_every_refusal_is_reported_at_once() -> None:
    after = full(encoder={"diff": True, "updated": True}, resolved={"interval": "1s"})
    assert set(refused(full(), after)) == {"encoder.diff", "encoder.updated"}


def test_a_safe_option_under_a_refused_section_is_the_longer_rule() -> None:
    assert "initial_scan" in REFUSED
    assert "initial_scan.rate_limit" in SAFE
    assert check_update(full(), full(initial_scan={"rate_limit": 10})).options == (
        "initial_scan.rate_limit",
    )


OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "resolved": st.fixed_dictionaries({"interval": st.sampled_from(["1s", "10s", "1m"])}),
        "on_error": st.sampled_from(["fail", "dlq", "pause"]),
        "encoder": st.fixed_dictionaries(
            {},
            optional={
                "diff": st.booleans(),
                "updated": st.booleans(),
                "envelope": st.sampled_from(["wrapped", "bare", "row"]),
            },
        ),
        "sink": st.fixed_dictionaries(
            {},
            optional={
                "topic_prefix": st.sampled_from(["", "cdc."]),
                "partitions": st.integers(1, 4),
            },
        ),
    },
)


@settings(max_examples=200, deadline=None)
@given(before=OPTIONS, after=OPTIONS)
def test_a_change_is_accepted_exactly_when_nothing_shaping_the_output_changed(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    try:
        old, new = full(**before), full(**after)
    except ConfigError:
        return  # an impossible combination (diff with row): never a config to compare
    shaping = {"encoder": old["encoder"], "prefix": old["sink"]["topic_prefix"]} != {
        "encoder": new["encoder"],
        "prefix": new["sink"]["topic_prefix"],
    }
    if shaping:
        with pytest.raises(ConfigError) as caught:
            check_update(old, new)
        assert all(
            p.startswith(("encoder.", "sink.topic_prefix")) for p, _ in caught.value.problems
        )
        return
    update = check_update(old, new)
    assert not update.added
    assert not update.dropped
    assert bool(update) == (old != new)
