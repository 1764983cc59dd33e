"""Start-up cost of the collector side: importing every collector and exporter entry module in a fresh interpreter.

Prints a table: median import time, peak RSS, modules loaded, and which agent-side packages got loaded (none should).
``--checkout DIR`` measures another checkout of the repository (its core/, src/, collector/ and exporters/ go first on
the path) next to this one, interleaved, so a before/after comparison runs on one machine at one time.

    python benchmarks/collector_startup.py [--runs 7] [--checkout ../old-checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _machine import describe

PROBE = """
import resource, sys, time
t = time.perf_counter()
import strands_tito.collector.cli, strands_tito.exporters
dt = time.perf_counter() - t
agent_side = [m for m in ("strands", "transformers", "tokenizers", "strands_tito.testing.engine") if m in sys.modules]
print(dt * 1000, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, len(sys.modules), ",".join(agent_side))
"""


def measure(checkout: Path | None) -> tuple[float, float, int, str]:
    env = dict(os.environ)
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(checkout / d) for d in ("core", "src", "collector", "exporters"))
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, env=env, cwd=checkout or "/"
    )
    ms, rss, modules, agent_side = [*done.stdout.strip().split(" "), ""][:4]
    return float(ms), float(rss), int(modules), agent_side or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--checkout", type=Path, help="another checkout to compare with (e.g. before a change)")
    args = parser.parse_args()
    targets: dict[str, Path | None] = {"this checkout": None}
    if args.checkout:
        targets[f"checkout {args.checkout}"] = args.checkout.resolve()
    results: dict[str, list[tuple[float, float, int, str]]] = {name: [] for name in targets}
    for _ in range(args.runs):  # interleaved, so both see the same machine load
        for name, checkout in targets.items():
            results[name].append(measure(checkout))
    print(describe())
    print(f"| code | import ms (median of {args.runs}) | peak RSS MiB | modules | agent side loaded |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        ms = statistics.median(r[0] for r in runs)
        rss = statistics.median(r[1] for r in runs)
        print(f"| {name} | {ms:.0f} | {rss:.0f} | {runs[0][2]} | {runs[0][3]} |")


if __name__ == "__main__":
    main()
