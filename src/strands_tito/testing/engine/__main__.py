"""``python -m strands_tito.testing.engine``."""

import sys

from strands_tito.testing.engine.cli import engine_main

if __name__ == "__main__":
    sys.exit(engine_main())
