"""The records Highwater writes to Kafka (``pipeline/core/ledger/records.py``).

What older releases wrote still reads; a newer version and a malformed record are refused by
name.

The fixtures (``tests/fixtures/records``) are records as the encoders wrote them before the
records were declared as models, byte for byte (``capture.py`` there says how they were made).
"""

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.ledger import records
from pipeline.core.ledger.checkpoint import decode as decode_checkpoint
from pipeline.core.ledger.records import (
    CheckpointRecord,
    GcRecord,
    Record,
    SafepointRecord,
    SpecRecord,
    StatusRecord,
)
from pipeline.core.operators.lifecycle import ChangefeedSpec
from pipeline.core.operators.status import JobStatus
from pipeline.core.progress.safepoints import Safepoint
from schemas.errors import (
    CheckpointError,
    HighwaterError,
    RecordError,
    SafepointError,
    UnknownRecordVersion,
)

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent.parent / "fixtures" / "records"
MODELS: dict[str, type[Record]] = {
    "checkpoint": CheckpointRecord,
    "spec": SpecRecord,
    "status": StatusRecord,
    "safepoint": SafepointRecord,
    "gc-safe-point": GcRecord,
}
FILES = sorted(FIXTURES.glob("*-v*.json"))


def kind_of(path: Path) -> str:
    return path.name.split("-v")[0]


def model_of(path: Path) -> type[Record]:
    return MODELS[kind_of(path)]


def test_every_kind_has_fixtures_and_every_fixture_a_kind() -> None:
    assert {kind_of(path) for path in FILES} == set(MODELS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_a_record_an_older_release_wrote_reads_and_writes_back_the_same(path: Path) -> None:
    data = path.read_bytes()
    record = records.decode(model_of(path), data)
    assert record.format_version == 1
    again = record.encode()
    if kind_of(path) == "checkpoint":
        assert again == data  # it always carried its version; its fields in the same order
    else:  # written without a version, it is version 1, and says so from now on
        assert json.loads(again) == {"format_version": 1, **json.loads(data)}
        assert list(json.loads(again))[1:] == list(json.loads(data))  # same order
    assert records.decode(model_of(path), again) == record


def _without_written_at(data: bytes) -> dict[str, Any]:
    return {k: v for k, v in json.loads(data).items() if k != "written_at"}


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("checkpoint-*.json")), ids=lambda p: p.name)
def test_a_checkpoint_an_older_release_wrote_resumes_and_is_written_again_alike(
    path: Path,
) -> None:
    data = path.read_bytes()
    checkpoint = decode_checkpoint(data)
    assert _without_written_at(checkpoint.encode(1 << 20)) == _without_written_at(data)


def test_the_owners_read_what_an_older_release_wrote() -> None:
    spec = ChangefeedSpec.decode((FIXTURES / "spec-v1-full.json").read_bytes())
    assert str(spec.bad_record) == "src/with/slashes/3@41"
    assert "ünïcode" in spec.config
    assert json.loads(spec.encode()) == {
        "format_version": 1,
        **json.loads((FIXTURES / "spec-v1-full.json").read_bytes()),
    }
    status = JobStatus.decode((FIXTURES / "status-v1-full.json").read_bytes())
    assert status.scan is not None
    assert status.scan["eta_seconds"] == 5.0
    assert json.loads(status.encode()) == {
        "format_version": 1,
        **json.loads((FIXTURES / "status-v1-full.json").read_bytes()),
    }
    data = (FIXTURES / "safepoint-v1-changefeed.json").read_bytes()
    safepoint = Safepoint.decode(data)
    assert safepoint.owner == "changefeed:orders"
    assert json.loads(safepoint.encode()) == {"format_version": 1, **json.loads(data)}
    assert safepoint.to_json() == json.loads(data)  # the REST API's form is unchanged


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_an_unknown_format_version_is_refused_by_name(kind: str) -> None:
    path = next(p for p in FILES if kind_of(p) == kind)
    newer = {**json.loads(path.read_bytes()), "format_version": 2, "a_field_of_v2": True}
    with pytest.raises(UnknownRecordVersion) as refused:
        records.decode(MODELS[kind], json.dumps(newer), where="topic t, key 'k'")
    error = refused.value
    assert (error.kind, error.version, error.known, error.where) == (
        MODELS[kind].kind,
        2,
        (1,),
        "topic t, key 'k'",
    )
    assert str(error).startswith(f"unreadable {MODELS[kind].kind} record (topic t, key 'k'): ")
    assert "format_version 2 is not one this release reads (it reads 1)" in str(error)


@pytest.mark.parametrize("version", ['"1"', "true", "0", "null"])
def test_a_version_that_is_not_a_known_number_is_refused(version: str) -> None:
    with pytest.raises(RecordError, match="format_version"):
        records.decode(SpecRecord, f'{{"format_version":{version},"changefeed_id":"a"}}')


def test_the_owners_refuse_an_unknown_version_in_their_own_error_family() -> None:
    def newer(name: str) -> bytes:
        return json.dumps(
            {**json.loads((FIXTURES / name).read_bytes()), "format_version": 3}
        ).encode()

    with pytest.raises(CheckpointError, match="format_version 3") as checkpoint:
        decode_checkpoint(newer("checkpoint-v1-minimal.json"))
    assert isinstance(checkpoint.value.__cause__, UnknownRecordVersion)
    with pytest.raises(UnknownRecordVersion, match=r"changefeed spec record \(key 'spec/a'\)"):
        ChangefeedSpec.decode(newer("spec-v1-minimal.json"), where="key 'spec/a'")
    with pytest.raises(UnknownRecordVersion, match="job status record"):
        JobStatus.decode(newer("status-v1-minimal.json"))
    with pytest.raises(SafepointError, match="format_version 3") as safepoint:
        Safepoint.decode(newer("safepoint-v1-user.json"))
    assert safepoint.value.code == "internal"


MALFORMED = [
    ("checkpoint-v1-minimal.json", "changefeed_id", None, "changefeed_id"),
    ("checkpoint-v1-full.json", "high_water", 12, "high_water"),
    (
        "checkpoint-v1-full.json",
        "partitions",
        {"src": {"offsets": ["x"]}},
        "partitions.src.offsets.0",
    ),
    ("checkpoint-v1-full.json", "fallback", "some", "fallback"),
    ("spec-v1-full.json", "desired", "sleeping", "desired"),
    ("spec-v1-full.json", "bad_record", "src@3", "bad_record"),
    ("spec-v1-minimal.json", "changefeed_id", None, "changefeed_id"),
    ("status-v1-full.json", "scan", {"chunks_done": [1]}, "scan.chunks_done.int"),
    ("status-v1-full.json", "warnings", "one", "warnings"),
    ("safepoint-v1-user.json", "ttl", "a day", "ttl"),
    ("safepoint-v1-user.json", "owner", None, "owner"),
    ("gc-safe-point-v1.json", "gc_safe_point", "yesterday", "gc_safe_point"),
    ("status-v1-minimal.json", "unknown_field", 1, "unknown_field"),
]


@pytest.mark.parametrize(("name", "field", "value", "path"), MALFORMED)
def test_a_malformed_record_names_its_kind_and_the_field(
    name: str, field: str, value: object, path: str
) -> None:
    raw = json.loads((FIXTURES / name).read_bytes())
    if value is None:
        del raw[field]  # missing
    else:
        raw[field] = value  # wrong type or value, or a field the version does not have
    model = MODELS[kind_of(FIXTURES / name)]
    with pytest.raises(RecordError) as refused:
        records.decode(model, json.dumps(raw), where="topic t, key 'k'")
    error = refused.value
    assert error.kind == model.kind
    assert path in error.fields
    assert f"field {path!r}: " in str(error)
    assert str(error).startswith(f"unreadable {model.kind} record (topic t, key 'k'): ")


@pytest.mark.parametrize(("data", "says"), [(b"{", "not JSON"), (b"[1]", "not a JSON object")])
def test_what_is_no_record_at_all_says_so(data: bytes, says: str) -> None:
    with pytest.raises(RecordError, match=f"unreadable job status record: {says}"):
        records.decode(StatusRecord, data)


def test_an_unreadable_record_is_a_highwater_error() -> None:
    assert issubclass(RecordError, HighwaterError)
    assert issubclass(UnknownRecordVersion, RecordError)
