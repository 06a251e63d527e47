"""Running ``highwater run`` (spark-submit) as a separate process, as users do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def write_config(path: Path, raw: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


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
