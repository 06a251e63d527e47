"""Running ``highwater run`` (spark-submit) as a separate process, as users do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
SIGKILLED = 128 + 9  # highwater run's exit code when a SIGKILL ended its spark-submit


def write_config(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def start_server(arguments: list[str], state: Path, log: Path) -> subprocess.Popen[bytes]:
    """``highwater server <arguments>`` as operators start it (it runs what is created).

    Its state (each run's config, log and stop file) under ``state``; its output to ``log``.
    """
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "server", *arguments],
            cwd=ROOT,
            env={**clean, "HIGHWATER_STATE_DIR": str(state)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def start_run(config_file: Path, log_file: Path, **env: str) -> subprocess.Popen[bytes]:
    """``highwater run --config …`` in the background, its output to ``log_file``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_")}
    with log_file.open("ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "-v", "run", "--config", str(config_file)],
            cwd=ROOT,
            env={**clean, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def run(config_file: Path, log_file: Path, timeout: float = 300, **env: str) -> int:
    """Run to the end; return the exit code."""
    process = start_run(config_file, log_file, **env)
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise


def run_killed_at(
    config_file: Path, log_file: Path, crash: str, timeout: float = 300, **env: str
) -> str:
    """Run with ``HIGHWATER_CRASH_AT=crash``; show the SIGKILL landed there; the run's log.

    Any failure is not enough: the exit code must be a SIGKILL's and the crash point must
    have been reached (``pipeline/core/batch/faults.py`` records it just before the kill).
    """
    logged = log_file.stat().st_size if log_file.exists() else 0
    record = log_file.with_name(f"{log_file.name}.crashes")
    record.unlink(missing_ok=True)
    code = run(
        config_file,
        log_file,
        timeout,
        HIGHWATER_CRASH_AT=crash,
        HIGHWATER_CRASH_LOG=str(record),
        **env,
    )
    run_log = log_file.read_bytes()[logged:].decode(errors="replace")
    assert code == SIGKILLED, f"{crash}: exit {code}, not a SIGKILL\n{run_log[-3000:]}"
    reached = record.read_text(encoding="utf-8") if record.exists() else ""
    assert reached == f"crash point {crash}: SIGKILL\n", f"{reached!r}\n{run_log[-3000:]}"
    return run_log
