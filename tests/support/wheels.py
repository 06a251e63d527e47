"""Our wheels built from a copy of the sources and installed in a fresh virtualenv, no index.

The virtualenv gets its dependencies from a folder the test chooses, named by a plain path
line in a ``.pth`` file: such a line puts the folder on ``sys.path``, but the ``.pth`` files
in it are not processed (an editable install there does not leak in).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def build_wheels(dist: Path, *sources: Path) -> None:
    """``pip wheel --no-deps`` of each source folder into ``dist``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), *sources],
        check=True,
        capture_output=True,
        timeout=300,
    )


def fresh_venv(venv: Path, wheels: list[Path], deps: Path) -> Path:
    """A new virtualenv holding ``wheels`` (no index, no dependencies) and ``deps``; its Python."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    # nothing of the checkout on its path (`python -m` there, or PYTHONPATH, would show pip
    # the checkout's .egg-info: "already satisfied", and nothing installed)
    alone = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", *map(str, wheels)],
        check=True,
        capture_output=True,
        timeout=120,
        cwd=venv,
        env=alone,
    )
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "highwater-test-deps.pth").write_text(f"{deps}\n", encoding="utf-8")
    return python
