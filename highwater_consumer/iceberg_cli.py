"""``highwater iceberg maintain``: a changefeed's Iceberg tables compacted and expired.

    highwater iceberg maintain CHANGEFEED --catalog K=V … [--namespace NS]
        [--keep-last N] [--keep R …] [--keep-newer-than 5d]
        [--target-file-size BYTES] [--orphans-older-than 1d]

Parsing only, outside the ``iceberg`` package: pyiceberg (the ``[iceberg]`` extra) is
imported when the command runs (:mod:`.iceberg.maintenance`), not for ``tail`` or ``apply``.
"""

from __future__ import annotations

import argparse
from typing import Any

from schemas.hlc import Hlc


def add_command(commands: Any) -> None:
    """Add ``iceberg maintain`` to a command tree."""
    iceberg = commands.add_parser("iceberg", help="maintain a changefeed's Iceberg tables")
    verbs = iceberg.add_subparsers(dest="iceberg_command", required=True)
    maintain = verbs.add_parser(
        "maintain",
        help="compact small files, expire snapshots but the cuts kept, remove orphan files",
    )
    maintain.add_argument("changefeed", help="the changefeed id")
    maintain.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a pyiceberg catalog property (repeat it); none: the embedded SQLite catalog",
    )
    maintain.add_argument("--namespace", help="the namespace of the tables (highwater)")
    maintain.add_argument(
        "--keep-last", type=int, default=1, metavar="N", help="keep the latest N cuts (1)"
    )
    maintain.add_argument(
        "--keep", action="append", default=[], type=Hlc.parse, metavar="R", help="keep cut R"
    )
    maintain.add_argument(
        "--keep-newer-than",
        default="5d",
        metavar="DURATION",
        help="keep the cuts whose R is within this of now (5d; 0 for none by age)",
    )
    maintain.add_argument(
        "--target-file-size", type=int, metavar="BYTES", help="of compacted files (128 MiB)"
    )
    maintain.add_argument(
        "--orphans-older-than",
        default="1d",
        metavar="DURATION",
        help="remove orphan files older than this (1d): longer than any commit takes",
    )
    maintain.set_defaults(handler=_maintain)


def _maintain(args: argparse.Namespace) -> int:
    from .iceberg.applier import NAMESPACE  # noqa: PLC0415 - the [iceberg] extra
    from .iceberg.catalog import parse_pairs  # noqa: PLC0415
    from .iceberg.maintenance import TARGET_FILE_SIZE, Keep, duration, maintain  # noqa: PLC0415

    newer = duration(args.keep_newer_than)
    keep = Keep(args.keep_last, frozenset(args.keep), newer if newer else None)
    reports = maintain(
        parse_pairs(args.catalog),
        args.changefeed,
        namespace=args.namespace or NAMESPACE,
        keep=keep,
        target_file_size=args.target_file_size or TARGET_FILE_SIZE,
        orphans_older_than=duration(args.orphans_older_than),
    )
    for report in reports:
        print(report, flush=True)
    return 0
