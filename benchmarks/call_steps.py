"""Where one model call's CPU goes, inside the real agent loop: strands-tito at a git ref (A) vs the working tree (B).

    python benchmarks/call_steps.py --ref a08a42d --size 8k --rounds 4

Each worker is a fresh process running a real Strands ``Agent`` (tool ``noop``, ``NullConversationManager``,
``ToolLimiter``) with ``SGLangModel`` against the local engine (its own process), the same workload as
``client_cost.py``. Timers (process CPU, the client-cost worker's ``Probe``) wrap the provider's steps: prompt
(template render and encoding of the new messages), send (request, HTTP exchange, reply checks) and record
(trajectory append, strict tool parse, capture).
Steps are timed where they run, in the loop, because there they run with cold caches (the engine and Strands' own
work run between two calls) and cost several times what a tight-loop micro-benchmark says.

A runs from a ``git archive`` of ``--ref`` put first on ``PYTHONPATH``; B from the working tree. Workers alternate
(A B, then B A, ...) so that a drift in machine load falls on both. Prints one table of medians over every measured
call (turns 1-29 of each episode) with B / A.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: (label, owner path, attribute): what the worker times; owners are resolved in the worker.
STEPS = (
    ("prompt", "model", "_prompt_ids"),
    ("render", "encoder", "render"),
    ("encode", "encoder", "encode"),
    ("send", "model", "_send"),
    ("http", "client", "request_json"),
    ("record", "model", "_record"),
    ("append", "trajectory", "append_turn"),
    ("tool parse", "parser", "parse"),
)


def worker(url: str, tokenizer_dir: str, prompt_file: str, episodes: int, out: str) -> None:
    """Run the episodes in this process and write every call's step times (ms) to ``out``."""
    from transformers import AutoTokenizer

    sys.path.insert(0, str(HERE))
    from _turn_worker import Probe, build_tito, run_episode

    from strands_tito import trajectory as trajectory_module

    # The client-cost worker's model, episode and checks (each trajectory equals what the engine saw), plus timers.
    probe = Probe()
    impl = build_tito(url, AutoTokenizer.from_pretrained(tokenizer_dir), 64, probe, breakdown=False)
    model = impl["model"]
    owners = {
        "model": model,
        "encoder": model._prompts,
        "client": model.client,
        "trajectory": trajectory_module.Trajectory,
        "parser": model.tool_parser,
    }
    for label, owner, name in STEPS:
        probe.timed_attr(owners[owner], name, label)
    probe.wrap_stream(model)
    system = Path(prompt_file).read_text(encoding="utf-8")

    async def run() -> list[dict[str, float]]:
        await run_episode(impl, probe, system, 3)  # warm-up
        measured: list[dict[str, float]] = []
        for _ in range(episodes):
            episode = await run_episode(impl, probe, system, 30)
            for call in episode["calls"][1:]:  # the first call renders and encodes the whole prompt
                parts = call.get("parts", {})
                steps = {label: parts.get(label, 0.0) * 1000 for label, _, _ in STEPS}
                measured.append({"whole call": call["call_cpu"] * 1000, **steps})
        return measured

    Path(out).write_text(json.dumps(asyncio.run(run())), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", default="HEAD", help="git ref measured as A (default: %(default)s)")
    parser.add_argument("--size", default="8k", help="context size, one of client_cost.py's (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=4, help="worker pairs (default: %(default)s)")
    parser.add_argument("--episodes", type=int, default=3, help="measured episodes per worker (default: %(default)s)")
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        url, tokenizer_dir, prompt_file, episodes, out = args.worker
        worker(url, tokenizer_dir, prompt_file, int(episodes), out)
        return
    sys.path.insert(0, str(HERE))
    import _harness as harness

    work = Path(tempfile.mkdtemp(prefix="call_steps-"))
    snapshot = work / "ref"
    snapshot.mkdir()
    # core/ holds the shared modules since the collector became its own distributions; older refs lack it.
    folders = [
        d
        for d in ("core", "src")
        if subprocess.run(["git", "cat-file", "-e", f"{args.ref}:{d}"], cwd=ROOT, capture_output=True).returncode == 0
    ]
    archive = subprocess.run(["git", "archive", args.ref, *folders], capture_output=True, check=True, cwd=ROOT)
    subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive.stdout, check=True)
    tokenizer_dir, prompts, script, _ = harness.prepare(work, [args.size])
    trees = {
        "A": os.pathsep.join(str(snapshot / d) for d in folders),
        "B": os.pathsep.join(str(ROOT / d) for d in ("core", "src")),
    }
    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    load = os.getloadavg()[0]
    for round_ in range(args.rounds):
        for side in ("A", "B") if round_ % 2 == 0 else ("B", "A"):
            env = {
                **os.environ,
                "PYTHONPATH": trees[side],
                "STRANDS_TITO_CAPTURE": "0",
                "TOKENIZERS_PARALLELISM": "false",
            }
            engine = harness.Engine(tokenizer_dir, script, harness.SIZES[args.size] * 2 + 8192, env)
            out = work / f"{side}{round_}.json"
            try:
                command = [sys.executable, __file__, "--worker", engine.start(), str(tokenizer_dir)]
                command += [str(prompts[args.size]), str(args.episodes), str(out)]
                subprocess.run(command, check=True, env=env, capture_output=True)
            finally:
                engine.stop()
            results[side] += json.loads(out.read_text(encoding="utf-8"))
    print(
        f"call_steps at {args.size}: A = {args.ref}, B = working tree; {args.rounds} rounds x {args.episodes} episodes;"
    )
    print(f"load average (1 min) {load:.2f} at start, {os.getloadavg()[0]:.2f} at end; process CPU medians, ms\n")
    print("| step | A | B | B / A |\n|---|---|---|---|")
    for label in ("whole call", *(label for label, _, _ in STEPS)):
        a = statistics.median(c.get(label, 0.0) for c in results["A"])
        b = statistics.median(c.get(label, 0.0) for c in results["B"])
        print(f"| {label} | {a:.3f} | {b:.3f} | {b / a if a else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
