"""Rows too large for Kafka (`oversized_rows`): claimed, diverted, or bad, at the exact limit.

A row's record fits while its key and value take at most the plan's room (the producer's
``max.request.size`` less Kafka's framing): rows just under and at the room go out as they
are; one byte over, the row is written whole to the claim store and a reference goes in its
place (``claim_check``), its source record goes to the dead-letter topic (``dlq``), or it is a
bad record (unset: as ``on_error`` says). The consumer library reads a reference as its
claimed value, and refuses a claimed value changed in the store.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from encoders.json import JsonEncoder
from highwater_consumer.decoding import JsonDecoder, claimed_read
from pipeline.config import EncoderConfig, parse_config
from pipeline.core.batch.contract import RECORD_FRAMING, BatchPlan
from pipeline.core.batch.output import ERROR_HEADER
from schemas import claims
from tests.unit.test_batch import SRC, T, arrow, plan, rec, run
from tests.unit.test_config import minimal, problems

KEY = b"[1]"


def change(text: str, t: int) -> tuple[bytes | None, bytes | None]:
    return rec([1], {"after": {"order_id": 1, "v": text}, "updated": T[t]})


def sized(total: int, t: int = 1) -> tuple[bytes | None, bytes | None]:
    """A change whose output record (key and value, as the plan's encoder writes) is ``total``."""
    (empty,), _ = run(plan(), arrow([change("", t)]))
    return change("x" * (total - len(empty["key"]) - len(empty["value"])), t)


def limited(room: int, **more: object) -> BatchPlan:
    return replace(plan(), max_record_bytes=room + RECORD_FRAMING, **more)  # type: ignore[arg-type]


ROOM = 2_000


def output_sizes(records: list[dict]) -> list[int]:
    return [len(r["key"]) + len(r["value"]) for r in records if r["topic"] == "out.orders"]


def test_rows_just_under_and_at_the_room_go_out_as_they_are(tmp_path: Path) -> None:
    p = limited(ROOM, claim_store=str(tmp_path), claim_folder="cf")
    records, result = run(p, arrow([sized(ROOM - 1, 1), sized(ROOM, 2)]))
    assert output_sizes(records) == [ROOM - 1, ROOM]  # the sizing is what the encoder writes
    assert all(r["headers"] is None for r in records)
    assert result.bad == 0
    assert not list(tmp_path.rglob("*")), "nothing claimed"


def test_a_row_over_the_room_is_claimed_and_a_reference_takes_its_place(tmp_path: Path) -> None:
    p = limited(ROOM, claim_store=f"file://{tmp_path}", claim_folder="cf")
    over = sized(ROOM + 1, 2)
    records, result = run(p, arrow([sized(ROOM, 1), over, change("", 3)]))
    assert result.bad == 0
    assert result.first_bad is None
    assert [r["key"] for r in records] == [KEY, KEY, KEY]  # same key: same partition, order
    reference = records[1]
    assert reference["value"].startswith(claims.PREFIX)
    assert len(reference["key"]) + len(reference["value"]) < 400
    (header,) = reference["headers"]
    assert header["key"] == claims.HEADER
    found = claims.Reference.decode(reference["value"])
    assert found is not None
    assert header["value"] == found.uri.encode()
    assert found.uri.startswith(f"file://{tmp_path}/cf/out.orders/")
    # the claimed value is the row's record value, byte for byte, as the encoder wrote it
    value = claims.get(found)
    assert len(KEY) + len(value) == ROOM + 1
    assert json.loads(value)["after"]["v"] == json.loads(over[1])["after"]["v"]  # type: ignore[arg-type]
    # the consumer library reads the reference as that value
    decoder = JsonDecoder()
    with pytest.raises(Exception):  # noqa: B017, PT011 - the reference alone is no envelope
        decoder.read(KEY, reference["value"])
    read_value, time = claimed_read(decoder.read, KEY, reference["value"], ValueError("x"))
    assert read_value == value
    assert time == decoder.read(KEY, value)
    # the same row again (a task run again) names the same file with the same bytes
    again, _ = run(p, arrow([over]))
    assert again[0]["value"] == reference["value"]
    assert len([f for f in tmp_path.rglob("*") if f.is_file()]) == 1  # one claimed value


def test_without_claim_check_a_row_over_the_room_is_a_bad_record_or_a_dead_letter() -> None:
    over = sized(ROOM + 1, 2)
    records, result = run(limited(ROOM), arrow([sized(ROOM, 1), over, change("", 3)]))
    assert output_sizes(records) == [ROOM]  # on_error fail: its partition stops there
    assert result.first_bad is not None
    assert "exceeds max.request.size" in result.first_bad[1]
    # oversized_rows: dlq (whatever on_error says): its source record diverted, nothing stops
    records, result = run(
        limited(ROOM, oversized_topic="big"), arrow([sized(ROOM, 1), over, change("", 3)])
    )
    assert output_sizes(records)[0] == ROOM
    assert len(output_sizes(records)) == 2
    (dead,) = [r for r in records if r["topic"] == "big"]
    reason = {h["key"]: h["value"] for h in dead["headers"]}[ERROR_HEADER].decode()
    assert "exceeds max.request.size" in reason
    assert reason.endswith(f"too large to copy here: read {SRC}/0@1")  # a pointer to it
    assert dead["value"] is None
    assert result.first_bad is None
    assert result.bad == 1


def test_a_claimed_value_changed_in_the_store_is_refused(tmp_path: Path) -> None:
    reference = claims.put(str(tmp_path), "cf", "t", b'{"after": {"v": 1}}')
    assert claims.claimed(reference.encode()) == b'{"after": {"v": 1}}'
    path = Path(reference.uri)
    path.write_bytes(b'{"after": {"v": 2}}')
    with pytest.raises(claims.ClaimError, match="not what its reference names"):
        claims.claimed(reference.encode())
    path.unlink()
    with pytest.raises(claims.ClaimError, match="cannot read"):
        claims.claimed(reference.encode())
    assert claims.claimed(b'{"after": null}') is None  # any other value: no reference
    with pytest.raises(ValueError, match="not a claim check's reference"):
        claims.Reference.decode(claims.PREFIX + b"{oops")


def test_the_config_names_what_oversized_rows_needs() -> None:
    found = problems(minimal(oversized_rows="claim_check"))
    assert "needed by oversized_rows: claim_check" in found["claim_store"]
    found = problems(minimal(claim_store="/shared/claims"))
    assert "only used with oversized_rows: claim_check" in found["claim_store"]
    found = problems(minimal(oversized_rows="claim_check", claim_store="claims"))
    assert "pattern" in found["claim_store"]  # a relative path: not every executor's
    found = problems(minimal(oversized_rows="fail", on_error="dlq"))
    assert "on_error: dlq" in found["oversized_rows"]
    config = parse_config(
        minimal(oversized_rows="dlq", dlq_topic="big", sources=[{"topic": SRC, "table": "t"}]),
        env={},
    )
    assert BatchPlan.of(config, {}, {}).oversized_topic == "big"
    assert BatchPlan.of(config, {}, {}).dlq_topic is None  # on_error: fail for the rest


def test_the_initial_scan_claims_a_row_over_the_room_too(tmp_path: Path) -> None:
    from tests.unit.test_scan import STATEMENT, scan_plan, sorted_arrow, walk  # noqa: PLC0415

    base = scan_plan()
    p = replace(
        base,
        batch=replace(
            base.batch,
            max_record_bytes=600 + RECORD_FRAMING,
            claim_store=str(tmp_path),
            claim_folder="cf",
        ),
    )
    small = rec([1], {"after": {"order_id": 1, "v": "s"}, "updated": T[STATEMENT - 1]})
    large = rec([2], {"after": {"order_id": 2, "v": "L" * 900}, "updated": T[STATEMENT - 1]})
    records, result = walk(p, sorted_arrow([(0, small), (1, large)]))
    assert result.bad == 0
    assert [r["key"] for r in records] == [b"[1]", b"[2]"]
    assert records[0]["headers"] is None
    reference = claims.Reference.decode(records[1]["value"])
    assert reference is not None
    assert [h["key"] for h in records[1]["headers"]] == [claims.HEADER]
    assert json.loads(claims.get(reference))["after"]["v"] == "L" * 900


def test_headers_count_towards_a_records_size(tmp_path: Path) -> None:
    """Kafka counts headers in a record's size.

    The fixed ones shrink every record's room, a row's own (headers_json_column_name) count
    for it, and a reference carries them too.
    """
    headers = {"zone": "eu-west-1", "app": "örders ✓"}
    config = parse_config(
        minimal(sources=[{"topic": SRC, "table": "t"}], sink={"extra_headers": headers}), env={}
    )
    fixed = sum(len(k.encode()) + len(v.encode()) + 10 for k, v in headers.items())
    assert BatchPlan.of(config, {}, {}).room == config_room(config) - fixed
    # a row at the room with a header of its own no longer fits: it is claimed, headers and all
    encoder = JsonEncoder(EncoderConfig(updated=True, headers_json_column_name="meta"))
    p = limited(ROOM, claim_store=str(tmp_path), claim_folder="cf", headers_column="meta")
    p = replace(p, encoders={SRC: encoder})
    fits = sized(ROOM, 1)
    with_meta = json.loads(fits[1])  # type: ignore[arg-type]
    with_meta["after"]["meta"] = {"h": "v"}
    records, result = run(p, arrow([fits, rec([1], with_meta)]))
    assert result.bad == 0
    assert records[0]["headers"] is None  # at the room, no headers: as it is
    assert [h["key"] for h in records[1]["headers"]] == ["h", claims.HEADER]
    assert records[1]["value"].startswith(claims.PREFIX)


def config_room(config: object) -> int:
    return BatchPlan.of(config, {}, {}).max_record_bytes - RECORD_FRAMING  # type: ignore[arg-type]
