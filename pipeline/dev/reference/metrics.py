"""The metrics reference, from where the metrics are declared.

A run's series are declared by :class:`~pipeline.core.operators.metrics.ChangefeedMetrics`
into a registry of its own; made here (nothing served, no Spark), its registry lists every
family with its type and help. The server's own two families come from
:func:`~pipeline.control.metrics.aggregate` over one stand-in changefeed. Label names are read from
the collectors (``_labelnames``, prometheus_client's own record of them), since a family
without a child yet has no sample to show them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from pipeline.control.metrics import aggregate
from pipeline.core.operators.metrics import ChangefeedMetrics

SUFFIX = {"counter": "_total"}  # the name a counter's samples are exposed under


@dataclass(frozen=True)
class Family:
    """One metric family as a scrape shows it."""

    name: str
    kind: str
    labels: tuple[str, ...]
    help: str
    source: str


def families() -> Iterator[Family]:
    """A run's families, then the server's own."""
    run = ChangefeedMetrics("docs")
    for family in run.registry.collect():
        yield _family(family, _labels(run.registry, family), "run")
    # one live changefeed whose endpoint answers with nothing: each family gets a sample
    live = SimpleNamespace(
        changefeed_id="docs",
        desired="running",
        status=SimpleNamespace(state="running", metrics_url="http://docs.invalid/metrics"),
    )
    scrape = aggregate([live], read=lambda _url: "")  # type: ignore[list-item]
    for family in text_string_to_metric_families(scrape.decode()):
        labels = dict.fromkeys(label for s in family.samples for label in s.labels)
        yield _family(family, tuple(labels), "server")


def _family(family: Metric, labels: tuple[str, ...], source: str) -> Family:
    name = family.name + SUFFIX.get(family.type, "")
    return Family(name, family.type, labels, family.documentation, source)


def _labels(registry: CollectorRegistry, family: Metric) -> tuple[str, ...]:
    collector = registry._names_to_collectors[family.name]
    names: tuple[str, ...] = tuple(getattr(collector, "_labelnames", ()))
    if family.type == "stateset":
        names = (*names, family.name)  # the state is a label named as the family
    return names


def render() -> str:
    """Every metric with its type, labels and help, in Markdown."""
    out: list[str] = []
    for source, title in (("run", "A run's `/metrics`"), ("server", "The server's own")):
        out += [
            f"### {title}",
            "",
            "| metric | type | labels | help |",
            "| --- | --- | --- | --- |",
        ]
        for family in families():
            if family.source == source:
                labels = ", ".join(f"`{label}`" for label in family.labels)
                out.append(f"| `{family.name}` | {family.kind} | {labels} | {family.help} |")
        out.append("")
    return "\n".join(out)
