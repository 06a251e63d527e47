"""What every route of the REST API shares: the error body, strict requests, dependencies.

The routes (``safepoint_api.py``, ``changefeed_api.py``) and the server that assembles them
(``server.py``) take from here the error body and the responses each route documents with
it, the strict base of request bodies, and the dependencies: the bearer token's check, the
operator context :func:`~.server.create_app` keeps in ``app.state``, a safepoint registry
opened (and closed) per request, the changefeeds' operations.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from pipeline.core.progress.safepoints import SafepointRegistry

from .changefeeds import Changefeeds
from .context import OperatorContext


class ErrorBody(BaseModel):
    """Every error the API returns."""

    error_code: str = Field(
        description="invalid_argument, unauthorized, forbidden, not_found, "
        "method_not_allowed or internal",
        examples=["invalid_argument"],
    )
    error_msg: str = Field(description="what went wrong, for a person")


class StrictBody(BaseModel):
    """A request body: strictly typed, unknown fields refused (a typo is not a default)."""

    model_config = ConfigDict(strict=True, extra="forbid")


def responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Each status' documented response: the error body, and what it means."""
    described = {
        400: "a bad argument",
        401: "no valid bearer token",
        403: "a changefeed's own safepoint",
        404: "not there",
        409: "not in a state that allows it",
        500: "Kafka failed, or holds an unreadable record",
    }
    return {status: {"model": ErrorBody, "description": described[status]} for status in statuses}


_bearer = HTTPBearer(auto_error=False, description="the token given to 'highwater server'")


def authorized(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Refuse (401) a request without the server's bearer token."""
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
