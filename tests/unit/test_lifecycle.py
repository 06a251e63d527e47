"""The desired-state record, the stop request that follows it, and the supervisor's retries."""

from __future__ import annotations

import pytest

from pipeline.control.supervisor import retryable
from pipeline.core.coordinator.changefeed import StopRequest
from pipeline.core.operators.lifecycle import (
    ChangefeedSpec,
    parse_ref,
    spec_key,
    specs_of,
    statuses_of,
    wait_while_paused,
)
from pipeline.core.operators.status import JobStatus
from pipeline.runtime.process import RETRYABLE, reporting_errors
from schemas.errors import (
    CheckpointError,
    ConfigError,
    FencedError,
    HighwaterError,
    RecordRef,
    SafepointError,
    SinkError,
    SourceError,
)

pytestmark = pytest.mark.unit


def test_a_spec_reads_back_as_written() -> None:
    spec = ChangefeedSpec(
        "orders.v2",
        "paused",
        "changefeed_id: orders.v2\n",
        "/etc/hw",
        reason="undecodable source record at …",
        bad_record=RecordRef("src/with/slashes", 3, 41),
        skip_bad_record=True,
    )
    assert ChangefeedSpec.decode(spec.encode()) == spec


@pytest.mark.parametrize(
    "data",
    [b"{}", b'{"changefeed_id":"a","desired":"sleeping"}', b"[", b'{"desired":"running"}'],
)
def test_an_unreadable_spec_is_an_error_not_a_guess(data: bytes) -> None:
    with pytest.raises(HighwaterError, match="unreadable changefeed spec"):
        ChangefeedSpec.decode(data)


@pytest.mark.parametrize("text", ["t/0", "t@1", "/0@1", "t/x@1", "t/0@-1", "t/0@"])
def test_a_record_reference_needs_topic_partition_and_offset(text: str) -> None:
    with pytest.raises(ValueError, match="topic/partition@offset"):
        parse_ref(text)


def test_specs_and_statuses_share_the_jobs_topic_without_mixing() -> None:
    spec = ChangefeedSpec("a", "running")
    records = {
        "a": JobStatus("a", "running").encode(),
        spec_key("a"): spec.encode(),
        spec_key("b"): b"garbage",  # skipped, with a warning
    }
    assert specs_of(records) == {"a": spec}
    assert set(statuses_of(records)) == {"a"}


def test_a_run_waits_while_paused_and_goes_on_when_resumed() -> None:
    answers = iter(
        [
            ChangefeedSpec("a", "paused"),
            ChangefeedSpec("a", "paused"),
            ChangefeedSpec("a", "running"),
        ]
    )
    waited: list[ChangefeedSpec] = []
    spec = wait_while_paused(lambda: next(answers), lambda: False, poll=0, on_wait=waited.append)
    assert spec is not None
    assert spec.desired == "running"
    assert len(waited) == 1  # said once, not at every poll


def test_a_stop_while_paused_ends_the_wait() -> None:
    spec = wait_while_paused(lambda: ChangefeedSpec("a", "paused"), lambda: True, poll=0)
    assert spec is not None
    assert spec.desired == "paused"


@pytest.mark.parametrize("desired", ["paused", "removed"])
def test_the_stop_request_follows_the_spec_and_keeps_the_first_reason(desired: str) -> None:
    stop = StopRequest()
    specs = [ChangefeedSpec("a", "running")]
    stop.follow(lambda: specs[-1])
    assert not stop.is_set()
    specs.append(ChangefeedSpec("a", desired))  # type: ignore[arg-type]
    stop._asked = 0.0
    assert stop.is_set()
    assert stop.reason == desired
    stop.set("stopped")
    assert stop.reason == desired


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SinkError("broker unreachable"), RETRYABLE),
        (CheckpointError("read timed out"), RETRYABLE),
        (FencedError("another instance took over"), 1),
        (SafepointError("data gone"), 1),
        (SourceError("source range trimmed"), 1),
        (ConfigError([("sources", "missing")]), 2),
    ],
)
def test_exit_codes_say_whether_a_new_run_may_succeed(error: HighwaterError, code: int) -> None:
    def fail() -> int:
        raise error

    assert reporting_errors(fail) == code
    assert retryable(code) is (code == RETRYABLE)


@pytest.mark.parametrize(
    ("code", "again"), [(0, False), (1, False), (2, False), (75, True), (137, True), (-9, True)]
)
def test_the_server_retries_only_what_may_succeed(code: int, again: bool) -> None:
    assert retryable(code) is again
