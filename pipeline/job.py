"""The ``spark-submit`` entry point of a changefeed.

    spark-submit --master local[2] --jars <connector jars> pipeline/job.py --config cf.yaml

``highwater run --config cf.yaml`` builds exactly that command. Everything here runs on the
Spark driver.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # spark-submit puts this file's folder first on sys.path, where a module of ours could
    # shadow a library; the checkout root goes at the end so an uninstalled checkout works.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    sys.path.append(os.path.dirname(_HERE))


def main(argv: list[str] | None = None) -> int:
    """Load the config, build the session, run the changefeed; the exit code says how it went."""
    import argparse  # noqa: PLC0415
    import logging  # noqa: PLC0415
    import signal  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from pipeline.config import load_config  # noqa: PLC0415
    from pipeline.core.coordinator import changefeed  # noqa: PLC0415
    from pipeline.runtime.process import reporting_errors  # noqa: PLC0415
    from pipeline.runtime.session import build_session  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="pipeline/job.py")
    parser.add_argument("--config", required=True, help="the changefeed's YAML config")
    parser.add_argument("--base-dir", help="where its relative paths start (the file's folder)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = changefeed.StopRequest(
        Path(os.environ["HIGHWATER_STOP_FILE"]) if os.environ.get("HIGHWATER_STOP_FILE") else None
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    def run() -> int:
        config = load_config(args.config, args.base_dir)
        spark = build_session(config.spark, f"highwater-{config.changefeed_id}")
        changefeed.run(config, spark, stop)
        return 0

    return reporting_errors(run)


if __name__ == "__main__":
    sys.exit(main())
