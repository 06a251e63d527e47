"""Building the ``spark-submit`` command for a changefeed (``highwater run``)."""

from __future__ import annotations

import importlib.util
import shlex
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pipeline.config import MASK, ChangefeedConfig, looks_secret
from pipeline.runtime.jars import spark_jars
from pipeline.runtime.pyenv import packed
from pipeline.runtime.session import SPARK_LOG4J2, local_network_conf
from schemas.errors import PlatformError

JOB = Path(__file__).resolve().parents[1] / "job.py"  # the spark-submit application
_PACKAGES = ("pipeline", "encoders", "sinks", "schemas")
ENVIRONMENT = "environment"  # where executors find the shipped Python (spark.python_env)


def spark_submit_executable() -> str:
    """Pyspark's ``spark-submit``: beside this Python, else the one inside the pyspark package.

    (The package's own serves where pyspark was installed apart from this Python's scripts,
    e.g. from a shared site-packages; ``spark-submit`` on PATH is the last resort.)
    """
    beside = Path(sys.executable).parent / "spark-submit"
    if beside.exists():
        return str(beside)
    import pyspark  # noqa: PLC0415 - Spark stays out of the import path

    packaged = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
    return str(packaged) if packaged.exists() else "spark-submit"


def spark_submit_env(base: dict[str, str], master: str) -> dict[str, str]:
    """The environment ``spark-submit`` needs to find this Spark and this Python.

    Without them it searches ``python3`` on PATH, which is not the virtualenv's unless the
    user activated it.
    """
    import pyspark  # noqa: PLC0415 - Spark stays out of the import path

    local = {"SPARK_LOCAL_IP": "127.0.0.1"} if master.startswith("local") else {}
    return {
        **local,
        **base,
        "SPARK_HOME": str(Path(pyspark.__file__).resolve().parent),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


def spark_submit_command(
    config_path: Path, config: ChangefeedConfig, work_dir: Path, base_dir: str | None = None
) -> list[str]:
    """The full ``spark-submit`` command line that runs ``config``.

    On a non-local master the executors need our code too: it is zipped into ``work_dir``
    and shipped with ``--py-files``. ``base_dir``: where the config's relative paths start,
    when not beside the file.
    """
    spark = config.spark
    command = [
        spark_submit_executable(),
        "--master",
        spark.master,
        "--name",
        spark.app_name or f"highwater-{config.changefeed_id}",
        "--jars",
        ",".join(str(j) for j in spark_jars()),
        "--conf",
        f"spark.pyspark.python={executor_python(spark.master, spark.python_env)}",
        "--conf",
        f"spark.pyspark.driver.python={sys.executable}",
    ]
    conf = {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={SPARK_LOG4J2}",
        **local_network_conf(spark.master),
        **spark.conf,
    }
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    if not spark.master.startswith("local"):
        command += ["--py-files", str(package_zip(work_dir))]
        if spark.python_env != "none":
            archive = packed() if spark.python_env == "auto" else Path(spark.python_env)
            command += ["--archives", f"{archive}#{ENVIRONMENT}"]
    command += [str(JOB), "--config", str(config_path.resolve())]
    return command if base_dir is None else [*command, "--base-dir", base_dir]


def executor_python(master: str, python_env: str) -> str:
    """The interpreter executors run: the shipped environment's, off local mode."""
    if master.startswith("local") or python_env == "none":
        return sys.executable  # the executors see what the driver sees
    return f"./{ENVIRONMENT}/bin/python"  # unpacked in each executor's directory


def printable(command: list[str], env: dict[str, str] | None = None) -> str:
    """The command as a shell runs it from any directory, the virtualenv not activated.

    ``env``: what it needs set (:func:`spark_submit_env`'s own), put first as ``env K=V …``;
    every word quoted for a POSIX shell. Values of secret-looking ``--conf`` settings are
    masked: that one setting must be given again by whoever runs it.
    """
    shown = [f"{k}={v}" for k, v in (env or {}).items()]
    shown = ["env", *shown] if shown else []
    for previous, arg in zip(["", *command], command, strict=False):
        key, equals, _value = arg.partition("=")
        shown.append(
            f"{key}={MASK}" if previous == "--conf" and equals and looks_secret(key) else arg
        )
    return shlex.join(shown)


def package_zip(work_dir: Path, *, consumer: bool = False) -> Path:
    """Our Python packages as one zip for ``--py-files``.

    Each found where this Python imports it from (``schemas`` and ``highwater_consumer`` are
    highwater-consumer's: installed from a wheel, not beside ``pipeline``). ``consumer``: with
    ``highwater_consumer`` (``apply --engine spark``'s executors read rows with it).
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    target = work_dir / "highwater-py.zip"
    packages = (*_PACKAGES, "highwater_consumer") if consumer else _PACKAGES
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for package in packages:
            root = _package_folder(package).parent
            paths = sorted((root / package).rglob("*.py"))
            data = sorted((root / package).rglob("*.proto"))  # read as resources (schemas/)
            for path in [*paths, *data]:
                archive.write(path, path.relative_to(root))
            # zipimport finds no namespace packages: each folder gets its __init__.py
            for folder in sorted({p.parent for p in paths}):
                if not (folder / "__init__.py").is_file():
                    archive.writestr(str((folder / "__init__.py").relative_to(root)), "")
    return target


def _package_folder(package: str) -> Path:
    """The folder ``package`` is imported from (found, not imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise PlatformError(f"the package {package!r} cannot be found to ship to the executors")
    return Path(spec.origin).resolve().parent


def supervise(command: list[str], env: dict[str, str]) -> int:
    """Run ``spark-submit`` and turn SIGTERM/SIGINT into a graceful stop of the changefeed.

    A signal to the JVM would kill the job mid-batch; instead the job watches a stop file
    (``HIGHWATER_STOP_FILE``): on a signal we create it, the job finishes its batch,
    checkpoints and exits, and we exit with its code (128 + the signal's number if a signal
    killed it, as a shell reports it). spark-submit runs in its own session so a terminal's
    Ctrl-C reaches only us.
    """
    with tempfile.TemporaryDirectory(prefix="highwater-run-") as scratch:
        stop_file = Path(scratch) / "stop"
        child = subprocess.Popen(
            command, env={**env, "HIGHWATER_STOP_FILE": str(stop_file)}, start_new_session=True
        )

        def request_stop(signum: int, _frame: object) -> None:
            print(f"highwater: signal {signum}: stopping after the current batch", file=sys.stderr)
            stop_file.touch()

        previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            code = child.wait()
            return 128 - code if code < 0 else code
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
