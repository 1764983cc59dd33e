"""Collector ingest throughput (durable and not) and memory with many trajectories in flight.

    python benchmarks/collector_throughput.py [--quick] [--write BENCHMARKS.md] [--compare-with GIT_REF]

Throughput: ready-made OTLP export requests of packed strands-tito spans go through the collector's ingest path
(protobuf parse, validation, SQLite commit, assembly) in this process; process CPU time gives spans/s and
tokens/s per core. "Durable" is the default store (WAL, synchronous=NORMAL, committed before the acknowledgement);
"not durable" turns SQLite syncing and journaling off.

``--compare-with REF`` also measures the durable ingest of the code at git ``REF`` (e.g. the commit before a
change), in subprocesses interleaved round by round with the working tree's, and reports both medians.

Memory: 1,000 trajectories of 32k tokens each are sent without their end signals (all in flight at once) and the
process's peak RSS growth is compared with the store's size.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.helpers
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import describe

from strands_tito.collector.ingest import Ingestor
from strands_tito.collector.store import Store
from strands_tito.trajectory import Trajectory
from tests.helpers.otlp import make_request, turn_spans


def big_trajectory(rng: random.Random, tokens: int, turns: int) -> Trajectory:
    t = Trajectory(trajectory_id=f"traj-{rng.getrandbits(64):016x}")
    first = tokens - (turns - 1) * 200
    for i in range(turns):
        n_prompt, n_out = (first, 100) if i == 0 else (100, 100)
        prompt = list(rng.choices(range(151_000), k=n_prompt))
        output = list(rng.choices(range(151_000), k=n_out))
        t.append_turn(prompt, output, finish_reason="stop", output_logprobs=[-0.5] * n_out)
    return t


def throughput(durable: bool, trajectories: int, tokens: int) -> dict[str, Any]:
    rng = random.Random(0)
    requests = []
    total_tokens = spans = 0
    for _ in range(trajectories):
        t = big_trajectory(rng, tokens, 8)
        turn_list = turn_spans(t)
        requests.append(make_request(turn_list).SerializeToString())
        total_tokens += len(t)
        spans += len(turn_list)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "c.db")
        if not durable:
            store._db.execute("PRAGMA synchronous=OFF")
            store._db.execute("PRAGMA journal_mode=OFF")
        ingestor = Ingestor(store, ["bench"])
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        start_cpu, start_wall = time.process_time(), time.perf_counter()
        for body in requests:
            ingestor.ingest(ExportTraceServiceRequest.FromString(body))
        cpu, wall = time.process_time() - start_cpu, time.perf_counter() - start_wall
        store.close()
    return {
        "durable": durable,
        "spans": spans,
        "tokens": total_tokens,
        "bytes": sum(len(b) for b in requests),
        "cpu_s": cpu,
        "wall_s": wall,
        "spans_per_s": spans / cpu,
        "tokens_per_s": total_tokens / cpu,
    }


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(trajectories: int, tokens: int) -> dict[str, Any]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "c.db")
        ingestor = Ingestor(store, ["bench"])
        gc.collect()
        before = rss_mb()
        for _ in range(trajectories):
            t = big_trajectory(rng, tokens, 4)
            ingestor.ingest(ExportTraceServiceRequest.FromString(make_request(turn_spans(t)).SerializeToString()))
            del t
        gc.collect()
        after = rss_mb()
        size = store.size_bytes()
        open_count = ingestor.assembler.open_trajectories
        store.close()
    return {
        "trajectories": open_count,
        "tokens_each": tokens,
        "rss_growth_mb": after - before,
        "store_mb": size / 1e6,
    }


ROOT = Path(__file__).resolve().parent.parent


def compare(ref: str, count: int, tokens: int, rounds: int) -> list[str]:
    """Durable ingest of ``ref`` against the working tree, interleaved in subprocesses; Markdown lines."""
    results: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        # core/ holds the shared modules since the collector became its own distributions; older refs lack it.
        trees = [
            d
            for d in ("core", "src", "collector", "exporters")
            if subprocess.run(["git", "cat-file", "-e", f"{ref}:{d}"], cwd=ROOT, capture_output=True).returncode == 0
        ]
        archive = subprocess.run(["git", "archive", ref, *trees], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        # Earlier entries of PYTHONPATH come before the editable install's paths: the old code is imported.
        old_path = os.pathsep.join(str(Path(tmp) / d) for d in trees)
        for _ in range(rounds):
            for label, path in (("before", old_path), ("after", "")):
                env = {**os.environ, "PYTHONPATH": path} if path else dict(os.environ)
                out = subprocess.run(
                    [sys.executable, __file__, "--one", str(count), str(tokens)],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                results[label].append(json.loads(out.strip().splitlines()[-1])["spans_per_s"])
    before, after = statistics.median(results["before"]), statistics.median(results["after"])
    return [
        "",
        f"Before/after `{ref}` (durable store, {rounds} interleaved rounds of {count} trajectories in fresh processes; "
        "median spans/s per core):",
        "",
        "| code | spans/s per core (median) | all rounds |",
        "|---|---|---|",
        f"| before (`{ref}`) | {before:,.0f} | {', '.join(f'{x:,.0f}' for x in results['before'])} |",
        f"| after (working tree) | {after:,.0f} | {', '.join(f'{x:,.0f}' for x in results['after'])} |",
        "",
        f"Change: {100 * (after / before - 1):+.1f}%.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", type=Path)
    parser.add_argument("--compare-with", metavar="GIT_REF")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)  # a single durable run, as JSON
    args = parser.parse_args()
    if args.one:
        print(json.dumps(throughput(True, *args.one)))
        return
    count, tokens = (40, 32_768) if args.quick else (200, 32_768)
    rows = [throughput(True, count, tokens), throughput(False, count, tokens)]
    mem = memory(100 if args.quick else 1000, 32_768)
    lines = [
        "## Collector ingest (`benchmarks/collector_throughput.py`)",
        "",
        f"Machine: {describe()}. Date: {time.strftime('%Y-%m-%d')}. {count} trajectories of {tokens:,} tokens "
        "(8 turns each, packed spans), one request per trajectory, through the ingest path in one process.",
        "",
        "| store | spans | tokens | request MB | CPU s | spans/s per core | tokens/s per core |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {'durable (WAL, synchronous=NORMAL)' if r['durable'] else 'not durable (sync and journal off)'} | "
            f"{r['spans']:,} | {r['tokens']:,} | {r['bytes'] / 1e6:.1f} | {r['cpu_s']:.2f} | "
            f"{r['spans_per_s']:,.0f} | {r['tokens_per_s'] / 1e6:.1f} M |"
        )
    lines += [
        "",
        f"Memory with {mem['trajectories']:,} trajectories of {mem['tokens_each']:,} tokens in flight (no end signals "
        f"yet): peak RSS grew by {mem['rss_growth_mb']:.0f} MB while the store holds {mem['store_mb']:.0f} MB.",
    ]
    if args.compare_with:
        lines += compare(args.compare_with, count, tokens, args.rounds)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        existing = args.write.read_text() if args.write.exists() else "# Benchmarks\n"
        marker = "## Collector ingest"
        if marker in existing:
            head, _, rest = existing.partition(marker)
            tail = rest[rest.find("\n## ") :] if "\n## " in rest else ""
            existing = head + tail.lstrip("\n")
        args.write.write_text(existing.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
