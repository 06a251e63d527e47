"""The REST API for operators (``highwater server``): safepoints and changefeed status.

    GET    /api/v2/safepoint            every safepoint and the GC safe point
    POST   /api/v2/safepoint            {"service_id_suffix", "start_ts", "ttl"}: set one
    DELETE /api/v2/safepoint            {"service_id_suffix"}: delete one
    GET    /api/v2/changefeeds          every changefeed: desired state and job status
    POST   /api/v2/changefeeds          {"config": "<YAML>", "base_dir"}: create one (running)
    GET    /api/v2/changefeeds/{id}     one changefeed
    GET    /api/v2/changefeeds/{id}/lag its high-water and lag over the last hour (history.py)
    GET    /api/v2/changefeeds/{id}/dead-letters?limit=N   its dead letters: how many, the
                                        latest (dead_letters.py)
    PUT    /api/v2/changefeeds/{id}     {"config", "base_dir"}: a paused one's changed config
    POST   /api/v2/changefeeds/{id}/pause    finish the batch, checkpoint, stop
    POST   /api/v2/changefeeds/{id}/resume   {"skip_bad_record": false}: go on
    DELETE /api/v2/changefeeds/{id}     remove it: stop, release its safepoint
    GET    /metrics                     every running changefeed's metrics, and the server's
    GET    /                            the console: a page over this API (console/; no token to
                                        load it, the page asks for one to show anything)
    GET    /openapi.json                the OpenAPI document (no token needed, nor for /docs)

Every ``/api`` route needs ``Authorization: Bearer <token>`` (401 without a valid one).
Errors are JSON ``{"error_code", "error_msg"}``: 400 ``invalid_argument`` for a bad request,
401 ``unauthorized``, 403 ``forbidden`` for a changefeed's own safepoint, 404 ``not_found``,
405 ``method_not_allowed``, 409 ``conflict`` for a changefeed not in a state that allows the
request, 500 ``internal`` when Kafka fails or holds an unreadable record. The same operations
as ``highwater safepoint`` and ``highwater changefeed`` (``pipeline/core/progress/safepoints.py``
and ``pipeline/control/changefeeds.py`` do the work for both). The routes live on
module-level routers by resource (``safepoint_api.py``, ``changefeed_api.py``; what they
share, ``api.py``), gathered here under ``/api/v2`` behind the token; this module answers
every error in the API's form and makes the app. :func:`create_app` keeps the context and
the token in ``app.state``, where the dependencies find them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException

from schemas.errors import ConfigError, HighwaterError, LifecycleError, SafepointError

from . import changefeed_api, safepoint_api
from .api import ErrorBody, Feeds, authorized, responses
from .changefeed_api import CONFIG_FORMAT
from .changefeeds import Changefeeds
from .context import OperatorContext
from .history import EVERY, LagHistory
from .metrics import aggregate
from .safepoint_api import TIME_FORMAT

__all__ = ["CONFIG_FORMAT", "TIME_FORMAT", "create_app", "router", "serve"]

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


# -- routes -----------------------------------------------------------------------------------

PREFIX = "/api/v2"
RESOURCES = (safepoint_api.router, changefeed_api.router)  # the API's routes, by resource
router = APIRouter(
    prefix=PREFIX,
    dependencies=[Depends(authorized)],
    responses=responses(401, 500),
)
for resource in RESOURCES:
    router.include_router(resource)

# Prometheus' text format, not a JSON route: outside the OpenAPI document, behind the token.
scrape = APIRouter(dependencies=[Depends(authorized)], include_in_schema=False)


@scrape.get("/metrics")
def metrics(feeds: Feeds) -> Response:
    """The live runs' series merged, with the server's own (``pipeline/control/metrics.py``)."""
    return Response(aggregate(feeds.all().values()), media_type=CONTENT_TYPE_LATEST)


# The console: its page and files, served as they are (no token: the page asks for one, and
# shows nothing the API does not answer it); nothing is fetched from elsewhere.
CONSOLE = Path(__file__).with_name("console")
console = APIRouter(include_in_schema=False)


@console.get("/")
def console_page() -> FileResponse:
    """The console's page (``console/index.html``)."""
    return FileResponse(CONSOLE / "index.html", media_type="text/html")


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
    if not path.startswith(PREFIX + "/"):
        return None
    rest = path.removeprefix(PREFIX)  # the resources' routes are relative to the prefix
    methods = {
        method
        for resource in RESOURCES
        for route in resource.routes
        if isinstance(route, APIRoute) and route.path_regex.match(rest)
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
    context: OperatorContext,
    token: str,
    on_shutdown: Callable[[], None] | None = None,
    *,
    sample_every: float = EVERY,
) -> FastAPI:
    """The API over the safepoints and job status of ``context``'s cluster.

    ``on_shutdown`` runs (in a thread) when the server shuts down, before it exits: uvicorn
    re-raises the SIGTERM it caught once its shutdown is done, so code after
    ``uvicorn.run`` never runs then.
    """
    if not token:
        raise ValueError("the API needs a non-empty bearer token")

    feeds = Changefeeds(context)
    if sample_every <= 0:
        raise ConfigError([("--sample-every", "must be above 0 seconds")])
    history = LagHistory(feeds.all, dead_letters=feeds.dead_letter_counts, every=sample_every)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        sampling = asyncio.create_task(_sampled(history))
        yield
        sampling.cancel()
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
    app.state.history = history
    for error in (HighwaterError, RequestValidationError, HTTPException, Exception):
        app.add_exception_handler(error, _handle)
    app.include_router(router)
    app.include_router(scrape)
    app.include_router(console)
    app.mount("/console", StaticFiles(directory=CONSOLE), name="console")
    return app


async def _sampled(history: LagHistory) -> None:
    """The lag history's samples, every ``history.every`` seconds, while the server runs."""
    while True:
        try:
            await asyncio.to_thread(history.sample)
        except Exception:  # a sample lost is a gap in a chart, never the server's end
            log.exception("the lag history's sample failed")
        await asyncio.sleep(history.every)


def serve(
    context: OperatorContext,
    token: str,
    *,
    host: str,
    port: int,
    on_shutdown: Callable[[], None] | None = None,
    sample_every: float = EVERY,
) -> None:
    """Serve the API until interrupted; ``on_shutdown`` runs before the process ends."""
    import uvicorn  # noqa: PLC0415 - only `highwater server` serves

    app = create_app(context, token, on_shutdown, sample_every=sample_every)
    uvicorn.run(app, host=host, port=port, log_level="info")
