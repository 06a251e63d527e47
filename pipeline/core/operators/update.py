"""What a changed config may change of an existing changefeed (pure).

A changefeed's config can change while it is paused (``highwater changefeed update``) or
between two runs of ``highwater run``. :func:`check_update` compares the config as it stood
with the new one, both as JSON (``model_dump(mode="json")``, or the ``shape`` a checkpoint
record keeps), and says what the change is, or refuses it naming every option it refuses:

* **tables** may be added (each gets its own initial scan at the time the changefeed next
  starts, unless ``initial_scan`` is ``no``; the other tables go on without one) or dropped
  (its output topic keeps what it has, and gets no more markers); a table kept must stay
  as it was (its table, format, key), but its columns may evolve (``table_schema``);
* **safe options** (:data:`SAFE`) may change: cadence, rate limits, error handling,
  metrics, Spark, credentials, the partitions of topics yet to be created;
* a **cluster's address** (:data:`CLUSTERS`) may change while it stays the same cluster (a
  DNS move, a new listener, brokers replaced): the shape a checkpoint keeps records the id
  each cluster answered with (:func:`identified`), and a run refuses an address that answers
  as another cluster, since the checkpoint's offsets and the output belong to the first;
  a config alone has no ids (``changefeed update``), so there the run decides;
* anything else is refused with its reason (:data:`REFUSED`): what shapes the messages on
  the existing output topics (format, envelope, key and value fields, a CDC query), the
  topics' names, where the changefeed's own records live, and the start options of a
  changefeed that has started.

An option not named in either list is refused: a new option is safe only once it is listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.errors import ConfigError

# What may change of a table the changefeed keeps: its columns (schema evolution; an Avro
# output registers a new version, and the registry's compatibility rule refuses what its
# consumers could not read).
EVOLVING = frozenset({"table_schema"})
# Options (dotted paths, and what is under them) that may change.
SAFE = (
    "resolved",
    "checkpoint.min_checkpoint_frequency",
    "checkpoint.frontier_highwater_lag_checkpoint_threshold",
    "checkpoint.frontier_checkpoint_max_bytes",
    "checkpoint.replication_factor",
    "initial_scan.rate_limit",
    "end_time",
    "on_error",
    "dlq_topic",
    "oversized_rows",
    "claim_store",
    "schema_change_policy",
    "metrics",
    "spark",
    "safepoints.enabled",
    "safepoints.gc_ttl",
    "kafka.options",
    "sink.kafka.options",
    "sink.partitions",
    "sink.replication_factor",
    "sink.producer",
    "sink.kafka_sink_config",
)

_SHAPE = (
    "shapes every message on the existing output topics (format, envelope, key and value "
    "fields, the CDC query): their consumers would get another shape mid-stream; create "
    "a new changefeed for it"
)
# The clusters whose address may change, and what belongs to each: by the section holding
# its ``bootstrap_servers`` (a run records its ``cluster_id`` there).
CLUSTERS = {
    "kafka": "the checkpoint's offsets belong to the source cluster",
    "sink.kafka": "the output topics and their checkpoint live on the sink cluster",
}
_OWN = "holds this changefeed's own records (checkpoint, status and spec, safepoint)"
_START = "says where a new changefeed starts, and this one has started"
# Options that may not change, by dotted path (the longest prefix decides), and why.
REFUSED = {
    "changefeed_id": "names the changefeed being updated",
    "encoder": _SHAPE,
    "sink.topic_prefix": "names the existing tables' output topics",
    "sink.topic_name": "names the existing tables' output topics",
    "kafka": CLUSTERS["kafka"] + " it names",
    "sink.kafka": CLUSTERS["sink.kafka"] + " it names",
    "checkpoint.topic": _OWN,
    "jobs.topic": _OWN,
    "safepoints.topic": _OWN,
    "safepoints.cluster": _OWN,
    "initial_scan": _START,
    "cursor": _START,
}
_OTHER = "cannot change for an existing changefeed"
_SAFE_RULES = dict.fromkeys(SAFE, "")
_ADDRESSES = {f"{s}.{o}" for s in CLUSTERS for o in ("bootstrap_servers", "cluster_id")}


@dataclass(frozen=True)
class ConfigUpdate:
    """An accepted change: source topics added and dropped, safe options changed."""

    added: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    options: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.dropped or self.options)

    def describe(self) -> str:
        """``added table topics a, b; dropped c; changed resolved.interval`` (or ``no change``)."""
        parts = []
        if self.added:
            parts.append("added source topics " + ", ".join(self.added))
        if self.dropped:
            parts.append("dropped source topics " + ", ".join(self.dropped))
        if self.options:
            parts.append("changed " + ", ".join(self.options))
        return "; ".join(parts) or "no change"


def check_update(before: Mapping[str, Any], after: Mapping[str, Any]) -> ConfigUpdate:
    """The change from ``before`` to ``after``; :class:`ConfigError` naming what is refused."""
    problems: list[tuple[str, str]] = []
    added, dropped = _tables(before.get("sources") or [], after.get("sources") or [], problems)
    changed = sorted(_changed(before, after, ignore={"sources"}))
    options = _moves(before, after, changed, problems)
    for path in changed:
        if path in _ADDRESSES:  # judged by _moves
            continue
        safe, refused = _rule(path, _SAFE_RULES), _rule(path, REFUSED)
        if safe is not None and (refused is None or len(safe[0]) > len(refused[0])):
            options.append(path)
        else:
            problems.append((path, _OTHER if refused is None else refused[1]))
    if problems:
        raise ConfigError(problems)
    return ConfigUpdate(tuple(added), tuple(dropped), tuple(sorted(options)))


def identified(shape: Mapping[str, Any], clusters: Mapping[str, str | None]) -> dict[str, Any]:
    """``shape`` with each cluster's id (by :data:`CLUSTERS` section) beside its address."""
    out: dict[str, Any] = json.loads(json.dumps(shape))  # a deep copy of plain JSON
    for section, found in clusters.items():
        kafka = _at(out, section)
        if kafka is not None:
            kafka["cluster_id"] = found
    return out


def _moves(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    changed: list[str],
    problems: list[tuple[str, str]],
) -> list[str]:
    """The cluster addresses that changed and may (a refusal names the address's key)."""
    moved = []
    for section in CLUSTERS:
        address = f"{section}.bootstrap_servers"
        if address not in changed and f"{section}.cluster_id" not in changed:
            continue
        refusal = _moved(section, _at(before, section) or {}, _at(after, section) or {})
        if refusal:
            problems.append((address, refusal))
        elif address in changed:  # (an id recorded for the first time changes no option)
            moved.append(address)
    return moved


def _moved(section: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    """Why the cluster at ``section`` may not move from ``before`` to ``after`` ("" if it may).

    Both sides with an id: the same id or a refusal naming both. Neither (two configs): the
    run compares. Only the new side (a checkpoint from before ids were recorded): the address
    must stay until a run has recorded the id.
    """
    old, new = before.get("cluster_id"), after.get("cluster_id")
    if old is not None and new is not None and old != new:
        return (
            f"{CLUSTERS[section]} it names, cluster {old!r}; "
            f"{after.get('bootstrap_servers')} answers as cluster {new!r}"
        )
    if (
        old is None
        and new is not None
        and before.get("bootstrap_servers") != after.get("bootstrap_servers")
    ):
        return (
            f"{CLUSTERS[section]} it names, and the checkpoint does not record that "
            "cluster's id (written by an older release): run once at the old address first"
        )
    return ""


def _at(tree: Any, dotted: str) -> Any:
    """The mapping at a dotted path (None where there is none)."""
    for key in dotted.split("."):
        tree = tree.get(key) if isinstance(tree, Mapping) else None
    return tree if isinstance(tree, Mapping) else None


def _tables(
    before: list[Mapping[str, Any]],
    after: list[Mapping[str, Any]],
    problems: list[tuple[str, str]],
) -> tuple[list[str], list[str]]:
    """Source topics added and dropped; a kept one that changed is a problem per option."""
    old = {source["topic"]: source for source in before}
    new = {source["topic"]: (i, source) for i, source in enumerate(after)}
    for topic, (i, source) in new.items():
        if topic not in old:
            continue
        for key in sorted(set(source) | set(old[topic])):
            if key in EVOLVING:
                continue
            if source.get(key) != old[topic].get(key):
                problems.append(
                    (
                        f"sources[{i}].{key}",
                        f"cannot change for source topic {topic!r}, already in the changefeed "
                        "(drop the table in one update and add it back in another: it gets "
                        "a new initial scan)",
                    )
                )
    return [t for t in new if t not in old], [t for t in old if t not in new]


def _changed(before: Any, after: Any, *, ignore: set[str], path: str = "") -> set[str]:
    """Dotted paths whose values differ (a key one side lacks counts as null there)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out: set[str] = set()
        for key in set(before) | set(after):
            if key in ignore and not path:
                continue
            sub = f"{path}.{key}" if path else str(key)
            out |= _changed(before.get(key), after.get(key), ignore=ignore, path=sub)
        return out
    return set() if before == after else {path}


def _rule(path: str, rules: Mapping[str, str]) -> tuple[str, str] | None:
    """The longest rule that is ``path`` or a dotted prefix of it."""
    found = [p for p in rules if path == p or path.startswith(p + ".")]
    if not found:
        return None
    best = max(found, key=len)
    return best, rules[best]
