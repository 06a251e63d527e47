"""The server's ``/metrics``: every running changefeed's series in one scrape, and its own.

Each run serves its own endpoint (``pipeline/core/operators/metrics.py``) and names it in its job
status (``metrics_url``). The server reads the endpoints of the changefeeds whose status says
they run, merges the series family by family (Prometheus' text format wants each family's
lines together, under one ``# TYPE``), and adds:

* ``highwater_changefeeds{desired, state}``: how many changefeeds are in each state;
* ``highwater_changefeed_up{changefeed}``: 1 when its endpoint answered this scrape.
"""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from .changefeeds import Changefeed

LIVE = {"scanning", "running"}  # states in which a run serves its endpoint


def fetch(url: str) -> str:
    """An endpoint's text (2 s at most: one slow run must not stall the scrape)."""
    with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - a status's http URL
        text: str = response.read().decode()
        return text


class _Merged:
    """A collector of already-made metric families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def aggregate(changefeeds: Iterable[Changefeed], read: Callable[[str], str] = fetch) -> bytes:
    """The server's scrape: the live runs' series merged, with the server's own."""
    merged: dict[str, Metric] = {}
    counts: Counter[tuple[str, str]] = Counter()
    up = GaugeMetricFamily(
        "highwater_changefeed_up", "1 when the run's endpoint answered", labels=["changefeed"]
    )
    for found in changefeeds:
        status = found.status
        state = "pending" if status is None else status.state
        counts[found.desired or "-", state] += 1
        if status is None or status.metrics_url is None or state not in LIVE:
            continue
        try:
            families = list(text_string_to_metric_families(read(status.metrics_url)))
        except (OSError, ValueError):  # gone (a status left by a killed run), or not ours
            up.add_metric([found.changefeed_id], 0)
            continue
        up.add_metric([found.changefeed_id], 1)
        for family in families:
            into = merged.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            # only its own series: a port a stale status names may serve another run now
            ours = (s for s in family.samples if s.labels.get("changefeed") == found.changefeed_id)
            into.samples.extend(ours)
    states = GaugeMetricFamily(
        "highwater_changefeeds",
        "Changefeeds by desired state and state",
        labels=["desired", "state"],
    )
    for (desired, state), count in sorted(counts.items()):
        states.add_metric([desired, state], count)
    registry = CollectorRegistry()
    registry.register(_Merged([states, up, *merged.values()]))
    return generate_latest(registry)
