"""TiCDC Canal-JSON events (``enable-tidb-extension=true``) as TiCDC writes them, for tests."""

from __future__ import annotations

import json
from typing import Any

TYPES = {"id": "int", "amount": "decimal(30,10)", "note": "text"}


def tso(ms: int, logical: int = 0) -> int:
    """A TiDB TSO: physical milliseconds << 18 | logical."""
    return ms << 18 | logical


def canal(kind: str, ts: int, data: list[dict[str, Any]] | None, **extra: Any) -> bytes:
    """A DML event of table ``shop.orders`` (``TYPES``) committed at TSO ``ts``."""
    event = {
        "id": 0,
        "database": "shop",
        "table": "orders",
        "pkNames": ["id"],
        "isDdl": False,
        "type": kind,
        "es": ts >> 18,
        "ts": ts >> 18,
        "sql": "",
        "sqlType": {"id": 4, "amount": 3, "note": 2005},
        "mysqlType": TYPES,
        "data": data,
        "old": None,
        "_tidb": {"commitTs": ts},
        **extra,
    }
    return json.dumps(event, ensure_ascii=False).encode()


def watermark(ts: int) -> bytes:
    """A ``TIDB_WATERMARK`` event: TiCDC sends one to every partition."""
    return canal(
        "TIDB_WATERMARK", ts, None, pkNames=None, mysqlType=None, _tidb={"watermarkTs": ts}
    )
