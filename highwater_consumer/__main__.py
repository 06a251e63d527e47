"""``python -m highwater_consumer tail|apply …`` (the same commands as ``highwater``'s)."""

import sys

from .cli import main

sys.exit(main())
