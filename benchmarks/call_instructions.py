"""Per-call client cost, strands-tito vs strands-sglang 0.6.2, counted in CPU instructions (valgrind's callgrind).

    python benchmarks/call_instructions.py                       # 1k, 8k, 32k, 128k, tool32k (~15 min, 2 jobs)
    python benchmarks/call_instructions.py --sizes 8k,tool32k

The same workers, workload and engine as ``client_cost.py`` (its ``_turn_worker.py``, in each package's own
virtualenv), each run once under callgrind, which counts the instructions every thread of the client executes.
On a shared VM a worker's CPU time per call moves 10-40% between processes and between runs, so the CPU-time ratios
of ``client_cost.py`` need many interleaved rounds and still move by more than the margins the targets leave; an
instruction count does not depend on the machine's load, and a repeat of the same worker counts within a fraction
of a percent. Instructions are not time (a cache miss or a system call weighs more than an add), so this
complements ``client_cost.py`` rather than replacing it.

The worker marks the start and the end of every measured model call (``--mark-calls``: a libc ``getloadavg``
call); callgrind writes its counters out and resets them at each mark (``--dump-before``), so every call and every
gap between two calls is counted on its own. Reported as in ``client_cost.py``: the median over turns 1-29 of each
episode (for ``tool32k`` the turn that brings in the long tool result), per model call (``model.stream``) and per
turn (the call plus Strands' work until the next call).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _callgrind as callgrind
import _harness as harness
from _machine import describe

HERE = Path(__file__).resolve().parent


def per_turn(totals: list[int], episodes: int, calls: int) -> tuple[list[int], list[int]]:
    """(call, turn) instruction counts of the measured turns: turns 1 to ``calls - 1`` of every episode.

    Dump 1 is everything before the first measured call; then each call (an even dump) is followed by the gap until
    the next call's start (an odd dump). An episode makes ``calls + 1`` calls: the last only closes the last turn.
    """
    made = episodes * (calls + 1)
    if len(totals) != 2 * made:
        raise RuntimeError(f"expected {2 * made} dumps (2 marks per call), found {len(totals)}")
    call_counts, turn_counts = [], []
    for episode in range(episodes):
        for i in range(1, calls):
            index = episode * (calls + 1) + i  # the call's place among all measured calls
            call = totals[2 * index + 1]
            call_counts.append(call)
            turn_counts.append(call + totals[2 * index + 2])
    return call_counts, turn_counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1k,8k,32k,128k,tool32k", help="from: " + ", ".join(harness.SIZES))
    parser.add_argument("--episodes", type=int, default=1, help="measured episodes per worker (default: %(default)s)")
    parser.add_argument("--calls", type=int, default=30, help="measured model calls per episode (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=2, help="workers at once (counts do not depend on load)")
    parser.add_argument("--tito-tree", choices=("head", "worktree"), default="head")
    parser.add_argument("--peer-venv", default=str(HERE / ".venv-peer"))
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    sizes = args.sizes.split(",")
    begun = time.time()
    # Under callgrind a worker runs about 40x slower: run_worker's timeout is taken from these arguments.
    worker_args = argparse.Namespace(calls=args.calls, worker_timeout=3600.0)
    pythons = {"tito": Path(sys.executable), "peer": harness.ensure_peer_venv(Path(args.peer_venv))}
    with tempfile.TemporaryDirectory(prefix="call_instructions-") as tmp:
        work = Path(tmp)
        tok_dir, prompts, script, _ = harness.prepare(work, sizes)
        tito_env, tree_text = harness.tito_snapshot(work, args.tito_tree)
        envs = {"tito": tito_env, "peer": {**os.environ, "STRANDS_TITO_CAPTURE": "0"}}

        def run(job: tuple[str, str]) -> tuple[str, str, list[int], list[int]]:
            size, impl = job
            engine = harness.Engine(tok_dir, script, harness.ENGINE_CONTEXT, tito_env)
            out_file = work / f"callgrind.{size}.{impl}"
            calls = harness.CASE_CALLS.get(size, args.calls)
            started = time.monotonic()
            try:
                harness.run_worker(
                    pythons[impl],
                    impl,
                    engine.start(),
                    tok_dir,
                    prompts[size],
                    work / f"{size}.{impl}.json",
                    worker_args,
                    0,
                    args.episodes,
                    envs[impl],
                    extra=[*harness.tool_args(work, size), "--mark-calls"],
                    wrapper=callgrind.command(out_file),
                )
            finally:
                engine.stop()
            print(f"[call_instructions] {size} {impl}: {time.monotonic() - started:.0f} s", file=sys.stderr)
            return size, impl, *per_turn(callgrind.dump_totals(out_file), args.episodes, calls)

        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(run, [(size, impl) for size in sizes for impl in harness.IMPLS]))
    by = {(size, impl): (calls, turns) for size, impl, calls, turns in results}
    print(
        f"Machine: {describe()}. Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(begun))}, "
        f"{(time.time() - begun) / 60:.1f} min; valgrind callgrind; strands-tito at {tree_text}, strands-sglang "
        f"{harness.PEER_VERSION}; {args.episodes} measured episode(s) per worker.\n"
    )
    print("Instructions per model call / turn (all threads, millions; median over the measured turns). ")
    print("Ratio = strands-sglang / strands-tito (> 1: strands-tito executes fewer).\n")
    print("| size | turns | tito call | peer call | ratio | tito turn | peer turn | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        (t_call, t_turn), (p_call, p_turn) = by[(size, "tito")], by[(size, "peer")]
        tc, pc = statistics.median(t_call), statistics.median(p_call)
        tt, pt = statistics.median(t_turn), statistics.median(p_turn)
        print(
            f"| {size} | {len(t_call)} | **{tc / 1e6:.2f}** | **{pc / 1e6:.2f}** | {pc / tc:.2f}x "
            f"| {tt / 1e6:.2f} | {pt / 1e6:.2f} | {pt / tt:.2f}x |"
        )


if __name__ == "__main__":
    main()
