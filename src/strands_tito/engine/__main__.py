"""``python -m strands_tito.engine``."""

import sys

from strands_tito.engine.cli import engine_main

if __name__ == "__main__":
    sys.exit(engine_main())
