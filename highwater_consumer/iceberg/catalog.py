"""The Iceberg catalog an applier or a reader uses: pyiceberg's, from its properties.

Any catalog pyiceberg reaches is named by pyiceberg's own properties (``type=rest``,
``uri=…``, credentials, ``warehouse=…``), as ``--catalog KEY=VALUE`` gives them. Given neither
``type`` nor ``uri``, the **embedded** catalog: pyiceberg's SQL catalog on a SQLite file in
the warehouse folder (``warehouse=PATH``, default :data:`EMBEDDED_WAREHOUSE`), data files
beside it, nothing to run and nothing to install but the ``[iceberg]`` extra.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..decoding import ApplyError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

EMBEDDED_WAREHOUSE = ".highwater/iceberg"  # relative to the working directory
CATALOG_NAME = "highwater"  # pyiceberg's name of the catalog (``name=…`` sets another)


def embedded(warehouse: str | Path = EMBEDDED_WAREHOUSE) -> dict[str, str]:
    """The embedded catalog's properties: SQLite and data files in the folder ``warehouse``."""
    text = str(warehouse)
    folder = Path(text.removeprefix("file://")).resolve()
    return {
        "type": "sql",
        "uri": f"sqlite:///{folder / 'catalog.db'}",
        "warehouse": folder.as_uri(),
    }


def properties_of(given: Mapping[str, str]) -> dict[str, str]:
    """The properties pyiceberg is given: ``given``, or the embedded catalog's with them."""
    found = dict(given)
    if "type" in found or "uri" in found:
        return found
    return {**found, **embedded(found.get("warehouse", EMBEDDED_WAREHOUSE))}


# The catalog properties that say which catalog it is (not how it is reached: credentials)
IDENTITY = ("type", "uri", "warehouse", "name", "prefix")


def default_group(changefeed: str, given: Mapping[str, str], namespace: str) -> str:
    """The consumer group of an applier to one Iceberg target (``--group`` names another).

    One group per target: the group's committed offsets are where a restarted applier reads
    on, so two targets sharing one (a PostgreSQL applier's ``highwater-apply-<changefeed>``,
    another catalog or namespace) would split the partitions between them, or start a new
    target after windows it never had. The target is where its catalog is (the properties
    :data:`IDENTITY` names, as pyiceberg is given them) and the namespace, hashed: a rotated
    token or key is the same target, whose group reads on where it was.
    """
    properties = properties_of(given)
    where = {key: properties[key] for key in IDENTITY if key in properties}
    target = json.dumps([where, namespace], sort_keys=True)
    digest = hashlib.sha256(target.encode()).hexdigest()[:12]
    return f"highwater-apply-iceberg-{changefeed}-{digest}"


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` texts as properties (a pair without ``=`` is refused by name)."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ApplyError(f"--catalog {pair!r}: a catalog property is KEY=VALUE")
        out[key] = value
    return out


def load(given: Catalog | Mapping[str, str]) -> Catalog:
    """The catalog ``given`` (one already made, or its properties: :func:`properties_of`).

    The embedded catalog's folder is made when missing.
    """
    if not isinstance(given, Mapping):
        return given
    from pyiceberg.catalog import load_catalog  # noqa: PLC0415 - the [iceberg] extra's

    properties = properties_of(given)
    if properties.get("uri", "").startswith("sqlite:///"):
        Path(properties["uri"].removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    name = properties.pop("name", CATALOG_NAME)
    try:
        return load_catalog(name, **properties)
    except Exception as exc:  # pyiceberg's errors are many: the catalog cannot be reached
        keys = ", ".join(sorted(properties))
        raise ApplyError(
            f"the Iceberg catalog (properties {keys}) cannot be loaded: {exc}"
        ) from exc
