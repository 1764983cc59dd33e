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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from strands_tito import spans as schema
from strands_tito.capture.switch_on import CONTENT_OFF

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _callgrind import MARK
from _harness import Engine
from _machine import describe

#: What docs/settings.md gives for keeping the message text on the spans with capture on.
CONTENT_ON = "gen_ai_latest_experimental"


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


# Part 3 settings: (label, environment). "untraced": no tracer provider at all; "strands": an SDK provider with an
# OTLP/HTTP exporter, strands-tito capture off (plain Strands tracing, message text on the spans); "capture": the same
# provider with capture on (token data on the chat spans, message text off by default); "capture+content": capture
# on, keeping the message text by naming Strands' conventions itself (OTEL_SEMCONV_STABILITY_OPT_IN, which capture
# leaves as it is; docs/settings.md). Until 2026-11-26 this row used the deprecated STRANDS_TITO_SPAN_CONTENT=1, which
# kept Strands' older default conventions: its numbers before then are not comparable.
SETTINGS: tuple[tuple[str, dict[str, str]], ...] = (
    ("untraced", {"STRANDS_TITO_CAPTURE": "0", "BENCH_TRACING": "0"}),
    ("strands", {"STRANDS_TITO_CAPTURE": "0", "BENCH_TRACING": "1"}),
    ("capture", {"STRANDS_TITO_CAPTURE": "1", "BENCH_TRACING": "1"}),
    (
        "capture+content",
        {"STRANDS_TITO_CAPTURE": "1", "BENCH_TRACING": "1", "OTEL_SEMCONV_STABILITY_OPT_IN": CONTENT_ON},
    ),
    # No provider of the application's: capture installs its own, exporting over OTLP to the sink through its disk
    # spool, and records only the spans it reads (Strands' chat spans, its end signals). The default for RL capture.
    ("capture/own", {"STRANDS_TITO_CAPTURE": "1", "BENCH_TRACING": "0", "OTEL_EXPORTER_OTLP_ENDPOINT": "{sink}"}),
)
# --candidates: capture with other Strands switches for the text-off case (a value the user sets is kept as it is).
CANDIDATES: tuple[tuple[str, dict[str, str]], ...] = (
    (
        "capture/latest",
        {
            "STRANDS_TITO_CAPTURE": "1",
            "BENCH_TRACING": "1",
            "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental,gen_ai_unredacted_attributes=",
        },
    ),
    (
        "capture/latest+attrs",
        {
            "STRANDS_TITO_CAPTURE": "1",
            "BENCH_TRACING": "1",
            "OTEL_SEMCONV_STABILITY_OPT_IN": (
                "gen_ai_latest_experimental,gen_ai_span_attributes_only,gen_ai_unredacted_attributes="
            ),
        },
    ),
)

# --settings: pick settings by label, these included. "strands/switch": capture off, Strands under the switch capture
# sets; capture against it is strands-tito's own share (token attributes on the chat spans, their export, end signal).
REFERENCES: tuple[tuple[str, dict[str, str]], ...] = (
    (
        "strands/switch",
        {"STRANDS_TITO_CAPTURE": "0", "BENCH_TRACING": "1", "OTEL_SEMCONV_STABILITY_OPT_IN": CONTENT_OFF},
    ),
    (
        "capture/own+all",
        {
            "STRANDS_TITO_CAPTURE": "1",
            "BENCH_TRACING": "0",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "{sink}",
            "OTEL_TRACES_SAMPLER": "parentbased_always_on",  # every span (was STRANDS_TITO_SPANS=all)
        },
    ),
)


def timed_exporter(endpoint: str) -> Any:
    """The OTLP/HTTP exporter, adding up the CPU time its thread spends exporting (encoding and sending)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    class TimedExporter(OTLPSpanExporter):
        cpu_s = 0.0

        def export(self, spans: Any) -> Any:
            start = time.thread_time()
            try:
                return super().export(spans)
            finally:
                self.cpu_s += time.thread_time() - start

    return TimedExporter(endpoint=endpoint)


EPISODES = 3  # measured episodes per worker, after one warm-up episode


def part3_worker(engine_url: str, sink_url: str, system_tokens: int, calls: int) -> dict[str, Any]:
    """Agent episodes in this process (a fresh one per setting); returns CPU per call and bytes sent per call.

    Marks (``_callgrind.MARK``, for capture_instructions.py) the start of the measured episodes, the start and end of
    each one's first model call, and the end after the last flush: 2 x episodes + 2 marks.
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from strands import Agent, tool
    from strands.agent.conversation_manager import NullConversationManager

    from strands_tito import SGLangClient, SGLangModel, ToolLimiter
    from strands_tito.testing.tokenizers import build_qwen3_tokenizer

    provider = None
    exporter = None
    if os.environ.get("BENCH_TRACING") == "1":
        provider = TracerProvider()
        exporter = timed_exporter(sink_url)
        provider.add_span_processor(BatchSpanProcessor(exporter))
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
    tokens: list[int] = []
    marking = [False]

    async def episode() -> None:
        model = SGLangModel(
            client=SGLangClient(engine_url), tokenizer=tokenizer, sampling_params={"max_new_tokens": 64}
        )
        original = model.stream

        async def measured(*args: Any, **kwargs: Any) -> Any:
            first = marking[0] and not starts
            if first:
                MARK()
            start = time.process_time()
            starts.append(start)
            async for event in original(*args, **kwargs):
                yield event
            samples.append((time.process_time() - start) * 1000)
            if first:
                MARK()

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
        tokens.append(len(model.trajectory))
        model.reset()

    def flush() -> None:
        # capture/own: the provider capture installed (with the first Agent); its spool waits for the sink's answer
        installed = provider or trace.get_tracer_provider()
        if isinstance(installed, TracerProvider):
            installed.force_flush()

    asyncio.run(episode())  # warm-up
    flush()
    samples.clear()
    tokens.clear()
    turns: list[float] = []
    episodes = EPISODES
    export0 = exporter.cpu_s if exporter is not None else 0.0
    marking[0] = True
    MARK()
    c0 = time.process_time()
    for _ in range(episodes):
        starts.clear()
        asyncio.run(episode())
        # A turn: from one model call's start to the next one's (adds the tool run and Strands' loop).
        turns += [(b - a) * 1000 for a, b in itertools.pairwise(starts[1:])]
    flush()  # the exporter's work for these spans is part of the cost
    cpu = time.process_time() - c0
    MARK()
    export_cpu = (exporter.cpu_s if exporter is not None else 0.0) - export0
    later = [s for i, s in enumerate(samples) if i % calls != 0]
    # The first call of an episode tokenizes the whole prompt (the same work in every setting): its model-call CPU is
    # taken out, so the cost per call is that of the calls after it, spans and their export included.
    first = samples[::calls]
    return {
        "per_call_ms": statistics.median(later),
        "per_turn_ms": statistics.median(turns),
        "first_call_ms": statistics.median(first),
        "cpu_ms_per_call": (1000 * cpu - sum(first)) / (len(samples) - len(first)),
        # The exporter thread's share of it (OTLP encoding and HTTP), over the same calls.
        "export_ms_per_call": 1000 * export_cpu / (len(samples) - len(first)),
        "calls": len(samples),
        "tokens": sum(tokens),
    }


def ref_snapshot(ref: str) -> str:
    """A ``PYTHONPATH`` on which strands-tito is the ``git archive`` of ``ref`` (a setting ``LABEL@REF``)."""
    root = Path(__file__).resolve().parents[1]
    snap = Path(tempfile.mkdtemp(prefix="capture_cost-ref-"))
    folders = ("core", "src", "collector", "exporters")
    archive = subprocess.run(["git", "archive", ref, *folders], capture_output=True, check=True, cwd=root)
    subprocess.run(["tar", "-x", "-C", str(snap)], input=archive.stdout, check=True)
    return os.pathsep.join(str(snap / folder) for folder in folders)


@contextlib.contextmanager
def part3_services() -> Iterator[tuple[Path, str, Callable[[dict[str, str]], dict[str, str]]]]:
    """The engine's script, an OTLP sink on 127.0.0.1 (its base URL) and a worker's environment for a setting."""
    script = Path(__file__).resolve().parent / "_engine_script.json"
    call = '<tool_call>\n{"name": "noop", "arguments": {"x": 1}}\n</tool_call>'
    script.write_text(json.dumps({"scripts": [], "default": {"text": call}}))
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sink_base = f"http://127.0.0.1:{server.server_port}"
    # capture/own spools what the sink has not acknowledged yet: in a directory of this run, not the user's cache.
    spool = {"STRANDS_TITO_SPOOL_DIR": tempfile.mkdtemp(prefix="capture_cost-spool-")}
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "STRANDS_TITO_"))}

    snapshots: dict[str, str] = {}

    def environment(extra: dict[str, str]) -> dict[str, str]:
        env = {**clean, **{k: v.replace("{sink}", sink_base) for k, v in extra.items()}, **spool}
        ref = env.pop("BENCH_REF", None)
        if ref is not None:  # strands-tito as it was at that git ref, first on the path
            if ref not in snapshots:
                snapshots[ref] = ref_snapshot(ref)
            env["PYTHONPATH"] = snapshots[ref]
        return env

    try:
        yield script, sink_base, environment
    finally:
        server.shutdown()
        script.unlink(missing_ok=True)


def part3(
    sizes: list[int], calls: int, rounds: int, settings: tuple[tuple[str, dict[str, str]], ...] = SETTINGS
) -> list[dict[str, Any]]:
    rows = []
    with part3_services() as (script, sink_base, environment):
        sink = f"{sink_base}/v1/traces"
        for n in sizes:
            measured: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in settings}
            sent: dict[str, int] = {label: 0 for label, _ in settings}
            for round_ in range(rounds):
                for label, extra in settings if round_ % 2 == 0 else settings[::-1]:
                    engine = qwen3_engine(script)  # fresh: same server state for every worker
                    url = engine.start()
                    try:
                        before = _Sink.received
                        done = subprocess.run(
                            [sys.executable, __file__, "--worker", url, sink, str(n), str(calls)],
                            env=environment(extra),
                            capture_output=True,
                            text=True,
                        )
                        if done.returncode != 0:
                            raise RuntimeError(f"worker {label} failed: {done.stderr[-3000:]}")
                        result = json.loads(done.stdout.strip().splitlines()[-1])
                        # Bytes of the measured episodes only would need a flush marker; the warm-up episode is
                        # one more episode of the same shape, so bytes per call count it too (calls + warm-up).
                        result["bytes"] = _Sink.received - before
                        measured[label].append(result)
                        sent[label] += result["bytes"]
                    finally:
                        engine.stop()
                    print(
                        f"[capture_cost] {n} tokens, {label}: {result['cpu_ms_per_call']:.2f} ms/call", file=sys.stderr
                    )
            row: dict[str, Any] = {"tokens": n}
            for label, _ in settings:
                results = measured[label]
                calls_made = sum(r["calls"] + calls for r in results)  # + the warm-up episode's calls
                row[label] = {
                    "cpu_ms_per_call": statistics.median(r["cpu_ms_per_call"] for r in results),
                    "export_ms_per_call": statistics.median(r["export_ms_per_call"] for r in results),
                    "cpu_ms_per_call_all": [round(r["cpu_ms_per_call"], 3) for r in results],
                    "call_ms": statistics.median(r["per_call_ms"] for r in results),
                    "turn_ms": statistics.median(r["per_turn_ms"] for r in results),
                    "bytes_per_call": sent[label] / calls_made,
                    "token_bytes_per_call": 8 * sum(r["tokens"] for r in results) / sum(r["calls"] for r in results),
                }
            rows.append(row)
    return rows


def qwen3_engine(script: Path) -> Engine:
    """The local engine (Qwen3 tokenizer, 200k context) answering with ``script``, in its own process; not started."""
    return Engine("qwen3", script, 200_000, dict(os.environ))


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
            "A real agent against the local engine (a separate process, fresh for every worker), each setting in its "
            "own fresh process, settings interleaved round by round. *untraced*: no tracer provider; *strands*: an "
            "SDK provider with a BatchSpanProcessor + OTLP/HTTP exporter to a sink on 127.0.0.1, capture off (plain "
            "Strands tracing, which puts the conversation on its spans); *capture*: the same with "
            "`STRANDS_TITO_CAPTURE=1` (token data on the chat spans, conversation text off, the default); "
            f"*capture+content*: capture with `OTEL_SEMCONV_STABILITY_OPT_IN={CONTENT_ON}` (before 2026-11-26: the "
            "deprecated `STRANDS_TITO_SPAN_CONTENT=1`, Strands' older conventions). CPU per call: process CPU (all "
            "threads, so the exporter's encoding and sending is included) over the measured episodes, after a "
            "force-flush, "
            "minus the first call of each episode (which tokenizes the whole prompt), "
            "divided by the other model calls. Span bytes: OTLP/HTTP bodies the sink received per model call "
            "(all spans: "
            "chat, cycle, tool, agent, end signals). Token data: 8 bytes (int32 id + float32 logprob) per trajectory "
            "token, per call.",
            "",
            "| context tokens | setting | CPU ms per call | vs untraced | vs strands | calls per CPU-s "
            "| model call ms (median) | span bytes per call | token data bytes per call | span bytes / token data |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in p3:
            base, strands = r["untraced"]["cpu_ms_per_call"], r["strands"]["cpu_ms_per_call"]
            for label, _ in SETTINGS:
                x = r[label]
                cpu, sent, data = x["cpu_ms_per_call"], x["bytes_per_call"], x["token_bytes_per_call"]
                traced = label != "untraced"
                vs_strands = f"{100 * (cpu - strands) / strands:+.1f}%" if traced else "-"
                ratio = f"{sent / data:.2f}x" if traced else "-"
                lines.append(
                    f"| {r['tokens']:,} | {label} | **{cpu:.2f}** | {100 * (cpu - base) / base:+.1f}% | {vs_strands} "
                    f"| {1000 / cpu:,.0f} | {x['call_ms']:.2f} | {sent:,.0f} | {data:,.0f} | {ratio} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write", type=Path)
    parser.add_argument("--worker", nargs=4)
    parser.add_argument("--part3-only", action="store_true", help="only the real-agent comparison (printed as JSON)")
    parser.add_argument("--sizes", help="part 3 context sizes, comma-separated tokens (default 1024,8192,32768)")
    parser.add_argument("--rounds", type=int, help="part 3 rounds (default 2)")
    parser.add_argument("--candidates", action="store_true", help="part 3 also with other Strands switches")
    parser.add_argument(
        "--settings",
        help="part 3 settings by label, comma-separated, e.g. untraced,strands/switch,capture (default: the four); "
        "LABEL@REF runs a setting with strands-tito at a git ref, e.g. capture/own@main,capture/own",
    )
    args = parser.parse_args()
    if args.worker:
        url, sink, n, calls = args.worker
        print(json.dumps(part3_worker(url, sink, int(n), int(calls))))
        return
    if args.part3_only:
        p3_sizes = [int(x) for x in (args.sizes or "1024,8192,32768").split(",")]
        settings = SETTINGS + CANDIDATES if args.candidates else SETTINGS
        if args.settings:
            known = dict(SETTINGS + CANDIDATES + REFERENCES)
            # LABEL@REF: the setting with strands-tito as it was at a git ref (before/after in one run).
            settings = tuple(
                (
                    label,
                    {
                        **known[label.partition("@")[0]],
                        **({"BENCH_REF": ref} if (ref := label.partition("@")[2]) else {}),
                    },
                )
                for label in args.settings.split(",")
            )
        print(json.dumps(part3(p3_sizes, calls=20, rounds=args.rounds or 2, settings=settings), indent=1))
        return
    sizes = [8_192, 32_768] if args.quick else [8_192, 32_768, 131_072]
    p1 = part1([*sizes, 100_000], repeat=5 if args.quick else 20)
    p2 = part2(sizes)
    p3 = part3(
        [1_024, 8_192] if args.quick else [1_024, 8_192, 32_768],
        calls=10 if args.quick else 20,
        rounds=1 if args.quick else 2,
    )
    text = markdown(p1, p2, p3)
    print(text)
    if args.write:
        existing = args.write.read_text() if args.write.exists() else "# Benchmarks\n\n"
        head, sep, _ = existing.partition("## Trace capture cost")
        args.write.write_text(head.rstrip() + "\n\n" + text if sep else existing.rstrip() + "\n\n" + text)


if __name__ == "__main__":
    main()
