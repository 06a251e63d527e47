"""How a Highwater process begins and ends: where it keeps state, and its exit codes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

from schemas.errors import ConfigError, HighwaterError

RETRYABLE = 75  # the exit code of a run that failed in a way a new run may not


def state_dir() -> Path:
    """Where local state lives (``$HIGHWATER_STATE_DIR``, default ``.highwater``).

    ``highwater run`` keeps its scratch files there, and the dev tools their brokers.
    """
    return Path(os.environ.get("HIGHWATER_STATE_DIR", ".highwater"))


def reporting_errors(action: Callable[[], int]) -> int:
    """Run ``action``; our errors become one clear line on stderr and an exit code.

    2 for a config the user must fix, 75 (``EX_TEMPFAIL``) for an error of ours that a new
    run may not meet (:attr:`HighwaterError.retryable`), 1 for any other, 130 for Ctrl-C.
    """
    try:
        return action()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except HighwaterError as exc:
        print(f"highwater: {exc}", file=sys.stderr)
        return RETRYABLE if exc.retryable else 1
    except KeyboardInterrupt:
        return 130
