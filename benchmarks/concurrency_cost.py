"""Many agents at once: client CPU per model call of strands-tito and strands-sglang 0.6.2, above Strands' own floor.

RL rollouts run many agents in one process, mostly at short and medium contexts. For each context size and number of
agents, each of these runs in its own fresh process (``_agents_worker.py``), in lockstep rounds (the order rotates
each round), against a fresh local engine in its own process:

- ``floor``: a minimal Strands ``Model`` yielding the same events with no HTTP and no tokenizer: Strands' own cost;
- ``tito``: strands-tito's ``SGLangModel``; ``capture``: the same with trace capture on (``--capture-agents``);
- ``peer``: strands-sglang 0.6.2's ``SGLangModel`` (in ``benchmarks/.venv-peer``).

Each agent has its own model, all share one client, 8 tool-loop calls per agent plus the one its limiter stops; waves
repeat until at least 72 calls. Reported: process CPU (all threads) per model call, the provider's own CPU above the
floor (its call cost minus the floor's of the same round), their ratio, calls per CPU-second, peak RSS per agent, and
whether both packages produced token-identical trajectories.

    python benchmarks/concurrency_cost.py                         # 1, 16, 64, 256 agents; 1k and 8k; 3 rounds
    python benchmarks/concurrency_cost.py --agents 64 --sizes 1k --rounds 2 --capture-agents 64
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from _harness import ENGINE_CONTEXT, HERE, Engine, ensure_peer_venv, log, prepare, tito_snapshot

WORKER = HERE / "_agents_worker.py"
NAMES = {
    "floor": "Strands floor",
    "tito": "strands-tito",
    "capture": "strands-tito + capture",
    "peer": "strands-sglang",
}


class _Sink(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def otlp_sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint on 127.0.0.1 that acknowledges everything (in this process, not the worker's)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def run_worker(python: Path, impl: str, args: argparse.Namespace, extra: list[str], env: dict[str, str]) -> Any:
    out = Path(tempfile.mktemp(prefix=f"agents-{impl}-", suffix=".json", dir=args.workdir))
    command = [str(python), str(WORKER), "--impl", impl, "--out", str(out), "--calls", str(args.calls), *extra]
    env = {**env, "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=args.worker_timeout)
    if done.returncode != 0:
        raise RuntimeError(f"worker {impl} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def ms_per_call(run: dict[str, Any]) -> float:
    return 1000 * run["cpu"] / run["calls"]


def summarize(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per implementation: pooled ms per call, per-round values, above-floor values per round, RSS per agent."""
    out: dict[str, Any] = {}
    floor_rounds = [ms_per_call(r) for r in runs.get("floor", [])]
    for impl, rounds in runs.items():
        per_round = [ms_per_call(r) for r in rounds]
        pooled = 1000 * sum(r["cpu"] for r in rounds) / sum(r["calls"] for r in rounds)
        above = [v - f for v, f in zip(per_round, floor_rounds, strict=False)] if impl != "floor" else []
        rss = [(r["peak_kib"] - r["rss_before_kib"]) / r["agents"] / 1024 for r in rounds]
        out[impl] = {
            "ms": pooled,
            "rounds": per_round,
            "above_rounds": above,
            "above": statistics.median(above) if above else 0.0,
            "calls": sum(r["calls"] for r in rounds),
            "calls_per_cpu_s": 1000 / pooled,
            "rss_mib_per_agent": statistics.median(rss),
            "digests": rounds[0]["digests"],
            "same_digests_across_rounds": all(r["digests"] == rounds[0]["digests"] for r in rounds),
        }
    return out


def table(results: dict[tuple[str, int], dict[str, Any]]) -> str:
    lines = [
        "| context | agents | calls per impl | floor ms/call | tito ms/call | peer ms/call | tito above floor | peer "
        "above floor | above-floor ratio (peer / tito), per round | whole-call ratio | peak RSS MiB per agent tito / "
        "peer / floor | same trajectories |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (size, agents), s in results.items():
        f, t, p = s["floor"], s["tito"], s["peer"]
        pair = [
            pp / tt if tt > 0 else float("inf") for tt, pp in zip(t["above_rounds"], p["above_rounds"], strict=True)
        ]
        same = t["digests"] == p["digests"] and t["same_digests_across_rounds"] and p["same_digests_across_rounds"]
        lines.append(
            f"| {size} | {agents} | {t['calls']:,} | {f['ms']:.2f} | {t['ms']:.2f} | {p['ms']:.2f} | "
            f"**{t['above']:.2f}** | **{p['above']:.2f}** | **{statistics.median(pair):.2f}x** "
            f"({', '.join(f'{x:.2f}' for x in pair)}) | {p['ms'] / t['ms']:.2f}x | "
            f"{t['rss_mib_per_agent']:.2f} / {p['rss_mib_per_agent']:.2f} / {f['rss_mib_per_agent']:.2f} | "
            f"{'yes' if same else 'NO'} |"
        )
    return "\n".join(lines)


def capture_table(results: dict[tuple[str, int], dict[str, Any]]) -> str:
    rows = [(k, s) for k, s in results.items() if "capture" in s]
    if not rows:
        return ""
    lines = [
        "| context | agents | untraced ms/call (per round) | capture ms/call (per round) | capture / untraced, per "
        "round | median |",
        "|---|---|---|---|---|---|",
    ]
    for (size, agents), s in rows:
        t, c = s["tito"], s["capture"]
        pair = [cc / tt for tt, cc in zip(t["rounds"], c["rounds"], strict=False)]
        lines.append(
            f"| {size} | {agents} | {t['ms']:.2f} ({', '.join(f'{x:.2f}' for x in t['rounds'])}) | {c['ms']:.2f} "
            f"({', '.join(f'{x:.2f}' for x in c['rounds'])}) | {', '.join(f'{x - 1:+.1%}' for x in pair)} | "
            f"**{statistics.median(pair) - 1:+.1%}** |"
        )
    return "\n".join(lines)


def table_from_dir(directory: Path) -> str:
    """The tables of the worker results in ``directory`` (rounds in the order the workers wrote them)."""
    runs: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {}
    for path in sorted(directory.glob("agents-*.json"), key=lambda p: p.stat().st_mtime):
        run = json.loads(path.read_text(encoding="utf-8"))
        size = run["prompt_file"].removeprefix("system_").removesuffix(".txt")
        runs.setdefault((size, run["agents"]), {}).setdefault(run["impl"], []).append(run)
    complete = {k: v for k, v in runs.items() if {"floor", "tito", "peer"} <= set(v)}
    for group in complete.values():  # whole rounds only: each implementation as many runs as the floor
        rounds = min(len(v) for k, v in group.items() if k != "capture")
        for impl in list(group):
            group[impl] = group[impl][:rounds]
    results = {key: summarize(value) for key, value in sorted(complete.items(), key=lambda kv: (kv[0][0], kv[0][1]))}
    return "\n\n".join(x for x in (table(results), capture_table(results)) if x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1k,8k", help="context sizes (from 1k, 8k, 32k)")
    parser.add_argument("--agents", default="1,16,64,256", help="numbers of agents at once")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=8, help="tool-loop calls per agent (plus the one that ends it)")
    parser.add_argument("--min-calls", type=int, default=72, help="waves of agents repeat up to this many calls")
    parser.add_argument("--capture-agents", default="", help="agent counts that also run with capture on (e.g. 64)")
    parser.add_argument("--tito-tree", choices=("head", "worktree"), default="head")
    parser.add_argument("--peer-venv", default=str(HERE / ".venv-peer"))
    parser.add_argument("--worker-timeout", type=float, default=900.0)
    parser.add_argument("--json", metavar="FILE.json", help="also dump the summaries as JSON")
    parser.add_argument(
        "--from-dir",
        metavar="DIR",
        help="only summarize the worker results a run left in DIR (a run stopped before its end keeps them there)",
    )
    args = parser.parse_args(argv)
    if args.from_dir:
        print(table_from_dir(Path(args.from_dir)))
        return 0
    sizes = [s for s in args.sizes.split(",") if s]
    agent_counts = [int(a) for a in args.agents.split(",") if a]
    capture_counts = {int(a) for a in args.capture_agents.split(",") if a}
    load_start = os.getloadavg()
    started = time.monotonic()
    pythons = {"tito": Path(sys.executable), "capture": Path(sys.executable), "floor": Path(sys.executable)}
    pythons["peer"] = ensure_peer_venv(Path(args.peer_venv))
    runs: dict[tuple[str, int], dict[str, list[dict[str, Any]]]] = {}
    loads: list[float] = [load_start[0]]
    with tempfile.TemporaryDirectory(prefix="concurrency_cost-") as tmp, otlp_sink() as sink:
        args.workdir = tmp
        workdir = Path(tmp)
        tok_dir, prompts, script, _ = prepare(workdir, sizes)
        tito_env, tree_text = tito_snapshot(workdir, args.tito_tree)
        clean = {k: v for k, v in tito_env.items() if not k.startswith(("OTEL_", "STRANDS_TITO_"))}
        spool = tempfile.mkdtemp(prefix="spool-", dir=tmp)
        envs = {
            "floor": tito_env,
            "tito": tito_env,
            "peer": {**os.environ, "STRANDS_TITO_CAPTURE": "0"},
            "capture": {
                **clean,
                "STRANDS_TITO_CAPTURE": "1",
                "OTEL_EXPORTER_OTLP_ENDPOINT": sink,
                "STRANDS_TITO_SPOOL_DIR": spool,
            },
        }
        engine = Engine(tok_dir, script, ENGINE_CONTEXT, tito_env)
        for round_index in range(args.rounds):
            for size in sizes:
                for agents in agent_counts:
                    impls = ["floor", "tito", "peer", *(["capture"] if agents in capture_counts else [])]
                    shift = round_index % len(impls)
                    # One fresh engine per group: its state then differs between the workers of a group only by the
                    # order, which rotates (and the engine's CPU is not the client's).
                    engine.start()
                    try:
                        for impl in impls[shift:] + impls[:shift]:
                            log(f"round {round_index + 1}/{args.rounds}: {size}, {agents} agents, {NAMES[impl]}")
                            extra = ["--prompt-file", str(prompts[size]), "--agents", str(agents)]
                            extra += ["--min-calls", str(args.min_calls)]
                            if impl != "floor":
                                extra += ["--url", engine.url, "--tokenizer", str(tok_dir)]
                            run = run_worker(pythons[impl], impl, args, extra, envs[impl])
                            runs.setdefault((size, agents), {}).setdefault(impl, []).append(run)
                            loads.append(os.getloadavg()[0])
                    finally:
                        engine.stop()
    results = {key: summarize(value) for key, value in runs.items()}
    elapsed = time.monotonic() - started
    command = shlex.join(["python", "benchmarks/concurrency_cost.py", *(sys.argv[1:] if argv is None else argv)])
    header = (
        f"_Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {elapsed / 60:.1f} min; "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; strands-tito: {tree_text}. "
        f"Load average (1 min) at start {load_start[0]:.1f}, during the run {min(loads):.1f}-{max(loads):.1f}._\n\n"
        f"Command: `{command}`"
    )
    body = "\n\n".join(x for x in (header, table(results), capture_table(results)) if x)
    print(body)
    if args.json:
        Path(args.json).write_text(json.dumps({repr(k): v for k, v in results.items()}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
