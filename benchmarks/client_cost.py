"""Client-side CPU per agent turn: strands-tito's ``SGLangModel`` vs strands-sglang 0.6.2, side by side.

Both run a real Strands ``Agent`` (one tool, ``NullConversationManager``) against the local engine
(``strands_tito.testing.engine``, SGLang's ``/generate`` protocol, a separate process so its CPU is not counted) that
answers every request with a short hermes tool call. Context is built from a long system prompt; the tokenizer is
the real Qwen3 vocabulary. Each episode has ``--calls`` measured model calls (the first, which tokenizes the whole
prompt, is reported separately) and worker processes for the two implementations are interleaved round by round.

Usage (from the repository root, with the project's environment)::

    python benchmarks/client_cost.py --quick                  # smoke test: 1k and 8k, 1 round
    python benchmarks/client_cost.py                          # full run: 1k, 8k, 32k, 128k
    python benchmarks/client_cost.py --write BENCHMARKS.md    # full run, results written into BENCHMARKS.md

The peer package lives only in its own virtualenv (``benchmarks/.venv-peer``, created on first use with
``pip install strands-sglang==0.6.2``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import (
    CASE_CALLS,
    ENGINE_CONTEXT,
    HERE,
    IMPLS,
    NAMES,
    SIZES,
    Engine,
    ensure_peer_venv,
    log,
    prepare,
    run_worker,
    tito_snapshot,
    tool_args,
)

AGENTS = (1, 16, 64, 256)
CONCURRENT_CALLS = 8  # model calls per agent in the concurrency pass (1k context), plus one that ends the episode
CONCURRENT_MIN_CALLS = 72  # waves of agents are repeated until at least this many calls
# Measured episodes per worker unless --episodes is given: the local engine validates every input id in Python
# (about 0.5 s per 128k request), so 128k gets fewer episodes to keep the full run near 10 minutes.
DEFAULT_EPISODES = {"1k": 4, "8k": 4, "32k": 4, "128k": 2, "tool32k": 8}
BREAKDOWN_EPISODES = 2
BEGIN = "<!-- client_cost:begin -->"
END = "<!-- client_cost:end -->"


# -- statistics ---------------------------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def ms(values: Iterable[float]) -> list[float]:
    return [v * 1000.0 for v in values]


def summarize(runs: list[dict[str, Any]], calls: int) -> dict[str, Any]:
    """Pool turns 1..calls-1 of every episode of every run of one implementation at one size."""
    episodes = [e for run in runs for e in run["episodes"]]
    later = [c for e in episodes for c in e["calls"][1:]]

    def stat(key: str, rows: list[dict[str, float]]) -> dict[str, float]:
        values = ms(r[key] for r in rows)
        return {"median": statistics.median(values), "p10": quantile(values, 0.1), "p90": quantile(values, 0.9)}

    def window(key: str, lo: int, hi: int) -> float:
        return statistics.median(ms(e["calls"][i][key] for e in episodes for i in range(lo, min(hi, calls - 1) + 1)))

    mid = str(calls // 2) if str(calls // 2) in episodes[0]["sampled"] else sorted(episodes[0]["sampled"])[0]
    return {
        "turns": len(later),
        "call_cpu": stat("call_cpu", later),
        "call_wall": stat("call_wall", later),
        "turn_cpu": stat("turn_cpu", later),
        "turn_wall": stat("turn_wall", later),
        "run_medians": [
            statistics.median(ms(c["call_cpu"] for e in run["episodes"] for c in e["calls"][1:])) for run in runs
        ],
        "run_turn_medians": [
            statistics.median(ms(c["turn_cpu"] for e in run["episodes"] for c in e["calls"][1:])) for run in runs
        ],
        "first_cpu": statistics.median(ms(e["calls"][0]["call_cpu"] for e in episodes)),
        "first_wall": statistics.median(ms(e["calls"][0]["call_wall"] for e in episodes)),
        "trend": {
            "call_cpu": [window("call_cpu", 1, 5), window("call_cpu", calls - 5, calls - 1)],
            "turn_cpu": [window("turn_cpu", 1, 5), window("turn_cpu", calls - 5, calls - 1)],
        }
        if calls >= 10
        else None,
        "prompt_tokens": [episodes[0]["prompt_tokens"][1], episodes[0]["prompt_tokens"][-1]],
        "first_prompt_tokens": episodes[0]["prompt_tokens"][0],
        "bytes": {k: v["bytes"] for k, v in episodes[0]["sampled"].items()},
        "bytes_mid": episodes[0]["sampled"][mid]["bytes"],
        "mid_call": int(mid),
        "digests": sorted({e["digest"] for e in episodes}),
        "total_tokens": sorted({e["total_tokens"] for e in episodes}),
        "versions": runs[0]["versions"],
        "python": runs[0]["python"],
    }


PARTS = (
    ("tokenize", ("tokenize",)),
    ("HTTP: encode + round trip + decode", ("http",)),
    ("reply checks + record + tool parse", ("parse_reply", "record", "tool_parse")),
    ("GC inside the call", ("gc",)),
)


def summarize_concurrent(samples: list[dict[str, Any]]) -> dict[str, float]:
    """Calls per client CPU-second (and per wall second) of the concurrency runs of one implementation."""
    calls = sum(r["calls"] for r in samples)
    cpu = sum(r["cpu"] for r in samples)
    wall = sum(r["wall"] for r in samples)
    per_run = [r["calls"] / r["cpu"] for r in samples]
    return {
        "calls": calls,
        "calls_per_cpu_s": calls / cpu,
        "cpu_ms_per_call": 1000 * cpu / calls,
        "calls_per_wall_s": calls / wall,
        "run_min": min(per_run),
        "run_max": max(per_run),
    }


def summarize_breakdown(run: dict[str, Any]) -> dict[str, float]:
    """Median CPU ms of each piece of a model call (turns after the first), from a ``--breakdown`` worker."""
    rows = [c for e in run["episodes"] for c in e["calls"][1:]]
    out: dict[str, float] = {"model call": statistics.median(ms(r["call_cpu"] for r in rows))}
    known = set()
    for label, keys in PARTS:
        known.update(keys)
        out[label] = statistics.median(ms(sum(r.get("parts", {}).get(k, 0.0) for k in keys) for r in rows))
    out["rest of the call (Strands stream handling, provider glue)"] = statistics.median(
        ms(r["call_cpu"] - sum(v for k, v in r.get("parts", {}).items() if k in known) for r in rows)
    )
    out["Strands outside the call (turn - call)"] = statistics.median(ms(r["turn_cpu"] - r["call_cpu"] for r in rows))
    out["turn"] = statistics.median(ms(r["turn_cpu"] for r in rows))
    return out


# -- report -------------------------------------------------------------------------------------------------------


def fmt(x: float, digits: int = 2) -> str:
    return f"{x:,.{digits}f}"


def spread(s: dict[str, float]) -> str:
    return f"**{fmt(s['median'])}** ({fmt(s['p10'])}-{fmt(s['p90'])})"


def tables(results: dict[str, dict[str, dict[str, Any]]], calls: int) -> str:
    sizes = list(results)
    lines = [
        f"Per model call / turn after the first (turns 1-{calls - 1}; for `tool32k`, the one turn that brings in "
        "the ~32k-token tool result), process CPU in ms: "
        "**median** (p10-p90). Ratio = strands-sglang / strands-tito (> 1: strands-tito is cheaper).",
        "",
        "| size | prompt tokens (measured turns) | turns | tito call CPU | peer call CPU | ratio "
        "| tito turn CPU | peer turn CPU | ratio | first call CPU tito / peer |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        t, p = results[size]["tito"], results[size]["peer"]
        lines.append(
            f"| {size} | {t['prompt_tokens'][0]:,}-{t['prompt_tokens'][1]:,} | {t['turns']} / {p['turns']} "
            f"| {spread(t['call_cpu'])} | {spread(p['call_cpu'])} "
            f"| {p['call_cpu']['median'] / t['call_cpu']['median']:.2f}x "
            f"| {spread(t['turn_cpu'])} | {spread(p['turn_cpu'])} "
            f"| {p['turn_cpu']['median'] / t['turn_cpu']['median']:.2f}x "
            f"| {fmt(t['first_cpu'], 1)} / {fmt(p['first_cpu'], 1)} |"
        )
    lines += [
        "",
        f"Turn-index trend (median CPU ms over turns 1-5 vs {calls - 5}-{calls - 1}):",
        "",
        "| size | tito call 1-5 | tito call late | peer call 1-5 | peer call late "
        "| tito turn 1-5 | tito turn late | peer turn 1-5 | peer turn late |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        t, p = results[size]["tito"]["trend"], results[size]["peer"]["trend"]
        if t is None or p is None:
            continue
        row = [*t["call_cpu"], *p["call_cpu"], *t["turn_cpu"], *p["turn_cpu"]]
        lines.append(f"| {size} | " + " | ".join(fmt(v) for v in row) + " |")
    lines += [
        "",
        "Wall time, request size and spread across runs:",
        "",
        "| size | tito call wall ms | peer call wall ms | tito turn wall ms | peer turn wall ms "
        "| bytes/request tito | bytes/request peer | tito per-run call CPU medians | peer per-run call CPU medians "
        "| first call wall tito / peer | same trajectories |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size in sizes:
        t, p = results[size]["tito"], results[size]["peer"]
        same = "yes" if t["digests"] == p["digests"] and len(t["digests"]) == 1 else "NO"
        lines.append(
            f"| {size} | {fmt(t['call_wall']['median'])} | {fmt(p['call_wall']['median'])} "
            f"| {fmt(t['turn_wall']['median'])} | {fmt(p['turn_wall']['median'])} "
            f"| {t['bytes_mid']:,} | {p['bytes_mid']:,} "
            f"| {', '.join(fmt(v) for v in t['run_medians'])} | {', '.join(fmt(v) for v in p['run_medians'])} "
            f"| {fmt(t['first_wall'], 1)} / {fmt(p['first_wall'], 1)} | {same} |"
        )
    with_breakdown = [size for size in sizes if "breakdown" in results[size]["tito"]]
    if with_breakdown:
        labels = list(results[with_breakdown[0]]["tito"]["breakdown"])
        head = " | ".join(f"{size} tito | {size} peer" for size in with_breakdown)
        lines += [
            "",
            "Where the CPU of a turn goes (separate pass with timers around the pieces, which add a little; "
            f"{BREAKDOWN_EPISODES} episodes per implementation and size; medians, ms; pieces do not add up exactly "
            "because each is a separate median):",
            "",
            f"| piece | {head} |",
            "|---|" + "---|" * (2 * len(with_breakdown)),
        ]
        for label in labels:
            cells = " | ".join(
                f"{fmt(results[size]['tito']['breakdown'][label])} | {fmt(results[size]['peer']['breakdown'][label])}"
                for size in with_breakdown
            )
            lines.append(f"| {label} | {cells} |")
    mid = next(iter(results.values()))["tito"]["mid_call"]
    lines += [
        "",
        f"Bytes/request: the `/generate` body of call {mid} of an episode (strands-tito: orjson; strands-sglang: "
        "stdlib `json.dumps` as aiohttp sends it). Same trajectories: both implementations produced token-identical "
        "trajectories in every episode.",
    ]
    return "\n".join(lines)


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "ram": ram,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def concurrency_table(concurrency: dict[int, dict[str, dict[str, float]]]) -> str:
    lines = [
        f"Concurrent agents in one client process (1k context, {CONCURRENT_CALLS} model calls per agent plus the one "
        "that ends its episode; every agent has its own model, all share one client; waves of agents repeated up to "
        f"{CONCURRENT_MIN_CALLS} calls). Calls per client CPU-second (process CPU, all threads), ratio = "
        "strands-tito / strands-sglang (> 1: strands-tito does more calls per CPU-second):",
        "",
        "| agents at once | calls (tito / peer) | tito calls per CPU-s | peer calls per CPU-s | ratio "
        "| tito CPU ms per call | peer CPU ms per call | tito calls per wall-s | peer calls per wall-s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for agents, row in concurrency.items():
        t, p = row["tito"], row["peer"]
        lines.append(
            f"| {agents} | {t['calls']:,.0f} / {p['calls']:,.0f} | **{t['calls_per_cpu_s']:,.0f}** "
            f"({t['run_min']:,.0f}-{t['run_max']:,.0f}) | **{p['calls_per_cpu_s']:,.0f}** "
            f"({p['run_min']:,.0f}-{p['run_max']:,.0f}) | {t['calls_per_cpu_s'] / p['calls_per_cpu_s']:.2f}x "
            f"| {fmt(t['cpu_ms_per_call'])} | {fmt(p['cpu_ms_per_call'])} "
            f"| {t['calls_per_wall_s']:,.0f} | {p['calls_per_wall_s']:,.0f} |"
        )
    lines += ["", "Calls per CPU-second: all runs pooled (range of the per-run values in brackets)."]
    return "\n".join(lines)


def report(
    results: dict[str, dict[str, dict[str, Any]]],
    args: argparse.Namespace,
    elapsed: float,
    concurrency: dict[int, dict[str, dict[str, float]]] | None = None,
) -> str:
    info = machine()
    any_size = next(iter(results.values()))
    versions = {**any_size["tito"]["versions"], **any_size["peer"]["versions"]}
    version_text = ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))
    rounds = args.rounds
    episodes = ", ".join(f"{size}: {args.episodes_for[size]}" for size in results)
    return "\n".join(
        [
            f"_Run {dt.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}, {elapsed / 60:.1f} min. "
            f"Machine: {info['cpu']}, {info['cores']} cores, {info['ram']} RAM, {info['os']}; "
            f"Python {any_size['tito']['python']} (both venvs); {version_text}; strands-tito measured at "
            f"{args.tito_tree_text}. Load average (1 min) at start / end: {args.load[0]:.2f} / "
            f"{os.getloadavg()[0]:.2f} (the machine was not otherwise idle if these are well above 1)._",
            "",
            f"Command: `{args.command_line}`",
            "",
            f"Method: {rounds} rounds x 2 implementations, interleaved (worker order alternates each round); each "
            f"worker is a fresh process with a warm-up episode, then N episodes ({episodes}) of {args.calls} measured "
            "model calls "
            f"(one real Strands `Agent`, one tool `noop(x: int)`, `NullConversationManager`, the package's own "
            f"limiter, Qwen3 tokenizer, context from a long system prompt, `max_new_tokens` 64). Every reply of the "
            f"local engine is the same short hermes tool call (~20 tokens). Call CPU: `time.process_time()` from the "
            f"first to the last step of `model.stream`; turn CPU: from the start of one model call to the start of "
            f"the next (adds Strands' tool execution and event loop). The first call of each episode (whole chat "
            f"template + tokenization) is reported separately. The engine is a separate process, started fresh for "
            f"each worker so that both see the same server state.",
            "",
            tables(results, args.calls),
            *(["", concurrency_table(concurrency)] if concurrency else []),
        ]
    )


def write_section(path: Path, body: str) -> None:
    section = f"{BEGIN}\n## Client CPU per agent turn: strands-tito vs strands-sglang\n\n{body}\n{END}"
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            tail = rest.split(END, 1)[1]
            text = head + section + tail
        else:
            text = text.rstrip("\n") + "\n\n" + section + "\n"
    else:
        text = "# Benchmarks\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


# -- main ---------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1k,8k,32k,128k,tool32k", help="comma-separated, from: " + ", ".join(SIZES))
    parser.add_argument("--rounds", type=int, default=3, help="worker pairs per size (default: %(default)s)")
    parser.add_argument(
        "--episodes",
        type=int,
        help="measured episodes per worker (default: "
        + ", ".join(f"{k}: {v}" for k, v in DEFAULT_EPISODES.items())
        + ")",
    )
    parser.add_argument("--calls", type=int, default=30, help="measured model calls per episode (default: %(default)s)")
    parser.add_argument("--quick", action="store_true", help="smoke test: sizes 1k,8k, 1 round, 2 episodes")
    parser.add_argument(
        "--tito-tree",
        choices=("head", "worktree"),
        default="head",
        help="strands-tito to measure (and run the engine from): a snapshot of git HEAD, or the working tree as it "
        "is (default: %(default)s)",
    )
    parser.add_argument("--no-breakdown", action="store_true", help="skip the pass that times the pieces of a call")
    parser.add_argument(
        "--agents",
        default=",".join(map(str, AGENTS)),
        help="concurrency pass: numbers of agents at once in one process, 1k context ('' skips it; default: "
        "%(default)s)",
    )
    parser.add_argument("--concurrency-rounds", type=int, default=2, help="worker pairs per agent count")
    parser.add_argument("--write", metavar="FILE.md", help="write the results section into this Markdown file")
    parser.add_argument("--json", metavar="FILE.json", help="also dump the summaries as JSON")
    parser.add_argument("--peer-venv", default=str(HERE / ".venv-peer"), help="virtualenv for strands-sglang")
    parser.add_argument("--worker-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    args.command_line = shlex.join(["python", "benchmarks/client_cost.py", *(sys.argv[1:] if argv is None else argv)])
    if args.quick:
        if "--sizes" not in (argv or sys.argv):
            args.sizes = "1k,8k,tool32k"
        if "--agents" not in (argv or sys.argv):
            args.agents = "1,16"
        args.rounds, args.episodes, args.concurrency_rounds = 1, 2, 1
    args.agents_list = [int(a) for a in args.agents.split(",") if a.strip()]
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        parser.error(f"unknown sizes {unknown}; choose from {list(SIZES)}")
    args.episodes_for = {size: args.episodes or DEFAULT_EPISODES[size] for size in sizes}
    if args.calls < 10:
        parser.error("--calls must be at least 10 (the trend compares turns 1-5 with the last five)")

    started = time.monotonic()
    args.load = os.getloadavg()
    pythons = {"tito": Path(sys.executable), "peer": ensure_peer_venv(Path(args.peer_venv))}
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="client_cost-") as tmp:
        workdir = Path(tmp)
        wanted = [*sizes, *(["1k"] if args.agents_list and "1k" not in sizes else [])]
        tok_dir, prompts, script, first_tokens = prepare(workdir, wanted)
        tito_env, args.tito_tree_text = tito_snapshot(workdir, args.tito_tree)
        peer_env = {**os.environ, "STRANDS_TITO_CAPTURE": "0"}
        envs = {"tito": tito_env, "peer": peer_env}
        engine = Engine(tok_dir, script, ENGINE_CONTEXT, tito_env)
        for size in sizes:
            runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in IMPLS}
            for round_index in range(args.rounds):
                order = IMPLS if round_index % 2 == 0 else IMPLS[::-1]
                for impl in order:
                    log(f"{size}: round {round_index + 1}/{args.rounds}, {NAMES[impl]}")
                    engine.start()
                    try:
                        out = workdir / f"{size}-{impl}-{round_index}.json"
                        min_tokens = first_tokens[size]
                        episodes = args.episodes_for[size]
                        runs[impl].append(
                            run_worker(
                                pythons[impl],
                                impl,
                                engine.url,
                                tok_dir,
                                prompts[size],
                                out,
                                args,
                                min_tokens,
                                episodes,
                                envs[impl],
                                extra=tool_args(workdir, size),
                            )
                        )
                    finally:
                        engine.stop()
            results[size] = {impl: summarize(runs[impl], CASE_CALLS.get(size, args.calls)) for impl in IMPLS}
            if not args.no_breakdown:
                for impl in IMPLS:
                    log(f"{size}: breakdown pass, {NAMES[impl]}")
                    engine.start()
                    try:
                        out = workdir / f"{size}-{impl}-breakdown.json"
                        run = run_worker(
                            pythons[impl],
                            impl,
                            engine.url,
                            tok_dir,
                            prompts[size],
                            out,
                            args,
                            first_tokens[size],
                            BREAKDOWN_EPISODES,
                            envs[impl],
                            breakdown=True,
                            extra=tool_args(workdir, size),
                        )
                    finally:
                        engine.stop()
                    results[size][impl]["breakdown"] = summarize_breakdown(run)
            t, p = results[size]["tito"], results[size]["peer"]
            if t["digests"] != p["digests"]:
                log(f"WARNING {size}: the implementations produced different token trajectories")
            log(
                f"{size}: call CPU tito {t['call_cpu']['median']:.2f} ms, peer {p['call_cpu']['median']:.2f} ms; "
                f"turn CPU tito {t['turn_cpu']['median']:.2f} ms, peer {p['turn_cpu']['median']:.2f} ms"
            )
        concurrency: dict[int, dict[str, dict[str, float]]] = {}
        for agents in args.agents_list:
            samples: dict[str, list[dict[str, Any]]] = {impl: [] for impl in IMPLS}
            for round_index in range(args.concurrency_rounds):
                for impl in IMPLS if round_index % 2 == 0 else IMPLS[::-1]:
                    log(f"{agents} concurrent agents: round {round_index + 1}/{args.concurrency_rounds}, {NAMES[impl]}")
                    engine.start()
                    try:
                        out = workdir / f"agents{agents}-{impl}-{round_index}.json"
                        extra = ["--agents", str(agents), "--min-calls", str(CONCURRENT_MIN_CALLS)]
                        run = run_worker(
                            pythons[impl], impl, engine.url, tok_dir, prompts["1k"], out, args, 0, 1, envs[impl],
                            extra=[*extra, "--calls", str(CONCURRENT_CALLS)],
                        )  # fmt: skip
                    finally:
                        engine.stop()
                    samples[impl].append(run["concurrent"])
            concurrency[agents] = {impl: summarize_concurrent(samples[impl]) for impl in IMPLS}
            t, p = concurrency[agents]["tito"], concurrency[agents]["peer"]
            log(f"{agents} agents: calls/CPU-s tito {t['calls_per_cpu_s']:.0f}, peer {p['calls_per_cpu_s']:.0f}")

    elapsed = time.monotonic() - started
    body = report(results, args, elapsed, concurrency)
    print(body)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1), encoding="utf-8")
    if args.write:
        write_section(Path(args.write), body)
        log(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
