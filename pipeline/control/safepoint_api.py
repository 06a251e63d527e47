"""The REST API's safepoint routes: ``/api/v2/safepoint``, listed, set and deleted.

An operator's safepoints holding source data back from GC, as ``highwater safepoint`` sets
them (``pipeline/core/progress/safepoints.py`` does the work for both): the request bodies,
with the suffix and start time checked as the registry would, and what they answer.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter
from pydantic import AfterValidator, BaseModel, Field

from pipeline.core.progress.safepoints import DEFAULT_SUFFIX, DEFAULT_TTL, MAX_TTL
from schemas.errors import SafepointError
from schemas.hlc import Hlc, parse_time

from .api import Registry, StrictBody, responses

# The OpenAPI format of ``start_ts``: what schemas.hlc.parse_time accepts.
TIME_FORMAT = "highwater-time"


# A suffix is not empty, neither starts nor ends with white space, and has no control
# characters, C1 included (the registry refuses the first two; the third keeps service ids
# printable). The same pattern is enforced here and published in the OpenAPI document; C1
# matters for both: Python's \s takes U+0085 as white space, JavaScript's does not.
SUFFIX_PATTERN = (
    r"^[^\s\x00-\x1f\x7f-\x9f\ufeff](?:[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f\ufeff])?$"
)


def _suffix(value: str) -> str:
    if re.fullmatch(SUFFIX_PATTERN, value) is None:
        raise ValueError(
            "must not be empty, start or end with white space, or contain control characters"
        )
    try:
        value.encode()
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode") from None
    return value


Suffix = Annotated[
    str,
    Field(
        min_length=1,
        max_length=200,
        description="the safepoint's service id is highwater-<cluster>-<suffix>; suffixes "
        "starting with 'changefeed-' are the changefeeds' own and refused",
        json_schema_extra={"pattern": SUFFIX_PATTERN},
    ),
    AfterValidator(_suffix),
]


class SetSafepoint(StrictBody):
    """The body of ``POST /api/v2/safepoint``."""

    service_id_suffix: Suffix = DEFAULT_SUFFIX
    start_ts: str = Field(
        description="where the safepoint holds GC from, at or above the GC safe point: an HLC "
        "(1701102311425045162.0000000000), an RFC 3339 time (1970 to 5138), 'now', or relative "
        "such as '-1h'",
        min_length=1,
        max_length=100,
        examples=["-1h"],
        json_schema_extra={"format": TIME_FORMAT},
    )
    ttl: float = Field(
        DEFAULT_TTL,
        gt=0,
        le=MAX_TTL,
        allow_inf_nan=False,
        description="seconds the safepoint holds GC after this update",
    )


class DeleteSafepoint(StrictBody):
    """The body of ``DELETE /api/v2/safepoint``."""

    service_id_suffix: Suffix = DEFAULT_SUFFIX


class SafepointOut(BaseModel):
    """One safepoint."""

    service_id: str
    safepoint: str = Field(description="the HLC it holds GC from")
    ttl: float
    updated_at: str = Field(description="RFC 3339")
    expires_at: str = Field(description="RFC 3339: updated_at + ttl")
    owner: str = Field(description="'user', or 'changefeed:<id>'")
    offsets: dict[str, dict[str, int]] = Field(
        description="a changefeed's: per source topic and partition, the offset it resumes from"
    )
    expired: bool


class SafepointsOut(BaseModel):
    """``GET /api/v2/safepoint``."""

    cluster: str
    gc_safe_point: str = Field(description="the HLC at or below which no source data is kept")
    safepoints: list[SafepointOut]


router = APIRouter()


@router.get("/safepoint", tags=["safepoints"])
def query_safepoints(store: Registry) -> SafepointsOut:
    """Every safepoint of the cluster, and the GC safe point."""
    state = store.read()
    now = store.clock()
    return SafepointsOut(
        cluster=store.cluster,
        gc_safe_point=str(state.gc_safe_point),
        safepoints=[
            SafepointOut(**sp.to_json(), expired=sp.expired(now))
            for _, sp in sorted(state.safepoints.items())
        ],
    )


@router.post("/safepoint", tags=["safepoints"], responses=responses(400, 403))
def set_safepoint(body: SetSafepoint, store: Registry) -> SafepointOut:
    """Create or refresh an operator's safepoint (not below the GC safe point)."""
    start = _start(body.start_ts)
    store.ensure()
    safepoint = store.set_user(body.service_id_suffix, start, body.ttl)
    return SafepointOut(**safepoint.to_json(), expired=safepoint.expired(store.clock()))


@router.delete("/safepoint", tags=["safepoints"], responses=responses(400, 403, 404))
def delete_safepoint(body: DeleteSafepoint, store: Registry) -> SafepointOut:
    """Delete an operator's safepoint; returns what it was."""
    deleted = store.delete_user(body.service_id_suffix)
    return SafepointOut(**deleted.to_json(), expired=deleted.expired(store.clock()))


def _start(text: str) -> Hlc:
    try:
        start = parse_time(text)
        # parse_time makes HLCs (after about the year 5138) that Hlc.parse cannot read back: a
        # safepoint record holding one would make the whole registry unreadable.
        Hlc.parse(str(start))
    except ValueError as exc:
        raise SafepointError(f"start_ts: {exc}", code="invalid_argument") from None
    return start
