"""The server runs the changefeeds created through it: one ``spark-submit`` each.

Every ``interval`` the supervisor reads the specs in the jobs topic (``lifecycle.py``) and
makes the processes match them:

* a spec that says ``running`` and has a config, with no process: start one (the config as
  stored, in a scratch file; its relative paths from the spec's ``base_dir``);
* a process that ended: a *retryable* end (exit 75, see ``runtime/process.py``, or killed by
  a signal) is started again after a back-off (1 s, doubling to 60 s; back to 1 s after a
  run that lasted a minute); any other end (finished, paused, a config error, fenced by
  another instance, data gone) is left as it is until the spec changes;
* ``paused`` and ``removed``: the changefeed's run reads its spec itself and stops at the
  end of its batch, so there is nothing to kill.

Nothing lives only in the server: a restarted server reads the specs and starts again what
should run. A run left over from a killed server is fenced by the new one's (one writer per
changefeed, ``sinks/producer.py``). Stopping the server asks each run to finish its batch
(the stop file ``highwater run`` uses) and waits for it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core.operators.lifecycle import ChangefeedSpec
from pipeline.runtime.process import RETRYABLE
from pipeline.runtime.submit import spark_submit_command, spark_submit_env
from schemas.errors import HighwaterError

from .changefeeds import Changefeeds, parse_spec_config
from .context import OperatorContext

log = logging.getLogger(__name__)

FIRST_BACKOFF, MAX_BACKOFF, STEADY_RUN = 1.0, 60.0, 60.0


@dataclass
class Run:
    """One changefeed's process, and what the supervisor knows of its history."""

    spec: ChangefeedSpec  # the spec it was started for
    process: subprocess.Popen[bytes] | None
    started: float
    stop_file: Path
    backoff: float = FIRST_BACKOFF
    not_before: float = 0.0  # when a retry may start
    ended: int | None = None  # its exit code, once it ended and was not restarted
    log_file: Path | None = None
    history: list[int] = field(default_factory=list)  # exit codes so far


def retryable(code: int) -> bool:
    """Whether a run that exited with ``code`` may do better when simply started again."""
    return code == RETRYABLE or code < 0 or code >= 128


class Supervisor:
    """Keeps one process per changefeed whose spec says ``running``."""

    def __init__(
        self,
        context: OperatorContext,
        work_dir: Path,
        *,
        interval: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context = context
        self.work_dir = work_dir
        self.interval = interval
        self.clock = clock
        self.runs: dict[str, Run] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        """Supervise in a background thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="highwater-supervisor")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except HighwaterError as exc:  # Kafka unreachable: try again next round
                log.warning("supervisor: %s", exc)
            self._stop.wait(self.interval)

    def stop(self, timeout: float = 120.0) -> None:
        """Ask every run to finish its batch and stop; wait for them, then for the loop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for run in self.runs.values():
            run.stop_file.touch()
        deadline = self.clock() + timeout
        for changefeed_id, run in self.runs.items():
            if run.process is None:
                continue
            try:
                run.process.wait(max(0.0, deadline - self.clock()))
            except subprocess.TimeoutExpired:
                log.warning("changefeed %s did not stop in time: killed", changefeed_id)
                run.process.kill()
                run.process.wait()

    # -- one round --------------------------------------------------------------------------

    def reconcile(self) -> None:
        """Make the processes match the specs, once."""
        specs = {
            i: found.spec
            for i, found in Changefeeds(self.context).all().items()
            if found.spec is not None and found.spec.config
        }
        for changefeed_id, spec in specs.items():
            run = self.runs.get(changefeed_id)
            if run is not None and run.process is not None and run.process.poll() is not None:
                self._ended(changefeed_id, run)
            if spec.desired != "running":
                continue
            if run is None or (run.process is None and self._may_start(run, spec)):
                self._launch(changefeed_id, spec, run)

    def _ended(self, changefeed_id: str, run: Run) -> None:
        assert run.process is not None  # noqa: S101 - the caller checked
        code = run.process.returncode
        run.process = None
        run.history.append(code)
        lasted = self.clock() - run.started
        if retryable(code):
            run.backoff = FIRST_BACKOFF if lasted >= STEADY_RUN else run.backoff
            run.not_before = self.clock() + run.backoff
            log.warning(
                "changefeed %s ended (exit %d): retrying in %.0f s (log: %s)",
                changefeed_id,
                code,
                run.backoff,
                run.log_file,
            )
            run.backoff = min(run.backoff * 2, MAX_BACKOFF)
            run.ended = None
        else:
            run.ended = code
            log.warning(
                "changefeed %s ended (exit %d); not restarted until its spec changes (log: %s)",
                changefeed_id,
                code,
                run.log_file,
            )

    def _may_start(self, run: Run, spec: ChangefeedSpec) -> bool:
        if spec.updated_at != run.spec.updated_at:  # resumed, or created anew
            run.backoff, run.not_before, run.ended = FIRST_BACKOFF, 0.0, None
            return True
        return run.ended is None and self.clock() >= run.not_before

    def _launch(self, changefeed_id: str, spec: ChangefeedSpec, run: Run | None) -> None:
        """Start the changefeed's ``spark-submit`` (its output in a log file beside it)."""
        folder = self.work_dir / changefeed_id
        folder.mkdir(parents=True, exist_ok=True)
        config_file = folder / "config.yaml"
        config_file.write_text(spec.config, encoding="utf-8")
        stop_file = folder / "stop"
        stop_file.unlink(missing_ok=True)
        log_file = folder / "run.log"
        try:
            config = parse_spec_config(spec.config, spec.base_dir)
        except HighwaterError as exc:  # e.g. a ${VAR} this server's environment lacks
            log.error("changefeed %s cannot start: %s", changefeed_id, exc)
            self.runs[changefeed_id] = Run(spec, None, self.clock(), stop_file, ended=2)
            return
        command = spark_submit_command(
            config_file, config, folder / "submit", spec.base_dir or None
        )
        env = spark_submit_env(dict(os.environ), config.spark.master)
        with log_file.open("ab") as out:
            process = subprocess.Popen(
                command,
                env={**env, "HIGHWATER_STOP_FILE": str(stop_file)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log.warning("changefeed %s started (pid %d, log %s)", changefeed_id, process.pid, log_file)
        history = [] if run is None else run.history
        backoff = FIRST_BACKOFF if run is None else run.backoff
        self.runs[changefeed_id] = Run(
            spec, process, self.clock(), stop_file, backoff, log_file=log_file, history=history
        )
