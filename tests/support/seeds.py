"""The seed of the suite's randomised tests: fixed in ``make test``, new when exploring.

``make test`` draws the same kill points, workloads and choices on every run, so a failure
is one anyone can run again (``HIGHWATER_SEED=<n>`` runs that draw again). ``make explore``
and ``make soak`` draw a new seed each run (``HIGHWATER_HYPOTHESIS=explore``, or a soak's
``HIGHWATER_CONNECT_KILLS`` / ``HIGHWATER_SOAK_KILLS``). Each test prints the seed it used.
What a seed cannot pin is timing: where a kill lands in a running process; the tests assert
that the kills hurt (a redone snapshot, changes sent again, rows replayed), so a draw that
hurt nothing fails instead of passing vacuously.
"""

from __future__ import annotations

import os
import random

SUITE_SEED = 20261128
EXPLORING = os.environ.get("HIGHWATER_HYPOTHESIS") == "explore" or any(
    name in os.environ for name in ("HIGHWATER_CONNECT_KILLS", "HIGHWATER_SOAK_KILLS")
)


def suite_seed() -> int:
    """``HIGHWATER_SEED`` if set; else a new seed when exploring; else the suite's own."""
    given = os.environ.get("HIGHWATER_SEED")
    if given:
        return int(given)
    return random.randrange(2**32) if EXPLORING else SUITE_SEED
