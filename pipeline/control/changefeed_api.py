"""The REST API's changefeed routes: ``/api/v2/changefeeds``, each changefeed's life and status.

Create (from a YAML config), update (a paused one's), pause, resume, remove, and the
status of one or all, as ``highwater changefeed`` does them (``changefeeds.py`` does the work
for both): the request bodies and what each changefeed is answered as (its spec and its job
status).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from . import dead_letters
from .api import ChangefeedId, Feeds, StrictBody, responses
from .changefeeds import Changefeed
from .history import LagHistory

# The OpenAPI format of a changefeed config: YAML that `highwater validate` accepts.
CONFIG_FORMAT = "highwater-config"


class CreateChangefeed(StrictBody):
    """The body of ``POST /api/v2/changefeeds`` and ``PUT /api/v2/changefeeds/{id}``."""

    config: str = Field(
        min_length=1,
        max_length=1_000_000,
        description="the changefeed's YAML config, as `highwater validate` takes it",
        json_schema_extra={"format": CONFIG_FORMAT},
    )
    base_dir: str = Field(
        "",
        max_length=4096,
        description="where the config's relative paths (table schemas) start, on the server",
    )


class ResumeChangefeed(StrictBody):
    """The body of ``POST /api/v2/changefeeds/{id}/resume``."""

    skip_bad_record: bool = Field(
        False, description="send the record it paused at (on_error: pause) to the dead letters"
    )


class ChangefeedOut(BaseModel):
    """One changefeed: what was asked of it (its spec) and its job status."""

    changefeed_id: str
    desired: str | None = Field(
        None, description="running, paused or removed; null for one run by `highwater run` only"
    )
    reason: str | None = Field(None, description="why it was paused or removed")
    bad_record: str | None = Field(None, description="topic/partition@offset it paused at")
    state: str = Field(
        description="pending (not started), scanning, running, paused, stopped, finished, "
        "removed or failed"
    )
    high_water: str | None = None
    statement_time: str | None = None
    last_marker: str | None = None
    scan: dict[str, Any] | None = None
    error: str | None = None
    safepoint: dict[str, Any] | None = None
    warnings: list[str] = Field(default_factory=list)
    updated_at: str
    metrics_url: str | None = Field(None, description="the run's Prometheus endpoint")
    schemas: dict[str, Any] | None = Field(
        None,
        description="Avro output: per table, its schema's version, columns and last change "
        "(changed_at, added)",
    )
    delivery: str | None = Field(
        None,
        description="at_least_once or exactly_once (rows read_committed once); null from a "
        "release before it was reported",
    )
    generation: int | None = Field(None, description="exactly_once: the run's generation")
    partitions: list[dict[str, Any]] | None = Field(
        None,
        description="each source partition when the status was written ({topic, partition, "
        "resolved, offset: the next it reads, waits_for: Debezium's transaction its markers "
        "wait for}); null from a release before it was reported",
    )
    rows: int | None = Field(None, description="rows its run wrote so far")
    sources: list[str] = Field(default_factory=list, description="its source topics")
    outputs: list[str] = Field(default_factory=list, description="its output topics")
    rows_per_second: float | None = Field(
        None, description="rows/s between the last two job statuses the server sampled"
    )
    dead_letters: int | None = Field(
        None,
        description="its dead-letter topic's records by offsets at the server's last sample "
        "(null: not counted yet, or its cluster did not answer)",
    )
    dead_letter_topic: str | None = Field(None, description="the topic counted")


router = APIRouter()


@router.get("/changefeeds", tags=["changefeeds"])
def list_changefeeds(feeds: Feeds, request: Request) -> list[ChangefeedOut]:
    """Every changefeed: its desired state and job status, rows/s and dead letters."""
    history: LagHistory = request.app.state.history
    return [_changefeed(found, history) for found in feeds.all().values()]


@router.post("/changefeeds", tags=["changefeeds"], status_code=201, responses=responses(400, 409))
def create_changefeed(body: CreateChangefeed, feeds: Feeds) -> ChangefeedOut:
    """Create a changefeed from its YAML config (validated first); the server runs it."""
    return _changefeed(feeds.create(body.config, body.base_dir))


@router.get("/changefeeds/{changefeed_id}", tags=["changefeeds"], responses=responses(404))
def get_changefeed(changefeed_id: ChangefeedId, feeds: Feeds, request: Request) -> ChangefeedOut:
    """One changefeed: its desired state and job status, rows/s and dead letters."""
    return _changefeed(feeds.get(changefeed_id), request.app.state.history)


class LagPointOut(BaseModel):
    """A changefeed at one of the server's samples."""

    at: float = Field(description="when, in seconds since the epoch")
    high_water: str | None = Field(None, description="its high-water then (HLC text)")
    lag_seconds: float | None = Field(None, description="the sample's time minus the high-water")
    state: str
    rows_per_second: float | None = Field(
        None, description="rows/s between the last two job statuses seen (null: not known)"
    )


class LagOut(BaseModel):
    """A changefeed's lag over the last hour, as ``highwater server`` sampled it."""

    changefeed_id: str
    every_seconds: float = Field(description="the time between two samples")
    points: list[LagPointOut] = Field(description="oldest first; none before the first sample")


@router.get("/changefeeds/{changefeed_id}/lag", tags=["changefeeds"], responses=responses(404))
def changefeed_lag(changefeed_id: ChangefeedId, feeds: Feeds, request: Request) -> LagOut:
    """Its high-water and lag over the last hour, sampled by the server (history.py)."""
    feeds.get(changefeed_id)  # 404 for one that is not there
    history: LagHistory = request.app.state.history
    points = [LagPointOut(**vars(p)) for p in history.points(changefeed_id)]
    return LagOut(changefeed_id=changefeed_id, every_seconds=history.every, points=points)


class DeadLetterOut(BaseModel):
    """One dead letter: where it sits, when, its key and value as text, why, from where."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None
    key: str | None = Field(None, description="as text (invalid UTF-8 replaced), cut at 500")
    value: str | None = Field(None, description="as text (invalid UTF-8 replaced), cut at 500")
    error: str | None = Field(None, description="why (its highwater.error header)")
    source: str | None = Field(None, description="where it came from (highwater.source)")


class DeadLettersOut(BaseModel):
    """A changefeed's dead-letter topic: its size by offsets and its latest records."""

    changefeed_id: str
    topic: str
    exists: bool = Field(description="false: no dead letter was ever written")
    offsets: int = Field(description="the topic's records by offsets (commit markers too)")
    latest: list[DeadLetterOut] = Field(description="newest first")
    problem: str | None = Field(None, description="why the topic could not be read (its cluster)")


@router.get(
    "/changefeeds/{changefeed_id}/dead-letters",
    tags=["changefeeds"],
    responses=responses(400, 404),
)
def changefeed_dead_letters(
    changefeed_id: ChangefeedId,
    feeds: Feeds,
    limit: Annotated[int, Query(ge=0, le=100, description="the latest records to read")] = 20,
) -> DeadLettersOut:
    """Its dead-letter topic's size and latest records (dead_letters.py)."""
    client, topic = feeds.dead_letter_topic(changefeed_id)
    found = dead_letters.read(client, topic, limit)
    return DeadLettersOut(
        changefeed_id=changefeed_id,
        topic=found.topic,
        exists=found.exists,
        offsets=found.offsets,
        latest=[DeadLetterOut(**vars(d)) for d in found.latest],
        problem=found.problem,
    )


@router.put(
    "/changefeeds/{changefeed_id}", tags=["changefeeds"], responses=responses(400, 404, 409)
)
def update_changefeed(
    changefeed_id: ChangefeedId, body: CreateChangefeed, feeds: Feeds
) -> ChangefeedOut:
    """Give a paused changefeed a changed config (added or dropped tables, safe options).

    It takes effect at resume; a change its existing output cannot follow (format,
    envelope, key shape, topic names, clusters) is refused naming each option.
    """
    updated, _change = feeds.update(changefeed_id, body.config, body.base_dir)
    return _changefeed(updated)


@router.post(
    "/changefeeds/{changefeed_id}/pause", tags=["changefeeds"], responses=responses(404, 409)
)
def pause_changefeed(changefeed_id: ChangefeedId, feeds: Feeds) -> ChangefeedOut:
    """Finish the batch, checkpoint and stop; the safepoint stays held."""
    return _changefeed(feeds.pause(changefeed_id))


@router.post(
    "/changefeeds/{changefeed_id}/resume",
    tags=["changefeeds"],
    responses=responses(400, 404, 409),
)
def resume_changefeed(
    changefeed_id: ChangefeedId, feeds: Feeds, body: ResumeChangefeed | None = None
) -> ChangefeedOut:
    """Go on from the checkpoint (optionally past the bad record it paused at)."""
    skip = body is not None and body.skip_bad_record
    return _changefeed(feeds.resume(changefeed_id, skip_bad_record=skip))


@router.delete("/changefeeds/{changefeed_id}", tags=["changefeeds"], responses=responses(404, 409))
def remove_changefeed(changefeed_id: ChangefeedId, feeds: Feeds) -> ChangefeedOut:
    """Stop it for good and release its safepoint."""
    return _changefeed(feeds.remove(changefeed_id))


def _changefeed(found: Changefeed, history: LagHistory | None = None) -> ChangefeedOut:
    spec, status = found.spec, found.status
    asked: dict[str, Any] = {
        "desired": found.desired,
        "reason": None if spec is None else spec.reason,
        "bad_record": None if spec is None or spec.bad_record is None else str(spec.bad_record),
        "sources": found.sources(),
        "outputs": [] if status is None or status.output is None else list(status.output["topics"]),
    }
    if history is not None:
        latest = history.latest(found.changefeed_id)
        asked["rows_per_second"] = None if latest is None else latest.rows_per_second
        counted = history.dead_letter_count(found.changefeed_id)
        if counted is not None:
            asked["dead_letter_topic"], asked["dead_letters"] = counted
    if status is None:
        updated = "" if spec is None else spec.updated_at
        return ChangefeedOut(
            changefeed_id=found.changefeed_id, state="pending", updated_at=updated, **asked
        )
    reported = json.loads(status.encode())
    return ChangefeedOut.model_validate({**reported, **asked})
