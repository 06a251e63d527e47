"""MkDocs hooks (``mkdocs.yml``: ``hooks``): the reference pages' markers, filled at build.

Each ``<!-- reference: NAME -->`` in a page becomes what :data:`RENDERERS` makes for NAME,
once per build; an unknown name, or a renderer that refuses (an undescribed config field, an
error family without a remedy), fails the build.
"""

from __future__ import annotations

import re
from typing import Any

from pipeline.dev.reference import RENDERERS

MARKER = re.compile(r"<!-- reference: ([a-z-]+) -->")
_made: dict[str, str] = {}


class UnknownReference(Exception):
    """A page names a reference no renderer makes."""


def on_pre_build(config: Any) -> None:
    """Each build renders afresh (``mkdocs serve`` rebuilds in one process)."""
    _made.clear()


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """The page with each marker replaced by its generated Markdown."""

    def made(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise UnknownReference(f"{page.file.src_uri}: no reference named {name!r}")
        if name not in _made:
            _made[name] = RENDERERS[name]()
        return _made[name]

    return MARKER.sub(made, markdown)
