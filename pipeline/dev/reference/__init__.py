"""The docs site's reference pages, generated from the code at every build.

A page of ``docs/reference/`` holds its prose and a marker, ``<!-- reference: NAME -->``;
the MkDocs hook (``hooks.py``, named in ``mkdocs.yml``) puts :data:`RENDERERS`' text for
NAME in its place, so ``mkdocs build`` writes the reference from what it documents and it
cannot drift: the config options from the models (``config``; a field without a description
stops the build) and the CockroachDB names among them (``cockroachdb``), the commands
and flags from the parsers (``cli``), the REST API from the
server's OpenAPI document (``api``), the metrics from where they are declared (``metrics``),
the errors and the config's refusals from the source (``errors``). Nothing here starts Spark
or reaches a network.
"""

from __future__ import annotations

from collections.abc import Callable

from . import api, cli, config, errors, metrics

RENDERERS: dict[str, Callable[[], str]] = {
    "config": config.render,
    "cockroachdb": config.render_cockroachdb,
    "cli": cli.render,
    "api": api.render,
    "metrics": metrics.render,
    "errors": errors.render,
    "config-refusals": errors.render_config_refusals,
}

__all__ = ["RENDERERS"]
