"""``python -m strands_tito.engine``."""

import sys

from .cli import engine_main

if __name__ == "__main__":
    sys.exit(engine_main())
