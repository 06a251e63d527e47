"""The operators' REST API (``highwater server``) on a real broker.

The app runs in-process (ASGI); each test has its own safepoint topic, jobs topic and cluster
name, so it sees only its own data.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import schemathesis
from confluent_kafka import Producer
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from pipeline.control.changefeeds import Changefeeds
from pipeline.control.context import OperatorContext
from pipeline.control.history import LagHistory
from pipeline.control.server import CONFIG_FORMAT, TIME_FORMAT, create_app
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.operators.status import JobStatus
from pipeline.core.progress.safepoints import SafepointRegistry
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from sinks.compacted import CompactedTopic

TOKEN = "s3cret-token"  # noqa: S105 - a test token
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROUTES = [
    ("GET", "/api/v2/safepoint"),
    ("POST", "/api/v2/safepoint"),
    ("DELETE", "/api/v2/safepoint"),
    ("GET", "/api/v2/changefeeds"),
    ("POST", "/api/v2/changefeeds"),
    ("GET", "/api/v2/changefeeds/orders"),
    ("PUT", "/api/v2/changefeeds/orders"),
    ("POST", "/api/v2/changefeeds/orders/pause"),
    ("POST", "/api/v2/changefeeds/orders/resume"),
    ("DELETE", "/api/v2/changefeeds/orders"),
]


@pytest.fixture
def context(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> OperatorContext:
    """A safepoint topic, jobs topic and cluster of the test's own."""
    return OperatorContext(
        {"bootstrap.servers": kafka_bootstrap},
        safepoint_topic=unique_name("safepoints"),
        cluster=f"c{uuid.uuid4().hex[:12]}",
        jobs_topic=unique_name("jobs"),
    )


@pytest.fixture
def client(context: OperatorContext) -> Iterator[TestClient]:
    with TestClient(create_app(context, TOKEN)) as test_client:
        yield test_client


def _is_error(response: Any, status: int, code: str) -> dict[str, str]:
    assert response.status_code == status, response.text
    body: dict[str, str] = response.json()
    assert set(body) == {"error_code", "error_msg"}
    assert body["error_code"] == code
    assert body["error_msg"]
    return body


# -- the OpenAPI document, checked by schemathesis ---------------------------------------------


# What parse_time accepts, for schemathesis to draw valid start_ts values from.
TIMES = st.one_of(
    st.just("now"),
    st.builds("-{}{}".format, st.integers(0, 10**6), st.sampled_from(["ns", "ms", "s", "h", "d"])),
    st.builds(Hlc, st.integers(0, 10**20 - 1), st.integers(0, 9_999_999_999)).map(str),
    st.datetimes(
        min_value=datetime(1971, 1, 1),  # noqa: DTZ001 - the bounds of naive draws
        max_value=datetime(5000, 12, 31),  # noqa: DTZ001
        timezones=st.integers(-23 * 60, 23 * 60).map(lambda m: timezone(timedelta(minutes=m))),
    ).map(datetime.isoformat),
)
schemathesis.openapi.format(TIME_FORMAT, TIMES)
# Valid changefeed configs for the API's jobs topic (one of this module's, fixed at import:
# examples may be drawn before the fixture runs).
API_JOBS = f"_highwater_jobs_api_{uuid.uuid4().hex[:8]}"
CONFIGS = st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True).map(
    lambda changefeed_id: _config(OperatorContext({}, jobs_topic=API_JOBS), changefeed_id)
)
schemathesis.openapi.format(CONFIG_FORMAT, CONFIGS)

# The document is read once, at import; the fixture points the app at each run's topics.
API = create_app(OperatorContext({}), TOKEN)
schema = schemathesis.openapi.from_asgi("/openapi.json", API)
schema.config.generation.update(max_examples=8)


@pytest.fixture
def api(context: OperatorContext) -> OperatorContext:
    """API, on this run's topics, with a changefeed's status and safepoint to return."""
    context = replace(context, jobs_topic=API_JOBS)
    jobs = CompactedTopic(context.client, context.jobs_topic)
    registry = SafepointRegistry(context.client, context.safepoint_topic, context.cluster)
    try:
        jobs.ensure()
        jobs.put("orders", JobStatus("orders", "running", high_water=Hlc(5, 1)).encode())
        registry.ensure()
        registry.hold("orders", Hlc(5, 1), 3_600, {SourcePartition("src", 0): 42})
    finally:
        jobs.close()
        registry.close()
    API.state.context = context
    return context


@schema.parametrize()
@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_operation_conforms_to_the_openapi_document(case: Any, api: OperatorContext) -> None:
    assert API.state.context is api
    case.call_and_validate(headers=AUTH)


# -- auth --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_route_needs_the_token(client: TestClient, method: str, path: str) -> None:
    body = {"start_ts": "now"} if method != "GET" else None
    missing = client.request(method, path, json=body)
    _is_error(missing, 401, "unauthorized")
    assert missing.headers["WWW-Authenticate"] == "Bearer"
    wrong = client.request(method, path, json=body, headers={"Authorization": "Bearer nope"})
    _is_error(wrong, 401, "unauthorized")
    basic = client.request(method, path, json=body, headers={"Authorization": f"Basic {TOKEN}"})
    _is_error(basic, 401, "unauthorized")
    assert client.get("/api/v2/safepoint", headers=AUTH).json()["safepoints"] == []


def test_the_openapi_document_needs_no_token_and_declares_auth_and_errors(
    client: TestClient,
) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    document = response.json()
    assert document["components"]["securitySchemes"] == {
        "HTTPBearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "the token given to 'highwater server'",
        }
    }
    operations = [
        (method.upper(), path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
    ]
    assert sorted((m, p) for m, p, _ in operations) == sorted(
        [
            ("GET", "/api/v2/safepoint"),
            ("POST", "/api/v2/safepoint"),
            ("DELETE", "/api/v2/safepoint"),
            ("GET", "/api/v2/changefeeds"),
            ("POST", "/api/v2/changefeeds"),
            ("GET", "/api/v2/changefeeds/{changefeed_id}"),
            ("GET", "/api/v2/changefeeds/{changefeed_id}/lag"),
            ("GET", "/api/v2/changefeeds/{changefeed_id}/dead-letters"),
            ("PUT", "/api/v2/changefeeds/{changefeed_id}"),
            ("POST", "/api/v2/changefeeds/{changefeed_id}/pause"),
            ("POST", "/api/v2/changefeeds/{changefeed_id}/resume"),
            ("DELETE", "/api/v2/changefeeds/{changefeed_id}"),
        ]
    )
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for _, _, operation in operations:
        assert operation["security"] == [{"HTTPBearer": []}]
        assert operation["responses"]["401"]["content"] == error
        assert "422" not in operation["responses"]
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_errors_outside_the_routes_have_the_same_shape(client: TestClient) -> None:
    _is_error(client.get("/api/v2/nowhere", headers=AUTH), 404, "not_found")
    refused = client.put("/api/v2/safepoint", headers=AUTH)
    _is_error(refused, 405, "method_not_allowed")
    assert refused.headers["Allow"] == "DELETE, GET, POST"


# -- safepoints --------------------------------------------------------------------------------


def test_a_safepoint_is_set_listed_refreshed_and_deleted(client: TestClient) -> None:
    assert client.get("/api/v2/safepoint", headers=AUTH).json()["safepoints"] == []
    set_ = client.post(
        "/api/v2/safepoint",
        json={"service_id_suffix": "backup", "start_ts": "1701102311425045162.0000000000"},
        headers=AUTH,
    )
    assert set_.status_code == 200, set_.text
    listed = client.get("/api/v2/safepoint", headers=AUTH).json()
    cluster = listed["cluster"]
    assert listed["gc_safe_point"] == "0.0000000000"
    [safepoint] = listed["safepoints"]
    assert safepoint == set_.json()
    assert safepoint["service_id"] == f"highwater-{cluster}-backup"
    assert safepoint["safepoint"] == "1701102311425045162.0000000000"
    assert safepoint["ttl"] == 86_400
    assert safepoint["owner"] == "user"
    assert safepoint["offsets"] == {}
    assert safepoint["expired"] is False
    updated = datetime.fromisoformat(safepoint["updated_at"])
    expires = datetime.fromisoformat(safepoint["expires_at"])
    assert abs((expires - updated).total_seconds() - 86_400) < 0.002

    # The default suffix, a relative start and a short TTL; setting it again refreshes it.
    for ttl in (60, 120.5):
        again = client.post("/api/v2/safepoint", json={"start_ts": "-1h", "ttl": ttl}, headers=AUTH)
        assert again.status_code == 200, again.text
    listed = client.get("/api/v2/safepoint", headers=AUTH).json()["safepoints"]
    assert [(s["service_id"], s["ttl"]) for s in listed] == [
        (f"highwater-{cluster}-backup", 86_400),
        (f"highwater-{cluster}-user-defined", 120.5),
    ]

    deleted = client.request(
        "DELETE", "/api/v2/safepoint", json={"service_id_suffix": "backup"}, headers=AUTH
    )
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["service_id"] == f"highwater-{cluster}-backup"
    listed = client.get("/api/v2/safepoint", headers=AUTH).json()["safepoints"]
    assert [s["service_id"] for s in listed] == [f"highwater-{cluster}-user-defined"]
    gone = client.request(
        "DELETE", "/api/v2/safepoint", json={"service_id_suffix": "backup"}, headers=AUTH
    )
    assert "backup" in _is_error(gone, 404, "not_found")["error_msg"]


@pytest.mark.parametrize("ttl", [0, -5, 0.0])
def test_a_ttl_that_is_not_positive_is_refused(client: TestClient, ttl: float) -> None:
    response = client.post("/api/v2/safepoint", json={"start_ts": "now", "ttl": ttl}, headers=AUTH)
    assert "ttl" in _is_error(response, 400, "invalid_argument")["error_msg"]


@pytest.mark.parametrize(
    ("body", "mentions"),
    [
        ({"start_ts": "yesterday"}, "start_ts: not a time"),
        ({"start_ts": "9999-01-01T00:00:00Z"}, "start_ts"),  # beyond the largest HLC
        ({}, "start_ts: Field required"),
        ({"start_ts": "now", "ttl": "60"}, "ttl"),
        ({"start_ts": "now", "tll": 60}, "tll: Extra inputs are not permitted"),
        ({"start_ts": "now", "service_id_suffix": " padded"}, "service_id_suffix"),
        ({"start_ts": "now", "service_id_suffix": ""}, "service_id_suffix"),
    ],
)
def test_a_bad_body_is_refused(client: TestClient, body: dict[str, Any], mentions: str) -> None:
    response = client.post("/api/v2/safepoint", json=body, headers=AUTH)
    assert mentions in _is_error(response, 400, "invalid_argument")["error_msg"]


def test_a_body_that_is_not_json_is_refused(client: TestClient) -> None:
    response = client.post(
        "/api/v2/safepoint",
        content=b"{start_ts: now}",
        headers={**AUTH, "Content-Type": "application/json"},
    )
    assert "not JSON" in _is_error(response, 400, "invalid_argument")["error_msg"]


def test_a_changefeeds_own_safepoint_is_forbidden(
    client: TestClient, context: OperatorContext
) -> None:
    registry = SafepointRegistry(context.client, context.safepoint_topic, context.cluster)
    try:
        registry.ensure()
        registry.hold("x", Hlc(1_701_102_311_425_045_162), 3_600)
    finally:
        registry.close()
    body = {"service_id_suffix": "changefeed-x", "start_ts": "now"}
    set_ = client.post("/api/v2/safepoint", json=body, headers=AUTH)
    assert "changefeed" in _is_error(set_, 403, "forbidden")["error_msg"]
    delete = client.request(
        "DELETE", "/api/v2/safepoint", json={"service_id_suffix": "changefeed-x"}, headers=AUTH
    )
    _is_error(delete, 403, "forbidden")
    [held] = client.get("/api/v2/safepoint", headers=AUTH).json()["safepoints"]
    assert held["owner"] == "changefeed:x"
    assert held["safepoint"] == "1701102311425045162.0000000000"


def test_a_start_below_the_gc_safe_point_is_refused(
    client: TestClient, context: OperatorContext
) -> None:
    gc = Hlc(1_701_102_311_425_045_162, 7)
    registry = SafepointRegistry(context.client, context.safepoint_topic, context.cluster)
    try:
        registry.ensure()
        registry.advance_gc(gc)
    finally:
        registry.close()
    below = client.post("/api/v2/safepoint", json={"start_ts": str(Hlc(gc.wall, 6))}, headers=AUTH)
    message = _is_error(below, 400, "invalid_argument")["error_msg"]
    assert f"below the GC safe point {gc}" in message
    at = client.post("/api/v2/safepoint", json={"start_ts": str(gc)}, headers=AUTH)
    assert at.status_code == 200, at.text
    listed = client.get("/api/v2/safepoint", headers=AUTH).json()
    assert listed["gc_safe_point"] == str(gc)
    assert [s["safepoint"] for s in listed["safepoints"]] == [str(gc)]


# -- changefeeds -------------------------------------------------------------------------------


SCHEMA = {
    "version": "id 7 of subject orders-value",
    "columns": ["id", "amount", "vip"],
    "changed_at": "1701102311425045162.0000000000",
    "added": ["vip"],
}


def test_changefeed_status_is_read_from_the_jobs_topic(
    client: TestClient, context: OperatorContext
) -> None:
    assert client.get("/api/v2/changefeeds", headers=AUTH).json() == []
    orders = JobStatus(
        "orders",
        "scanning",
        high_water=Hlc(1_701_102_311_425_045_162, 3),
        statement_time=Hlc(1_701_102_300_000_000_000),
        scan={"chunks_done": 3, "chunks_total": 12},
        warnings=["retention of src is 1 day"],
        schemas={"orders": SCHEMA},
        delivery="exactly_once",
        generation=3,
    )
    failed = JobStatus("audit", "failed", error="the source topic is gone")
    jobs = CompactedTopic(context.client, context.jobs_topic)
    try:
        jobs.ensure()
        jobs.put("orders", orders.encode())
        jobs.put("audit", failed.encode())
    finally:
        jobs.close()

    one = client.get("/api/v2/changefeeds/orders", headers=AUTH)
    assert one.status_code == 200, one.text
    assert one.json() == {
        "changefeed_id": "orders",
        "desired": None,  # run by `highwater run`, not created through the control plane
        "reason": None,
        "bad_record": None,
        "state": "scanning",
        "high_water": "1701102311425045162.0000000003",
        "statement_time": "1701102300000000000.0000000000",
        "last_marker": None,
        "scan": {"chunks_done": 3, "chunks_total": 12},
        "error": None,
        "safepoint": None,
        "warnings": ["retention of src is 1 day"],
        "updated_at": orders.updated_at,
        "metrics_url": None,
        "schemas": {"orders": SCHEMA},  # its output schema's version and last change
        "delivery": "exactly_once",  # and, exactly once, the run's generation
        "generation": 3,
        "partitions": None,  # written by a run: each source partition's resolved time
        "rows": None,  # and the rows it wrote so far
        "sources": [],  # its config's topics (none here), else those its partitions name
        "outputs": [],  # its status's output topics
        "rows_per_second": None,  # the server's samples: none yet
        "dead_letters": None,
        "dead_letter_topic": None,
    }
    every = client.get("/api/v2/changefeeds", headers=AUTH).json()
    assert [(c["changefeed_id"], c["state"], c["error"]) for c in every] == [
        ("audit", "failed", "the source topic is gone"),
        ("orders", "scanning", None),
    ]
    missing = client.get("/api/v2/changefeeds/nope", headers=AUTH)
    assert "nope" in _is_error(missing, 404, "not_found")["error_msg"]


def test_a_changefeeds_lag_over_the_last_hour_is_kept_by_the_server(
    client: TestClient, context: OperatorContext
) -> None:
    """The server samples each job status; ``/lag`` answers the last hour's points.

    A sampler with a clock of the test's own (the app's samples every 10 s; this one in its
    place): a point per sample with the lag and rows/s then (the rows the run wrote between
    two statuses over their time apart; a status not rewritten for a minute: 0), an hour's
    window (the oldest points go), a changefeed without a status has none, an unknown one is
    404. The list shows the last sample's rows/s.
    """
    now = [1_800_000_000.0]
    history = LagHistory(lambda: Changefeeds(context).all(), clock=lambda: now[0])
    client.app.state.history = history  # type: ignore[attr-defined]
    jobs = CompactedTopic(context.client, context.jobs_topic)

    def report(state: str, behind: int, rows: int) -> None:
        written = datetime.fromtimestamp(now[0], timezone.utc).isoformat()
        high_water = Hlc(int(now[0] - behind) * 10**9, 2)
        status = JobStatus("orders", state, high_water, updated_at=written, rows=rows)
        jobs.put("orders", status.encode())

    try:
        jobs.ensure()
        report("scanning", 42, 0)
        history.sample()
        now[0] += 10
        report("running", 5, 25_000)
        history.sample()
        now[0] += 3600  # an hour on: the first point is older than the window
        history.sample()  # the status as it was (the high-water has not moved since)
    finally:
        jobs.close()
    answered = client.get("/api/v2/changefeeds/orders/lag", headers=AUTH)
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["every_seconds"] == 10
    assert [
        (p["at"], p["lag_seconds"], p["state"], p["rows_per_second"]) for p in body["points"]
    ] == [
        (1_800_000_010.0, 5.0, "running", 2500.0),
        (1_800_003_610.0, 3605.0, "running", 0.0),
    ]
    listed = client.get("/api/v2/changefeeds", headers=AUTH).json()
    assert [c["rows_per_second"] for c in listed if c["changefeed_id"] == "orders"] == [0.0]
    assert body["points"][0]["high_water"] == str(Hlc(1_800_000_005 * 10**9, 2))
    missing = client.get("/api/v2/changefeeds/nope/lag", headers=AUTH)
    assert "nope" in _is_error(missing, 404, "not_found")["error_msg"]


def test_a_changefeeds_dead_letters_are_counted_and_the_latest_shown(
    client: TestClient, context: OperatorContext, unique_name: Callable[[str], str]
) -> None:
    """A changefeed's dead letters: how many, and the latest first.

    The topic its job status names: its size by offsets, the latest as text with the reason
    and source the changefeed wrote in their headers; none before any is written.
    """
    changefeed, topic = f"dl{uuid.uuid4().hex[:8]}", unique_name("dlq")
    output = {"topics": {"o": "orders"}, "format": "json", "envelope": "wrapped"}
    status = JobStatus(
        changefeed, "running", output={**output, "updated": True, "dead_letters": topic}
    )
    jobs = CompactedTopic(context.client, context.jobs_topic)
    try:
        jobs.ensure()
        jobs.put(changefeed, status.encode())
    finally:
        jobs.close()
    path = f"/api/v2/changefeeds/{changefeed}/dead-letters"
    none = client.get(path, headers=AUTH).json()
    assert (none["topic"], none["exists"], none["offsets"], none["latest"]) == (topic, False, 0, [])

    ensure_topics(context.client, {topic: 2})
    producer = Producer(context.client)
    letters = [
        (b'["eu",1]', b"not json", "src/0@7", 0),
        (b'["eu",2]', b"\xff\xfe" + b"x" * 600, "src/1@9", 1),  # invalid UTF-8, long
        (None, b'{"after": {}}', "src/0@12", 0),
    ]
    for key, value, source, partition in letters:
        headers = [
            ("highwater.error", b"the envelope has no updated"),
            ("highwater.source", source.encode()),
        ]
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        producer.flush(30)
        time.sleep(0.01)  # each its own timestamp: newest first is well defined
    found = client.get(path, headers=AUTH, params={"limit": 2})
    assert found.status_code == 200, found.text
    body = found.json()
    assert (body["exists"], body["offsets"]) == (True, 3)
    assert [(d["source"], d["key"]) for d in body["latest"]] == [
        ("src/0@12", None),
        ("src/1@9", '["eu",2]'),
    ]
    long = body["latest"][1]
    assert long["value"].startswith("\ufffd\ufffd" + "x" * 10)
    assert long["value"].endswith("…")
    assert len(long["value"]) == 501
    assert long["error"] == "the envelope has no updated"
    assert (long["topic"], long["partition"], long["offset"]) == (topic, 1, 0)
    counted = client.get(path, headers=AUTH, params={"limit": 0}).json()
    assert (counted["offsets"], counted["latest"]) == (3, [])
    # the server's sampler counts them for the list (one consumer per cluster)
    feeds = Changefeeds(context)
    history = LagHistory(feeds.all, dead_letters=feeds.dead_letter_counts)
    client.app.state.history = history  # type: ignore[attr-defined]
    history.sample()
    listed = client.get(f"/api/v2/changefeeds/{changefeed}", headers=AUTH).json()
    assert (listed["dead_letters"], listed["dead_letter_topic"], listed["outputs"]) == (
        3,
        topic,
        ["o"],
    )
    assert client.get(path, headers=AUTH, params={"limit": 101}).status_code == 400
    missing = client.get("/api/v2/changefeeds/nope/dead-letters", headers=AUTH)
    assert "nope" in _is_error(missing, 404, "not_found")["error_msg"]


def _config(context: OperatorContext, changefeed_id: str, **extra: Any) -> str:
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": context.client.get("bootstrap.servers", "localhost:9092")},
        "sources": [{"topic": "src", "table": "t"}],
        "jobs": {"topic": context.jobs_topic},
        **extra,
    }
    return json.dumps(raw)  # YAML is a superset of JSON


def test_a_changefeed_is_created_paused_resumed_and_removed(
    client: TestClient, context: OperatorContext
) -> None:
    api = "/api/v2/changefeeds"
    created = client.post(api, headers=AUTH, json={"config": _config(context, "cf1")})
    assert created.status_code == 201, created.text
    assert created.json()["desired"] == "running"
    assert created.json()["state"] == "pending"  # no server runs it here
    again = client.post(api, headers=AUTH, json={"config": _config(context, "cf1")})
    assert "exists" in _is_error(again, 409, "conflict")["error_msg"]

    resumed = client.post(f"{api}/cf1/resume", headers=AUTH)
    assert "not paused" in _is_error(resumed, 409, "conflict")["error_msg"]
    paused = client.post(f"{api}/cf1/pause", headers=AUTH)
    assert (paused.status_code, paused.json()["desired"]) == (200, "paused"), paused.text
    skip = client.post(f"{api}/cf1/resume", headers=AUTH, json={"skip_bad_record": True})
    assert "nothing to skip" in _is_error(skip, 400, "invalid_argument")["error_msg"]
    resumed = client.post(f"{api}/cf1/resume", headers=AUTH, json={})
    assert (resumed.status_code, resumed.json()["desired"]) == (200, "running"), resumed.text

    removed = client.delete(f"{api}/cf1", headers=AUTH)
    assert (removed.status_code, removed.json()["desired"]) == (200, "removed"), removed.text
    after = client.post(f"{api}/cf1/pause", headers=AUTH)
    assert "removed" in _is_error(after, 409, "conflict")["error_msg"]
    recreated = client.post(api, headers=AUTH, json={"config": _config(context, "cf1")})
    assert recreated.status_code == 201, recreated.text  # a removed id may be used again
    for verb in ("pause", "resume"):
        missing = client.post(f"{api}/nope/{verb}", headers=AUTH)
        _is_error(missing, 404, "not_found")


def test_a_paused_changefeed_is_updated_and_a_shape_change_is_refused_naming_it(
    client: TestClient, context: OperatorContext
) -> None:
    api = "/api/v2/changefeeds"
    assert (
        client.post(api, headers=AUTH, json={"config": _config(context, "up")}).status_code == 201
    )
    two = [{"topic": "src", "table": "t"}, {"topic": "src2", "table": "u"}]
    added = {"config": _config(context, "up", sources=two, resolved={"interval": "2s"})}
    running = client.put(f"{api}/up", headers=AUTH, json=added)
    assert "pause it" in _is_error(running, 409, "conflict")["error_msg"]
    assert client.post(f"{api}/up/pause", headers=AUTH).status_code == 200

    reshaped = {"config": _config(context, "up", encoder={"envelope": "bare", "diff": True})}
    refused = _is_error(
        client.put(f"{api}/up", headers=AUTH, json=reshaped), 400, "invalid_argument"
    )
    assert "encoder.envelope: shapes every message" in refused["error_msg"]
    assert "encoder.diff: shapes every message" in refused["error_msg"]
    other = {"config": _config(context, "other")}
    named = _is_error(client.put(f"{api}/up", headers=AUTH, json=other), 400, "invalid_argument")
    assert "changefeed_id" in named["error_msg"]
    _is_error(client.put(f"{api}/nope", headers=AUTH, json=added), 404, "not_found")

    updated = client.put(f"{api}/up", headers=AUTH, json=added)
    assert (updated.status_code, updated.json()["desired"]) == (200, "paused"), updated.text
    spec = Changefeeds(context).get("up").spec
    assert spec is not None
    assert spec.config == added["config"]  # what the next run (after resume) runs with


@pytest.mark.parametrize(
    ("config", "mentions"),
    [
        ("changefeed_id: [", "not valid YAML"),
        ('{"changefeed_id": "x"}', "kafka"),
        ('{"changefeed_id": "bad id!"}', "changefeed_id"),
    ],
)
def test_a_config_that_does_not_validate_is_refused_naming_the_key(
    client: TestClient, config: str, mentions: str
) -> None:
    refused = client.post("/api/v2/changefeeds", headers=AUTH, json={"config": config})
    assert mentions in _is_error(refused, 400, "invalid_argument")["error_msg"]


def test_a_config_for_another_jobs_topic_is_refused(
    client: TestClient, context: OperatorContext
) -> None:
    other = _config(context, "cf2", jobs={"topic": "_someone_elses_jobs"})
    refused = client.post("/api/v2/changefeeds", headers=AUTH, json={"config": other})
    assert "jobs.topic" in _is_error(refused, 400, "invalid_argument")["error_msg"]
