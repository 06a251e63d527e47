"""The job status: what an operator reads about a changefeed without its logs.

One JSON record per changefeed in a compacted topic (``jobs.topic``, default
``_highwater_jobs``), keyed by changefeed id, written by the driver at every checkpoint,
after every initial-scan chunk and at every change of state:

    {"changefeed_id": "orders", "state": "scanning", "high_water": "<hlc>",
     "statement_time": "<hlc>", "last_marker": null,
     "scan": {"chunks_done": 3, "chunks_total": 12, "records_done": …, "records_total": …,
              "rows": …, "rows_per_second": …, "eta_seconds": …},
     "error": null, "safepoint": {"service_id": …, "safepoint": "<hlc>", "expires_at": …},
     "warnings": [], "updated_at": "<RFC 3339>"}

States: ``scanning`` (initial scan), ``running`` (streaming), ``stopped`` (asked to, or an
``available_now`` drain ended), ``finished`` (``end_time`` reached, or ``initial_scan: only``
done), ``failed`` (``error`` says why).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from schemas.errors import HighwaterError
from schemas.hlc import Hlc


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class JobStatus:
    """One changefeed's status record."""

    changefeed_id: str
    state: str
    high_water: Hlc | None = None
    statement_time: Hlc | None = None
    last_marker: Hlc | None = None
    scan: Mapping[str, Any] | None = None
    error: str | None = None
    safepoint: Mapping[str, Any] | None = None  # the changefeed's own (pipeline/safepoints.py)
    warnings: list[str] = field(default_factory=list)  # e.g. a source topic's retention
    updated_at: str = field(default_factory=_now)

    def encode(self) -> bytes:
        """The record's bytes."""
        return json.dumps(
            {
                "changefeed_id": self.changefeed_id,
                "state": self.state,
                "high_water": _text(self.high_water),
                "statement_time": _text(self.statement_time),
                "last_marker": _text(self.last_marker),
                "scan": None if self.scan is None else dict(self.scan),
                "error": self.error,
                "safepoint": None if self.safepoint is None else dict(self.safepoint),
                "warnings": self.warnings,
                "updated_at": self.updated_at,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> JobStatus:
        """Parse a status record."""
        try:
            raw = json.loads(data)
            return cls(
                changefeed_id=raw["changefeed_id"],
                state=raw["state"],
                high_water=_hlc(raw.get("high_water")),
                statement_time=_hlc(raw.get("statement_time")),
                last_marker=_hlc(raw.get("last_marker")),
                scan=raw.get("scan"),
                error=raw.get("error"),
                safepoint=raw.get("safepoint"),
                warnings=list(raw.get("warnings") or []),
                updated_at=raw.get("updated_at", ""),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise HighwaterError(f"unreadable job status record: {exc}") from exc


def _text(ts: Hlc | None) -> str | None:
    return None if ts is None else str(ts)


def _hlc(text: str | None) -> Hlc | None:
    return None if text is None else Hlc.parse(text)
