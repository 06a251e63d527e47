"""The REST API for operators (``highwater server``): safepoints and changefeed status.

    GET    /api/v2/safepoint            every safepoint and the GC safe point
    POST   /api/v2/safepoint            {"service_id_suffix", "start_ts", "ttl"}: set one
    DELETE /api/v2/safepoint            {"service_id_suffix"}: delete one
    GET    /api/v2/changefeeds          every changefeed: desired state and job status
    POST   /api/v2/changefeeds          {"config": "<YAML>", "base_dir"}: create one (running)
    GET    /api/v2/changefeeds/{id}     one changefeed
    PUT    /api/v2/changefeeds/{id}     {"config", "base_dir"}: a paused one's changed config
    POST   /api/v2/changefeeds/{id}/pause    finish the batch, checkpoint, stop
    POST   /api/v2/changefeeds/{id}/resume   {"skip_bad_record": false}: go on
    DELETE /api/v2/changefeeds/{id}     remove it: stop, release its safepoint
    GET    /metrics                     every running changefeed's metrics, and the server's
    GET    /openapi.json                the OpenAPI document (no token needed, nor for /docs)

Every ``/api`` route needs ``Authorization: Bearer <token>`` (401 without a valid one).
Errors are JSON ``{"error_code", "error_msg"}``: 400 ``invalid_argument`` for a bad request,
401 ``unauthorized``, 403 ``forbidden`` for a changefeed's own safepoint, 404 ``not_found``,
405 ``method_not_allowed``, 409 ``conflict`` for a changefeed not in a state that allows the
request, 500 ``internal`` when Kafka fails or holds an unreadable record. The same operations
as ``highwater safepoint`` and ``highwater changefeed`` (``pipeline/core/progress/safepoints.py``
and ``pipeline/control/changefeeds.py`` do the work for both). The routes live on a
module-level router; :func:`create_app` keeps the context and the token in ``app.state``,
where the dependencies find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from pipeline.core.progress.safepoints import (
    DEFAULT_SUFFIX,
    DEFAULT_TTL,
    MAX_TTL,
    SafepointRegistry,
)
from schemas.errors import ConfigError, HighwaterError, LifecycleError, SafepointError
from schemas.hlc import Hlc, parse_time

from .changefeeds import Changefeed, Changefeeds
from .context import OperatorContext
from .metrics import aggregate

log = logging.getLogger(__name__)

# The error code of each status the API answers with.
CODES = {
    400: "invalid_argument",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    500: "internal",
}
# The status of each SafepointError code that is a refusal; any other means the registry failed.
REFUSALS = {"invalid_argument": 400, "forbidden": 403, "not_found": 404, "conflict": 409}

# The OpenAPI format of ``start_ts``: what schemas.hlc.parse_time accepts.
TIME_FORMAT = "highwater-time"
# The OpenAPI format of a changefeed config: YAML that `highwater validate` accepts.
CONFIG_FORMAT = "highwater-config"

# A suffix is not empty, neither starts nor ends with white space, and has no control
# characters, C1 included (the registry refuses the first two; the third keeps service ids
# printable). The same pattern is enforced here and published in the OpenAPI document; C1
# matters for both: Python's \s takes U+0085 as white space, JavaScript's does not.
SUFFIX_PATTERN = (
    r"^[^\s\x00-\x1f\x7f-\x9f\ufeff](?:[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f\ufeff])?$"
)


class ErrorBody(BaseModel):
    """Every error the API returns."""

    error_code: str = Field(
        description="invalid_argument, unauthorized, forbidden, not_found, "
        "method_not_allowed or internal",
        examples=["invalid_argument"],
    )
    error_msg: str = Field(description="what went wrong, for a person")


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


class _Request(BaseModel):
    """A request body: strictly typed, unknown fields refused (a typo is not a default)."""

    model_config = ConfigDict(strict=True, extra="forbid")


class SetSafepoint(_Request):
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


class DeleteSafepoint(_Request):
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


class CreateChangefeed(_Request):
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


class ResumeChangefeed(_Request):
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


def _responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    described = {
        400: "a bad argument",
        401: "no valid bearer token",
        403: "a changefeed's own safepoint",
        404: "not there",
        409: "not in a state that allows it",
        500: "Kafka failed, or holds an unreadable record",
    }
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


# -- dependencies -----------------------------------------------------------------------------

_bearer = HTTPBearer(auto_error=False, description="the token given to 'highwater server'")


def _authorized(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    token: str = request.app.state.token
    given = "" if credentials is None else credentials.credentials
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(
            401, "a valid bearer token is required", headers={"WWW-Authenticate": "Bearer"}
        )


def _context(request: Request) -> OperatorContext:
    context: OperatorContext = request.app.state.context
    return context


Context = Annotated[OperatorContext, Depends(_context)]


def _registry(context: Context) -> Iterator[SafepointRegistry]:
    store = context.registry()
    try:
        yield store
    finally:
        store.close()


Registry = Annotated[SafepointRegistry, Depends(_registry)]


def _changefeeds(context: Context) -> Changefeeds:
    return Changefeeds(context)


Feeds = Annotated[Changefeeds, Depends(_changefeeds)]
ChangefeedId = Annotated[str, Path(examples=["orders"])]


# -- routes -----------------------------------------------------------------------------------

router = APIRouter(
    prefix="/api/v2",
    dependencies=[Depends(_authorized)],
    responses=_responses(401, 500),
)


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


@router.post("/safepoint", tags=["safepoints"], responses=_responses(400, 403))
def set_safepoint(body: SetSafepoint, store: Registry) -> SafepointOut:
    """Create or refresh an operator's safepoint (not below the GC safe point)."""
    start = _start(body.start_ts)
    store.ensure()
    safepoint = store.set_user(body.service_id_suffix, start, body.ttl)
    return SafepointOut(**safepoint.to_json(), expired=safepoint.expired(store.clock()))


@router.delete("/safepoint", tags=["safepoints"], responses=_responses(400, 403, 404))
def delete_safepoint(body: DeleteSafepoint, store: Registry) -> SafepointOut:
    """Delete an operator's safepoint; returns what it was."""
    deleted = store.delete_user(body.service_id_suffix)
    return SafepointOut(**deleted.to_json(), expired=deleted.expired(store.clock()))


@router.get("/changefeeds", tags=["changefeeds"])
def list_changefeeds(feeds: Feeds) -> list[ChangefeedOut]:
    """Every changefeed: its desired state and job status."""
    return [_changefeed(found) for found in feeds.all().values()]


@router.post("/changefeeds", tags=["changefeeds"], status_code=201, responses=_responses(400, 409))
def create_changefeed(body: CreateChangefeed, feeds: Feeds) -> ChangefeedOut:
    """Create a changefeed from its YAML config (validated first); the server runs it."""
    return _changefeed(feeds.create(body.config, body.base_dir))


@router.get("/changefeeds/{changefeed_id}", tags=["changefeeds"], responses=_responses(404))
def get_changefeed(changefeed_id: ChangefeedId, feeds: Feeds) -> ChangefeedOut:
    """One changefeed: its desired state and job status."""
    return _changefeed(feeds.get(changefeed_id))


@router.put(
    "/changefeeds/{changefeed_id}", tags=["changefeeds"], responses=_responses(400, 404, 409)
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
    "/changefeeds/{changefeed_id}/pause", tags=["changefeeds"], responses=_responses(404, 409)
)
def pause_changefeed(changefeed_id: ChangefeedId, feeds: Feeds) -> ChangefeedOut:
    """Finish the batch, checkpoint and stop; the safepoint stays held."""
    return _changefeed(feeds.pause(changefeed_id))


@router.post(
    "/changefeeds/{changefeed_id}/resume",
    tags=["changefeeds"],
    responses=_responses(400, 404, 409),
)
def resume_changefeed(
    changefeed_id: ChangefeedId, feeds: Feeds, body: ResumeChangefeed | None = None
) -> ChangefeedOut:
    """Go on from the checkpoint (optionally past the bad record it paused at)."""
    skip = body is not None and body.skip_bad_record
    return _changefeed(feeds.resume(changefeed_id, skip_bad_record=skip))


@router.delete("/changefeeds/{changefeed_id}", tags=["changefeeds"], responses=_responses(404, 409))
def remove_changefeed(changefeed_id: ChangefeedId, feeds: Feeds) -> ChangefeedOut:
    """Stop it for good and release its safepoint."""
    return _changefeed(feeds.remove(changefeed_id))


# Prometheus' text format, not a JSON route: outside the OpenAPI document, behind the token.
scrape = APIRouter(dependencies=[Depends(_authorized)], include_in_schema=False)


@scrape.get("/metrics")
def metrics(feeds: Feeds) -> Response:
    """The live runs' series merged, with the server's own (``pipeline/control/metrics.py``)."""
    return Response(aggregate(feeds.all().values()), media_type=CONTENT_TYPE_LATEST)


def _start(text: str) -> Hlc:
    try:
        start = parse_time(text)
        # parse_time makes HLCs (after about the year 5138) that Hlc.parse cannot read back: a
        # safepoint record holding one would make the whole registry unreadable.
        Hlc.parse(str(start))
    except ValueError as exc:
        raise SafepointError(f"start_ts: {exc}", code="invalid_argument") from None
    return start


def _changefeed(found: Changefeed) -> ChangefeedOut:
    spec, status = found.spec, found.status
    asked = {
        "desired": found.desired,
        "reason": None if spec is None else spec.reason,
        "bad_record": None if spec is None or spec.bad_record is None else str(spec.bad_record),
    }
    if status is None:
        updated = "" if spec is None else spec.updated_at
        return ChangefeedOut(
            changefeed_id=found.changefeed_id, state="pending", updated_at=updated, **asked
        )
    reported = json.loads(status.encode())
    return ChangefeedOut.model_validate({**reported, **asked})


# -- errors -----------------------------------------------------------------------------------


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    code = CODES.get(status) or re.sub(r"\W+", "_", _phrase(status)).strip("_").lower()
    body = ErrorBody(error_code=code, error_msg=message)
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"error {status}"


def _describe(exc: RequestValidationError) -> str:
    """Every problem of the request, ``field: reason``, without pydantic's decorations."""
    problems = []
    for error in exc.errors():
        loc = list(error.get("loc", ()))
        if len(loc) > 1 and loc[0] in {"body", "path", "query", "header"}:
            loc = loc[1:]  # the field's name says enough
        where = ".".join(str(part) for part in loc)
        reason = str(error.get("msg", "invalid"))
        ctx = error.get("ctx") or {}
        if error.get("type") == "json_invalid":
            where, reason = "body", f"not JSON: {ctx.get('error', reason)}"
        elif error.get("type") == "value_error" and "error" in ctx:
            reason = str(ctx["error"])
        problems.append(f"{where}: {reason}" if where else reason)
    return "; ".join(problems) or "invalid request"


def _allowed(path: str) -> str | None:
    """The methods of the API's routes at ``path`` (Starlette's 405 names one route's only)."""
    methods = {
        method
        for route in router.routes
        if isinstance(route, APIRoute) and route.path_regex.match(path)
        for method in route.methods or ()
    }
    return ", ".join(sorted(methods)) or None


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    """Every error as ``{"error_code", "error_msg"}``."""
    if isinstance(exc, SafepointError | LifecycleError):
        return _error(REFUSALS.get(exc.code, 500), str(exc))
    if isinstance(exc, ConfigError):
        return _error(400, str(exc))
    if isinstance(exc, RequestValidationError):
        return _error(400, _describe(exc))
    if isinstance(exc, HTTPException):
        headers = dict(exc.headers or {})
        allowed = _allowed(request.url.path) if exc.status_code == 405 else None
        if allowed:
            headers["Allow"] = allowed
        return _error(exc.status_code, str(exc.detail), headers)
    if isinstance(exc, HighwaterError):
        return _error(500, str(exc))
    return _error(500, f"{type(exc).__name__}: {exc}")


class _Api(FastAPI):
    """FastAPI, documenting the errors this API really returns.

    Validation errors are answered with 400 and the error body, not FastAPI's 422, so the
    OpenAPI document must not promise a 422.
    """

    def openapi(self) -> dict[str, Any]:
        """The generated document, without the 422 responses."""
        if self.openapi_schema is None:
            schema = super().openapi()
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    operation.get("responses", {}).pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(name, None)
        return self.openapi_schema or {}


def create_app(
    context: OperatorContext, token: str, on_shutdown: Callable[[], None] | None = None
) -> FastAPI:
    """The API over the safepoints and job status of ``context``'s cluster.

    ``on_shutdown`` runs (in a thread) when the server shuts down, before it exits: uvicorn
    re-raises the SIGTERM it caught once its shutdown is done, so code after
    ``uvicorn.run`` never runs then.
    """
    if not token:
        raise ValueError("the API needs a non-empty bearer token")

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:
            await asyncio.to_thread(on_shutdown)

    app = _Api(
        lifespan=lifespan,
        title="Highwater",
        version="2",
        description="Changefeeds (create, pause, resume, remove, status) and the safepoints "
        "that hold source data back from GC.",
    )
    app.state.context = context
    app.state.token = token
    for error in (HighwaterError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(error, _handle)
    app.include_router(router)
    app.include_router(scrape)
    return app


def serve(
    context: OperatorContext,
    token: str,
    *,
    host: str,
    port: int,
    on_shutdown: Callable[[], None] | None = None,
) -> None:
    """Serve the API until interrupted; ``on_shutdown`` runs before the process ends."""
    import uvicorn  # noqa: PLC0415 - only `highwater server` serves

    app = create_app(context, token, on_shutdown)
    uvicorn.run(app, host=host, port=port, log_level="info")
