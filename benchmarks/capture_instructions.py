"""Capture's overhead on a real agent run, counted in CPU instructions: a measure machine noise does not move.

    python benchmarks/capture_instructions.py [--sizes 32768] [--settings untraced,capture/own] [--jobs 2]

``capture_cost.py`` part 3 times the same workers in CPU seconds. On a shared VM one worker's CPU per call moves by
10-20% from process to process, more than the +10% capture may cost, so a CPU-time comparison needs many interleaved
pairs and still ends near the target with no margin. Here each setting's worker (the same code, settings and
episodes) runs once under valgrind's callgrind, which counts the instructions every thread executes: the count does
not depend on the machine's load, and a repeat of the same worker gives nearly the same count.

The worker marks its measured window (``_callgrind.MARK``); callgrind writes its counters out and resets them at
each mark (``--dump-before``), so the instructions of the measured model calls are counted apart from start-up, the
warm-up episode and each episode's first call (which tokenizes the whole prompt, the same work in every setting):
the same calls ``capture_cost.py`` divides by. Instructions are not time (cache misses and system calls weigh
differently), so this complements the CPU-time table rather than replacing it.

Under callgrind a worker runs ~40x slower, so time-driven work would happen more often per call than natively: the
span processors' export schedule (``OTEL_BSP_SCHEDULE_DELAY``, 5 s natively) is stretched by the same factor.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _callgrind as callgrind
import capture_cost
from _machine import describe

SLOWDOWN = 40  # about how much slower a worker runs under callgrind
SCHEDULE_DELAY_MS = 5000 * SLOWDOWN


def window_instructions(out_file: Path, episodes: int) -> tuple[int, int]:
    """(instructions of the measured calls after each episode's first, of the first calls) from callgrind's dumps.

    Dump 1 is start-up and warm-up; then, per episode, the part before its first call (for episode 1 the part after
    the window's first mark), and the first call; the last numbered dump ends at the window's closing mark.
    """
    totals = callgrind.dump_totals(out_file)
    marks = 2 * episodes + 2
    if len(totals) != marks:
        raise RuntimeError(f"expected {marks} callgrind dumps, found {len(totals)}")
    rest = sum(totals[1::2])  # dumps 2, 4, ..., marks
    first = sum(totals[2:-1:2])  # dumps 3, 5, ..., marks - 1
    return rest, first


def run_worker(
    label: str, extra: dict[str, str], tokens: int, calls: int, script: Path, sink: str, environment: Any, work: Path
) -> dict[str, Any]:
    engine = capture_cost.qwen3_engine(script)
    url = engine.start()
    out_file = work / f"callgrind.{label.replace('/', '_')}.{tokens}"
    command = [
        *callgrind.command(out_file),
        sys.executable,
        capture_cost.__file__,
        "--worker",
        url,
        sink,
        str(tokens),
        str(calls),
    ]
    env = {**environment(extra), "OTEL_BSP_SCHEDULE_DELAY": str(SCHEDULE_DELAY_MS)}
    started = time.monotonic()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    finally:
        engine.stop()
    if done.returncode != 0:
        raise RuntimeError(f"worker {label} failed: {done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    rest, first = window_instructions(out_file, capture_cost.EPISODES)
    measured_calls = result["calls"] - capture_cost.EPISODES
    print(f"[capture_instructions] {tokens} tokens, {label}: {time.monotonic() - started:.0f} s", file=sys.stderr)
    return {
        "label": label,
        "tokens": tokens,
        "instructions_per_call": rest / measured_calls,
        "first_call_instructions": first / capture_cost.EPISODES,
        "calls": measured_calls,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="32768", help="context sizes, comma-separated tokens (default: %(default)s)")
    parser.add_argument(
        "--settings",
        default="untraced,capture/own",
        help="capture_cost.py settings by label, comma-separated; the first is the baseline (default: %(default)s)",
    )
    parser.add_argument("--calls", type=int, default=20, help="model calls per episode (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="workers at once (counts do not depend on load)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    known = dict(capture_cost.SETTINGS + capture_cost.CANDIDATES + capture_cost.REFERENCES)
    # LABEL@REF: the setting with strands-tito at a git ref (capture_cost.py's), for before/after in one run.
    settings = [
        (label, {**known[base], **({"BENCH_REF": ref} if ref else {})})
        for label in args.settings.split(",")
        for base, _, ref in [label.partition("@")]
    ]
    sizes = [int(x) for x in args.sizes.split(",")]
    begun = time.time()
    with tempfile.TemporaryDirectory(prefix="capture_instructions-") as tmp, capture_cost.part3_services() as services:
        script, sink_base, environment = services
        sink = f"{sink_base}/v1/traces"

        def run(job: tuple[str, dict[str, str], int]) -> dict[str, Any]:
            label, extra, tokens = job
            return run_worker(label, extra, tokens, args.calls, script, sink, environment, Path(tmp))

        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(run, [(label, extra, n) for n in sizes for label, extra in settings]))
    print(
        f"Machine: {describe()}. Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(begun))}, "
        f"{(time.time() - begun) / 60:.1f} min; valgrind callgrind, {capture_cost.EPISODES} measured episodes of "
        f"{args.calls} model calls per setting, all threads.\n"
    )
    print("| context tokens | setting | instructions per call (M) | vs " + settings[0][0] + " | first call (M) |")
    print("|---|---|---|---|---|")
    for n in sizes:
        rows = [r for r in results if r["tokens"] == n]
        base = rows[0]["instructions_per_call"]
        for r in rows:
            per_call = r["instructions_per_call"]
            print(
                f"| {n:,} | {r['label']} | **{per_call / 1e6:.2f}** | {100 * (per_call - base) / base:+.1f}% "
                f"| {r['first_call_instructions'] / 1e6:.1f} |"
            )


if __name__ == "__main__":
    main()
