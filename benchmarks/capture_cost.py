"""Trace-capture cost: encoding and export per turn, bytes on the wire, and capture's overhead on a real agent run.

    python benchmarks/capture_cost.py [--quick] [--write BENCHMARKS.md]

Part 1 encodes one turn's token data (N new tokens, ids + logprobs) as span attributes, packed (int32/float32
bytes, the default) and as plain arrays, then through the OTLP protobuf encoder the exporters use.
Part 2 sums the OTLP bytes of a whole 30-turn trajectory of N tokens, so per-turn deltas can be seen to keep it
proportional to N, not 30 x N.
Part 3 runs the same real Strands agent against a local engine subprocess, capture on and capture off, with the
same SDK TracerProvider and a real OTLP/HTTP exporter to a sink on 127.0.0.1, and compares client CPU per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito import spans as schema

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe


def timed(fn: Any, repeat: int) -> float:
    """Median CPU milliseconds of ``fn()``."""
    samples = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        samples.append((time.process_time() - start) * 1000)
    return statistics.median(samples)


def span_with(attributes: dict[str, Any]) -> Any:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("bench").start_as_current_span("chat") as span:
        span.set_attributes(attributes)
    return exporter.get_finished_spans()[0]


def turn(n: int, encoding: schema.Encoding, rng: random.Random) -> dict[str, Any]:
    prompt = [rng.randrange(151_000) for _ in range(n // 2)]
    output = [rng.randrange(151_000) for _ in range(n - n // 2)]
    return schema.turn_attributes(
        "t" * 32,
        1,
        1000,
        12345,
        prompt,
        [-rng.random() for _ in prompt],
        output,
        [-rng.random() for _ in output],
        finish_reason="stop",
        encoding=encoding,
    )


def part1(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    """One turn of N new tokens put on a span the way record_turn does it, packed and as arrays."""
    from strands_tito.trajectory import Trajectory

    rng = random.Random(0)
    rows = []
    for n in sizes:
        prompt = [rng.randrange(151_000) for _ in range(n // 2)]
        output = [rng.randrange(151_000) for _ in range(n - n // 2)]
        trajectory = Trajectory()
        trajectory.append_turn(prompt, output, finish_reason="stop", output_logprobs=[-rng.random() for _ in output])
        for encoding in ("packed", "array"):

            def build(enc: schema.Encoding = encoding, t: Trajectory = trajectory) -> dict[str, Any]:  # type: ignore[assignment]
                first = t.turns[0]
                start, end = first.output_start, first.output_start + first.output_length
                if enc == "packed":  # what record_turn does: slices of the trajectory's packed buffers
                    ids, lps = t.packed_ids, t.packed_logprobs
                    data: tuple[Any, ...] = (
                        bytes(ids[: 4 * start]),
                        bytes(lps[: 4 * start]),
                        bytes(ids[4 * start : 4 * end]),
                        bytes(lps[4 * start : 4 * end]),
                    )
                else:
                    data = (t.token_ids[:start], t.logprobs[:start], t.token_ids[start:end], t.logprobs[start:end])
                return schema.turn_attributes(t.trajectory_id, 0, 0, 0, *data, finish_reason="stop", encoding=enc)

            attributes = build()
            span = span_with(attributes)
            body = encode_spans([span]).SerializeToString()
            rows.append(
                {
                    "tokens": n,
                    "encoding": encoding,
                    "attributes_ms": timed(build, repeat),
                    "otlp_encode_ms": timed(lambda s=span: encode_spans([s]).SerializeToString(), repeat),
                    "decode_ms": timed(lambda a=attributes: schema.decode_span(a), repeat),
                    "bytes": len(body),
                    "gzip_bytes": len(gzip.compress(body, 6)),
                }
            )
    return rows


def part2(sizes: list[int], turns: int = 30) -> list[dict[str, Any]]:
    rng = random.Random(1)
    rows = []
    for n in sizes:
        for encoding in ("packed", "array"):
            first = n - (turns - 1) * 60
            total = 0
            for i in range(turns):
                new = first if i == 0 else 60
                total += len(encode_spans([span_with(turn(new, encoding, rng))]).SerializeToString())
            rows.append({"tokens": n, "encoding": encoding, "bytes": total, "bytes_per_token": total / n})
    return rows


class _Sink(BaseHTTPRequestHandler):
    received = 0

    def do_POST(self) -> None:
        size = int(self.headers["Content-Length"])
        self.rfile.read(size)
        type(self).received += size
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def part3_worker(engine_url: str, sink_url: str, system_tokens: int, calls: int) -> dict[str, Any]:
    """One agent episode in this process; prints per-call CPU (run as a subprocess per setting)."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from strands import Agent, tool
    from strands.agent.conversation_manager import NullConversationManager

    from strands_tito import SGLangClient, SGLangModel, ToolLimiter
    from strands_tito.tokenizers import build_qwen3_tokenizer

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=sink_url)))
    trace.set_tracer_provider(provider)

    @tool
    def noop(x: int) -> str:
        """Do nothing.

        Args:
            x: anything
        """
        return "ok"

    tokenizer = build_qwen3_tokenizer()
    system = " ".join(["alpha beta gamma delta"] * (system_tokens // 4))
    samples: list[float] = []
    starts: list[float] = []

    async def episode() -> None:
        model = SGLangModel(
            client=SGLangClient(engine_url), tokenizer=tokenizer, sampling_params={"max_new_tokens": 64}
        )
        original = model.stream

        async def measured(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            starts.append(start)
            async for event in original(*args, **kwargs):
                yield event
            samples.append((time.process_time() - start) * 1000)

        model.stream = measured  # type: ignore[method-assign]
        agent = Agent(
            model=model,
            tools=[noop],
            system_prompt=system,
            callback_handler=None,
            conversation_manager=NullConversationManager(),
            hooks=[ToolLimiter(max_tool_iters=calls - 1)],
        )
        with contextlib.suppress(Exception):  # the limiter ends the episode with an exception
            await agent.invoke_async("go")
        model.reset()

    asyncio.run(episode())  # warm-up
    samples.clear()
    turns: list[float] = []
    for _ in range(3):
        starts.clear()
        asyncio.run(episode())
        # A turn: from one model call's start to the next one's (adds the tool run and Strands' loop).
        turns += [(b - a) * 1000 for a, b in itertools.pairwise(starts[1:])]
    provider.force_flush()
    later = [s for i, s in enumerate(samples) if i % calls != 0]
    return {
        "per_call_ms": statistics.median(later),
        "per_turn_ms": statistics.median(turns),
        "first_call_ms": statistics.median(samples[::calls]),
    }


def part3(sizes: list[int], calls: int) -> list[dict[str, Any]]:
    script = Path(__file__).resolve().parent / "_engine_script.json"
    call = '<tool_call>\n{"name": "noop", "arguments": {"x": 1}}\n</tool_call>'
    script.write_text(json.dumps({"scripts": [], "default": {"text": call}}))
    engine = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "strands_tito.engine",
            "--port",
            "0",
            "--tokenizer",
            "qwen3",
            "--script",
            str(script),
            "--context-length",
            "200000",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert engine.stdout is not None
    url = engine.stdout.readline().split()[-1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sink = f"http://127.0.0.1:{server.server_port}/v1/traces"
    rows = []
    try:
        for n in sizes:
            results: dict[str, list[float]] = {"on": [], "off": []}
            turn_results: dict[str, list[float]] = {"on": [], "off": []}
            for round_ in range(2):
                for setting in ("on", "off") if round_ % 2 == 0 else ("off", "on"):
                    env = {**os.environ, "STRANDS_TITO_CAPTURE": "1" if setting == "on" else "0"}
                    out = (
                        subprocess.run(
                            [sys.executable, __file__, "--worker", url, sink, str(n), str(calls)],
                            env=env,
                            capture_output=True,
                            text=True,
                            check=True,
                        )
                        .stdout.strip()
                        .splitlines()[-1]
                    )
                    measured = json.loads(out)
                    results[setting].append(measured["per_call_ms"])
                    turn_results[setting].append(measured["per_turn_ms"])
            on, off = statistics.median(results["on"]), statistics.median(results["off"])
            turn_on, turn_off = statistics.median(turn_results["on"]), statistics.median(turn_results["off"])
            rows.append(
                {
                    "tokens": n,
                    "on_ms": on,
                    "off_ms": off,
                    "overhead_pct": 100 * (on - off) / off,
                    "turn_on_ms": turn_on,
                    "turn_off_ms": turn_off,
                    "turn_overhead_pct": 100 * (turn_on - turn_off) / turn_off,
                }
            )
    finally:
        engine.terminate()
        server.shutdown()
        script.unlink(missing_ok=True)
    return rows


def markdown(p1: list[dict[str, Any]], p2: list[dict[str, Any]], p3: list[dict[str, Any]]) -> str:
    lines = [
        "## Trace capture cost (`benchmarks/capture_cost.py`)",
        "",
        f"Machine: {describe()}. Date: {time.strftime('%Y-%m-%d')}.",
        "",
        "One turn's token data (N new tokens: ids + logprobs) as span attributes, medians of CPU ms:",
        "",
        "| tokens | encoding | set on span (record_turn) | OTLP encode | decode (collector) | OTLP bytes "
        "| gzip bytes |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['tokens']:,} | {r['encoding']} | {r['attributes_ms']:.3f} | {r['otlp_encode_ms']:.3f} | "
        f"{r['decode_ms']:.3f} | {r['bytes']:,} | {r['gzip_bytes']:,} |"
        for r in p1
    ]
    lines += [
        "",
        "Whole 30-turn trajectory of N tokens on the wire (per-turn deltas):",
        "",
        "| tokens | encoding | OTLP bytes | bytes per token |",
        "|---|---|---|---|",
    ]
    lines += [f"| {r['tokens']:,} | {r['encoding']} | {r['bytes']:,} | {r['bytes_per_token']:.2f} |" for r in p2]
    if p3:
        lines += [
            "",
            "Client CPU of a real agent against the local engine (separate process), same SDK provider and "
            "OTLP/HTTP exporter, capture on vs off (medians; runs interleaved on/off). Process CPU, so the exporter's "
            "background thread (encoding and sending the larger spans) is included. Call: `model.stream`; turn: "
            "from one model call's start to the next (adds the tool and Strands' loop):",
            "",
            "| context tokens | call: off ms | call: on ms | call overhead | turn: off ms | turn: on ms "
            "| turn overhead |",
            "|---|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['tokens']:,} | {r['off_ms']:.2f} | {r['on_ms']:.2f} | {r['overhead_pct']:+.1f}% | "
            f"{r['turn_off_ms']:.2f} | {r['turn_on_ms']:.2f} | {r['turn_overhead_pct']:+.1f}% |"
            for r in p3
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", type=Path)
    parser.add_argument("--worker", nargs=4)
    args = parser.parse_args()
    if args.worker:
        url, sink, n, calls = args.worker
        print(json.dumps(part3_worker(url, sink, int(n), int(calls))))
        return
    sizes = [8_192, 32_768] if args.quick else [8_192, 32_768, 131_072]
    p1 = part1([*sizes, 100_000], repeat=5 if args.quick else 20)
    p2 = part2(sizes)
    p3 = part3([1_024, 8_192] if args.quick else [1_024, 8_192, 32_768], calls=10 if args.quick else 20)
    text = markdown(p1, p2, p3)
    print(text)
    if args.write:
        existing = args.write.read_text() if args.write.exists() else "# Benchmarks\n\n"
        head, sep, _ = existing.partition("## Trace capture cost")
        args.write.write_text(head.rstrip() + "\n\n" + text if sep else existing.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
