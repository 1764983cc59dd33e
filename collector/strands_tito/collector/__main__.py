"""``python -m strands_tito.collector``: the collector, with the same options as ``strands-tito-collector``."""

import sys

from strands_tito.collector.cli import collect_main

if __name__ == "__main__":
    sys.exit(collect_main(sys.argv[1:], "python -m strands_tito.collector"))
