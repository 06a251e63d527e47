"""The operators' changefeed operations, for the CLI and the REST API alike.

Each turns a request into a spec record in the jobs topic
(``pipeline/core/operators/lifecycle.py``): the changefeed's own run obeys it (``pause``,
``remove``) and the server starts what says ``running``. A refusal is a
:class:`~schemas.errors.LifecycleError` with its REST code.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import ChangefeedConfig, parse_config
from pipeline.core.batch.kafka_clients import client_config
from pipeline.core.operators.lifecycle import ChangefeedSpec, SpecStore, specs_of, statuses_of
from pipeline.core.operators.status import JobStatus
from pipeline.core.operators.update import ConfigUpdate, check_update
from schemas.errors import ConfigError, HighwaterError, LifecycleError
from sinks.compacted import CompactedTopic

from . import dead_letters
from .context import OperatorContext


@dataclass(frozen=True)
class Changefeed:
    """What an operator sees of one changefeed: its spec (if any) and its status (if any)."""

    changefeed_id: str
    spec: ChangefeedSpec | None
    status: JobStatus | None

    @property
    def desired(self) -> str | None:
        """What was asked: ``running``, ``paused``, ``removed``; None: run by ``highwater run``."""
        return None if self.spec is None else self.spec.desired

    def sources(self) -> list[str]:
        """Its source topics: its config's, else those its job status names."""
        if self.spec is not None and self.spec.config:
            try:
                return [s.topic for s in _parsed(self.spec.config, self.spec.base_dir).sources]
            except ConfigError:  # stored before a rule it breaks now: its status may say
                pass
        partitions = [] if self.status is None else self.status.partitions or []
        return sorted({p["topic"] for p in partitions})


def parse_spec_config(text: str, base_dir: str) -> ChangefeedConfig:
    """Validate a config's YAML text as ``highwater validate`` would (relative to ``base_dir``)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"not valid YAML: {exc}")]) from exc
    return parse_config(raw, base_dir=Path(base_dir) if base_dir else None)


@functools.lru_cache(maxsize=256)
def _parsed(text: str, base_dir: str) -> ChangefeedConfig:
    """A stored spec's config, parsed once (the server's sampler asks for it every few seconds)."""
    return parse_spec_config(text, base_dir)


class Changefeeds:
    """The changefeeds of one cluster's jobs topic."""

    def __init__(self, context: OperatorContext) -> None:
        self.context = context

    def _jobs(self) -> CompactedTopic:
        return CompactedTopic(self.context.client, self.context.jobs_topic)

    def all(self) -> dict[str, Changefeed]:
        """Every changefeed with a spec or a status (a record that cannot be read is skipped)."""
        jobs = self._jobs()
        try:
            records = jobs.read_all()
        finally:
            jobs.close()
        specs = specs_of(records)
        statuses = {}
        for key, data in statuses_of(records).items():
            try:
                statuses[key] = JobStatus.decode(data)
            except HighwaterError:
                continue
        ids = sorted(set(specs) | set(statuses))
        return {i: Changefeed(i, specs.get(i), statuses.get(i)) for i in ids}

    def get(self, changefeed_id: str) -> Changefeed:
        """One changefeed, or ``not_found``."""
        found = self.all().get(changefeed_id)
        if found is None:
            raise LifecycleError(f"no changefeed {changefeed_id!r}", code="not_found")
        return found

    def dead_letter_topic(self, changefeed_id: str) -> tuple[dict[str, Any], str]:
        """Where a changefeed's dead letters go: its output cluster's client config, the topic."""
        return self.dead_letters_of(self.get(changefeed_id))

    def dead_letters_of(self, found: Changefeed) -> tuple[dict[str, Any], str]:
        """Where ``found``'s dead letters go: its output cluster's client config, the topic.

        Its config's (``dlq_topic`` or the default) on its output cluster; for one run by
        ``highwater run`` (no config in its spec, if it has one: paused or removed from here),
        the topic its job status names, on this server's cluster.
        """
        if found.spec is not None and found.spec.config:  # (a run's own: a spec without one)
            config = _parsed(found.spec.config, found.spec.base_dir)
            return client_config(config.sink_kafka), config.effective_dlq_topic
        output = None if found.status is None else found.status.output
        named = None if output is None else output.get("dead_letters")
        return dict(self.context.client), named or f"_highwater_dlq_{found.changefeed_id}"

    def dead_letter_counts(self, found: Mapping[str, Changefeed]) -> dict[str, tuple[str, int]]:
        """Each changefeed's dead-letter topic and its records by offsets (one consumer a cluster).

        A changefeed whose config cannot be read, or whose cluster does not answer, is left
        out (not counted: its count is not known).
        """
        wanted: dict[tuple[tuple[str, Any], ...], dict[str, str]] = {}
        for changefeed_id, changefeed in found.items():
            if changefeed.desired == "removed":
                continue
            try:
                client, topic = self.dead_letters_of(changefeed)
            except ConfigError:
                continue
            wanted.setdefault(tuple(sorted(client.items())), {})[changefeed_id] = topic
        counts: dict[str, tuple[str, int]] = {}
        for client_items, topics in wanted.items():
            sizes = dead_letters.sizes(dict(client_items), set(topics.values()))
            counts.update({c: (t, sizes[t]) for c, t in topics.items() if t in sizes})
        return counts

    def _put(self, spec: ChangefeedSpec, status: JobStatus | None = None) -> Changefeed:
        jobs = self._jobs()
        try:
            jobs.ensure()
            SpecStore(jobs).put(spec)
        finally:
            jobs.close()
        return Changefeed(spec.changefeed_id, spec, status)

    def create(self, text: str, base_dir: str) -> Changefeed:
        """A new changefeed from its YAML config (validated first), desired ``running``.

        The config's own cluster must be this one: its jobs topic is where it lives.
        """
        config = parse_spec_config(text, base_dir)
        if config.jobs.topic != self.context.jobs_topic:
            raise LifecycleError(
                f"jobs.topic: the config names {config.jobs.topic!r}, this server's is "
                f"{self.context.jobs_topic!r}",
                code="invalid_argument",
            )
        existing = self.all().get(config.changefeed_id)
        if existing is not None and existing.desired not in {None, "removed"}:
            raise LifecycleError(
                f"changefeed {config.changefeed_id!r} exists ({existing.desired}): update or "
                "remove it first"
            )
        status = None if existing is None else existing.status
        return self._put(ChangefeedSpec(config.changefeed_id, "running", text, base_dir), status)

    def pause(self, changefeed_id: str) -> Changefeed:
        """Ask it to finish its batch, checkpoint and stop; its safepoint stays held."""
        found, spec = self._spec_or_new(changefeed_id)
        if spec.desired == "removed":
            raise LifecycleError(f"changefeed {changefeed_id!r} was removed")
        return self._put(spec.to("paused", reason="paused by an operator"), found.status)

    def resume(self, changefeed_id: str, *, skip_bad_record: bool = False) -> Changefeed:
        """Let a paused changefeed go on from its checkpoint.

        ``skip_bad_record``: the record it paused at (``on_error: pause``) goes to the
        dead-letter topic instead of stopping it again.
        """
        found, spec = self._spec_or_new(changefeed_id)
        if spec.desired != "paused":
            raise LifecycleError(f"changefeed {changefeed_id!r} is {spec.desired}, not paused")
        if skip_bad_record and spec.bad_record is None:
            raise LifecycleError(
                f"changefeed {changefeed_id!r} did not pause at a bad record: nothing to skip",
                code="invalid_argument",
            )
        resumed = spec.to("running", reason=None, skip_bad_record=skip_bad_record)
        return self._put(resumed, found.status)

    def update(
        self, changefeed_id: str, text: str, base_dir: str
    ) -> tuple[Changefeed, ConfigUpdate]:
        """Give a paused changefeed a changed config; it takes effect at ``resume``.

        Tables may be added (each gets its own initial scan then) or dropped, and safe
        options changed; a change its existing output cannot follow (format, envelope, key
        shape, topic names, clusters) is refused naming each option (``update.py``).
        """
        found, spec = self._spec_or_new(changefeed_id)
        if spec.desired != "paused":
            raise LifecycleError(
                f"changefeed {changefeed_id!r} is {spec.desired}: pause it before updating it"
            )
        if not spec.config:
            raise LifecycleError(
                f"changefeed {changefeed_id!r} is run by `highwater run`, not by the server: "
                "change its config file; its next run checks the change the same way"
            )
        new = parse_spec_config(text, base_dir)
        if new.changefeed_id != changefeed_id:
            raise LifecycleError(
                f"changefeed_id: the config names {new.changefeed_id!r}, not {changefeed_id!r}",
                code="invalid_argument",
            )
        old = parse_spec_config(spec.config, spec.base_dir)
        try:
            update = check_update(old.model_dump(mode="json"), new.model_dump(mode="json"))
        except ConfigError as exc:
            raise LifecycleError(
                f"changefeed {changefeed_id!r} cannot take this update: {exc}",
                code="invalid_argument",
            ) from exc
        updated = spec.to("paused", config=text, base_dir=base_dir)
        return self._put(updated, found.status), update

    def remove(self, changefeed_id: str) -> Changefeed:
        """Stop it for good and release its safepoint (its run releases it too, if running)."""
        found, spec = self._spec_or_new(changefeed_id)
        removed = self._put(spec.to("removed", reason="removed by an operator"), found.status)
        registry = self.context.registry()
        try:
            if registry.changefeed_service_id(changefeed_id) in registry.read().safepoints:
                registry.release(changefeed_id)
        finally:
            registry.close()
        return removed

    def _spec_or_new(self, changefeed_id: str) -> tuple[Changefeed, ChangefeedSpec]:
        """It, and its spec or a new one without a config (one ``highwater run`` runs).

        Its run obeys such a spec; the server does not run it.
        """
        found = self.get(changefeed_id)
        return found, found.spec or ChangefeedSpec(changefeed_id, "running")
