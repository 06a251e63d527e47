"""The Python environment executors on a cluster run: packed once, shipped with each run.

Executors of a non-local master run the changefeed's per-record Python (``mapInArrow``)
with pyarrow, orjson, fastavro, pydantic… A worker that shares nothing with the submitter
has none of them, and not the submitter's interpreter either (a virtualenv links to it).
:func:`packed` builds a virtualenv from the interpreter the workers have
(``/usr/bin/python3.<minor>``, the distribution's; the same minor as the driver's, which
PySpark requires), copies into it the installed files of Highwater's runtime dependencies
(no network: the same bytes the driver runs), and packs it as a ``.tar.gz`` that
``spark-submit --archives`` unpacks in each executor's directory. Left out: pyspark (each
worker's Spark brings its own ``pyspark.zip``) and Highwater itself (shipped per run with
``--py-files``, highwater-consumer's ``schemas`` with it: an editable install's files are
only pointers to the checkout). The archive is cached by what is in it
(``~/.cache/highwater/pyenv``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

from schemas.errors import PlatformError

# the worker's Spark; ours, shipped with --py-files (highwater-consumer brings `schemas`)
LEFT_OUT = frozenset({"pyspark", "py4j", "highwater", "highwater-consumer"})


def worker_interpreter() -> str:
    """The interpreter workers are expected to have: the distribution's, our minor version."""
    return f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"


def closure(root: str = "highwater") -> list[metadata.Distribution]:
    """``root``'s runtime dependencies, transitively (extras the requirement names included)."""
    found: dict[str, metadata.Distribution] = {}
    pending = [(root, frozenset[str]())]
    while pending:
        name, extras = pending.pop()
        key = _normal(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency of a dependency that is not installed
        if key in found and not extras:
            continue
        found[key] = dist
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            wanted = re.findall(r'extra\s*==\s*["\']([^"\']+)["\']', marker)
            if wanted and not set(wanted) & extras:
                continue  # a dependency of an extra nobody asked for
            if marker.strip() and not wanted and not _marker_holds(marker):
                continue
            match = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", spec)
            if match:
                names = frozenset(e.strip() for e in (match.group(2) or "").split(",") if e)
                pending.append((match.group(1), names))
    return [dist for key, dist in sorted(found.items()) if key not in LEFT_OUT]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _marker_holds(marker: str) -> bool:
    """An environment marker without extras, judged on this interpreter (packaging's rules)."""
    from packaging.markers import Marker  # noqa: PLC0415 - pip's own, always installed with it

    return bool(Marker(marker.strip()).evaluate())


def stamp(dists: list[metadata.Distribution], interpreter: str) -> str:
    """What the archive holds: the interpreter and each distribution's name and version."""
    text = interpreter + "\n" + "\n".join(f"{d.metadata['Name']}=={d.version}" for d in dists)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def packed(cache: Path | None = None, interpreter: str | None = None) -> Path:
    """The archive of the runtime environment (built now unless the cache has it)."""
    interpreter = interpreter or worker_interpreter()
    if not Path(interpreter).is_file():
        raise PlatformError(
            f"cannot pack the executors' Python: {interpreter} is missing (the workers must "
            "have the same Python minor version as the driver there)"
        )
    dists = closure()
    cache = cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "highwater"
    target = cache / "pyenv" / f"highwater-env-{stamp(dists, interpreter)}.tar.gz"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="highwater-env-") as scratch:
        env = Path(scratch) / "env"
        subprocess.run([interpreter, "-m", "venv", "--without-pip", str(env)], check=True)
        minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
        site = env / "lib" / minor / "site-packages"
        for dist in dists:
            for file in dist.files or []:
                if file.parts[0] == ".." or "__pycache__" in file.parts:
                    continue  # scripts outside site-packages; bytecode is made on import
                source = Path(str(dist.locate_file(file)))
                if source.is_file():
                    (site / file).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, site / file)
        partial = target.with_suffix(".partial")
        with tarfile.open(partial, "w:gz", compresslevel=1) as archive:
            archive.add(env, arcname=".")
        partial.rename(target)
    return target
