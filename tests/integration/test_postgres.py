"""The embedded PostgreSQL the Debezium pipeline stands on (``highwater dev postgres``).

Started as operators start it, it takes SQL and decodes what a transaction commits from its
write-ahead log (``wal_level=logical``, a replication slot), the values exactly as written:
what Debezium's connector reads through ``pgoutput``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.cli import main as highwater
from pipeline.dev.postgres import EmbeddedPostgres


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the ``postgres`` user can reach (pytest's own are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="highwater-pg-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_embedded_postgres_decodes_a_committed_transaction_exactly(
    folder: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HIGHWATER_STATE_DIR", str(folder))
    assert highwater(["dev", "postgres", "start", "--name", "t"]) == 0
    server = EmbeddedPostgres(folder / "postgres" / "t")
    try:
        info = server.status()
        assert info is not None
        assert f"port={info.port} dbname=highwater" in capsys.readouterr().out
        assert server.sql("SHOW wal_level").strip() == "logical"
        decoded = server.sql(
            """
            CREATE TABLE orders (id int PRIMARY KEY, amount numeric, at timestamptz, note text);
            ALTER TABLE orders REPLICA IDENTITY FULL;
            SELECT 'slot' FROM pg_create_logical_replication_slot('hw', 'test_decoding');
            BEGIN;
            INSERT INTO orders VALUES
              (1, 12345678901234567890.123456789012, '2024-02-29 23:59:59.999999+05:30', 'ü 𝄞 "q"');
            UPDATE orders SET amount = -0.000000000001 WHERE id = 1;
            COMMIT;
            SELECT data FROM pg_logical_slot_get_changes('hw', NULL, NULL);
            SELECT pg_drop_replication_slot('hw');
            """
        ).splitlines()
        changes = [line for line in decoded if line.startswith("table public.orders")]
        assert len(changes) == 2
        assert "amount[numeric]:12345678901234567890.123456789012 " in changes[0]
        assert "at[timestamp with time zone]:'2024-02-29 18:29:59.999999+00'" in changes[0]
        assert "note[text]:'ü 𝄞 \"q\"'" in changes[0]
        assert "new-tuple: id[integer]:1 amount[numeric]:-0.000000000001 " in changes[1]
        begins = [line for line in decoded if line.startswith(("BEGIN", "COMMIT"))]
        assert len(begins) == 2  # one transaction: both changes inside it
    finally:
        assert highwater(["dev", "postgres", "stop", "--name", "t"]) == 0
    assert server.status() is None
    assert highwater(["dev", "postgres", "status", "--name", "t"]) == 3
