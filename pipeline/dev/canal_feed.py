"""A TiCDC Canal-JSON topic as TiCDC writes it, for the benchmark.

``canal-json`` with ``enable-tidb-extension=true``: every value text, ``mysqlType`` and
``sqlType`` in each event, one to three rows per event (TiCDC batches a statement's rows),
updates with their old values, ``_tidb.commitTs`` TSOs in commit order, and a
``TIDB_WATERMARK`` to every partition now and then (the markers). The shape of the events
``tests/integration/test_sources.py`` reads; generated, so a million take seconds.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

MYSQL_TYPES = {
    "id": "bigint",
    "region": "varchar",
    "customer": "varchar",
    "amount": "decimal(20,4)",
    "ratio": "decimal(30,12)",
    "note": "text",
    "status": "varchar",
    "items": "int",
    "vip": "tinyint(1)",
    "created_at": "datetime(6)",
    "payload": "json",
}
SQL_TYPES = {
    "id": -5, "region": 12, "customer": 12, "amount": 3, "ratio": 3, "note": 2005,
    "status": 12, "items": 4, "vip": -6, "created_at": 93, "payload": 12,
}  # fmt: skip
NOTES = ("plain", 'a "quoted" note', "tab\there", "naïve café ☕", "line\nbreak", "😀 emoji")


def tso(ms: int, logical: int = 0) -> int:
    """A TiDB TSO: physical milliseconds << 18 | logical."""
    return ms << 18 | logical


@dataclass
class CanalFeed:
    """Row events of one table over ``partitions`` partitions (by primary key), watermarks."""

    table: str = "orders"
    partitions: int = 12
    keys: int = 50_000
    watermark_every: int = 2_000  # events between two watermarks (each to every partition)
    seed: int = 1

    def events(self, count: int) -> Iterator[tuple[int, bytes | None, bytes]]:
        """``count`` records, in commit order: (partition, key (none), value)."""
        rng = random.Random(self.seed)  # noqa: S311 - a reproducible workload, not a secret
        ms = 1_764_000_000_000
        rows: dict[int, dict[str, Any]] = {}
        n = 0
        while n < count:
            ms += rng.randint(1, 5)
            commit = tso(ms, rng.randrange(1 << 10))
            if n and n % self.watermark_every == 0:
                mark = orjson.dumps(
                    {
                        "id": 0, "database": "", "table": "", "pkNames": None, "isDdl": False,
                        "type": "TIDB_WATERMARK", "es": ms, "ts": ms, "sql": "",
                        "sqlType": None, "mysqlType": None, "data": None, "old": None,
                        "_tidb": {"watermarkTs": commit},
                    }
                )  # fmt: skip
                for p in range(self.partitions):
                    yield p, None, mark
                n += self.partitions
                continue
            ids = [rng.randrange(self.keys) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
            partition = zlib.crc32(str(ids[0]).encode()) % self.partitions
            ids = [i for i in ids if zlib.crc32(str(i).encode()) % self.partitions == partition]
            update = all(i in rows for i in ids)
            data, old = [], []
            for i in dict.fromkeys(ids):
                row = self._row(rng, i, ms)
                if update:
                    old.append(rows[i])
                rows[i] = row
                data.append(row)
            event = {
                "id": 0,
                "database": "bench",
                "table": self.table,
                "pkNames": ["id"],
                "isDdl": False,
                "type": "UPDATE" if update else "INSERT",
                "es": ms,
                "ts": ms + 2,
                "sql": "",
                "sqlType": SQL_TYPES,
                "mysqlType": MYSQL_TYPES,
                "data": data,
                "old": old if update else None,
                "_tidb": {"commitTs": commit},
            }
            yield partition, None, orjson.dumps(event)
            n += 1

    def _row(self, rng: random.Random, key: int, ms: int) -> dict[str, Any]:
        return {
            "id": str(key),
            "region": rng.choice(("eu-west", "us-east", "ap-south")),
            "customer": f"customer-{rng.randrange(10_000)}",
            "amount": f"{rng.randrange(-(10**9), 10**12) / 10**4:.4f}",
            "ratio": f"0.{rng.randrange(10**12):012d}",
            "note": rng.choice(NOTES),
            "status": rng.choice(("new", "paid", "shipped")),
            "items": str(rng.randrange(1, 50)),
            "vip": str(int(rng.random() < 0.1)),
            "created_at": "2025-11-24 16:00:00.123456",
            "payload": '{"tags": ["a", "b"], "depth": {"x": [1, 2.5]}}',
        }
