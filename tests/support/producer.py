"""A steady upstream: a workload written to a source topic in small steps until stopped."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import Producer

from tests.support.workload import Workload


class SteadyProducer:
    """Writes ``step`` more changes of the workload every ``pause`` seconds until stopped."""

    def __init__(
        self, bootstrap: str, topic: str, workload: Workload, step: int = 20, pause: float = 0.2
    ) -> None:
        self.topic, self.workload = topic, workload
        self.bootstrap = bootstrap
        self.step, self.pause = step, pause
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)
        assert self.error is None, self.error

    def _run(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
            while not self._stop.is_set():
                self._write(producer, self.workload.records(self.step))
                time.sleep(self.pause)
        except BaseException as exc:
            self.error = exc

    def _write(self, producer: Producer, records: list[tuple[int, Any, bytes]]) -> None:
        for partition, key, value in records:
            producer.produce(self.topic, key=key, value=value, partition=partition)
        assert producer.flush(30) == 0

    def finish(self) -> None:
        """The workload's final markers (after :meth:`stop`)."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        self._write(producer, self.workload.final_markers())
