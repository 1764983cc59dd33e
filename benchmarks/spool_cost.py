"""Capture-path cost of the OTLP spool: spool idle vs the SDK's BatchSpanProcessor, and under back-pressure.

    python benchmarks/spool_cost.py [--turns 3000] [--tokens 2048]

Each turn is a real SDK ``chat`` span carrying one turn's packed token data (``--tokens`` new tokens: prompt 3/4,
output 1/4) plus a Strands-like message event, ended through a real ``TracerProvider`` whose only processor is the
one under test, exporting with the real OTLP/HTTP exporter to 127.0.0.1:

* ``collector up``: a sink that acknowledges every request at once;
* ``collector paused``: a socket that listens but never accepts (what a SIGSTOP'd collector looks like), with
  ``OTEL_EXPORTER_OTLP_TIMEOUT=2``.

Columns: ``span.end()`` latency on the agent's thread (median and p99, microseconds), CPU of the whole process per
turn (all threads: encoding, exporting, spooling), turns delivered / written to the disk spool / lost (neither
delivered nor kept), and the wall time of the exit flush (bounded at 5 s when paused).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ["OTEL_EXPORTER_OTLP_TIMEOUT"] = "2"

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from strands_tito import spans as schema
from strands_tito.capture.spool import Spool
from strands_tito.capture.spool_processor import SpoolingSpanProcessor
from strands_tito.otlp import iter_spans, parse_request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _machine import describe


class _Sink(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.turns = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    server: _Sink

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        turns = sum(1 for s in iter_spans(parse_request(body)) if s.name == "chat")
        with self.server.lock:
            self.server.turns += turns
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def turn_attributes(k: int, tokens: int) -> dict[str, Any]:
    prompt, output = tokens * 3 // 4, tokens // 4
    return schema.turn_attributes(
        f"{k // 10:032x}",
        k % 10,
        0,
        0,
        list(range(prompt)),
        [None] * prompt,
        list(range(output)),
        [-0.5] * output,
        finish_reason="stop",
    )


def run(kind: str, paused: bool, turns: int, tokens: int, spool_root: Path) -> dict[str, Any]:
    sink: _Sink | None = None
    if paused:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1024)  # never accepted
        endpoint = f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces"
    else:
        sink = _Sink()
        endpoint = f"http://127.0.0.1:{sink.server_port}/v1/traces"
    exporter = OTLPSpanExporter(endpoint=endpoint)
    processor: SpanProcessor
    if kind == "BatchSpanProcessor":
        processor = BatchSpanProcessor(exporter)
    else:
        processor = SpoolingSpanProcessor(exporter, Spool(spool_root / f"{kind}-{paused}"))
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    payloads = [turn_attributes(k, tokens) for k in range(turns)]
    message = "x" * 2000
    latencies = []
    cpu0 = time.process_time()
    for attributes in payloads:
        span = tracer.start_span("chat", attributes=attributes)
        span.add_event("gen_ai.choice", {"message": message})
        start = time.perf_counter()
        span.end()
        latencies.append((time.perf_counter() - start) * 1e6)
    wall0 = time.monotonic()
    processor.force_flush(5000 if paused else 120_000)
    flush_wall = time.monotonic() - wall0
    cpu = (time.process_time() - cpu0) / turns * 1e6
    spilled = getattr(processor, "spilled", 0)
    dropped = getattr(processor, "dropped", 0)
    delivered = sink.turns if sink is not None else 0
    if kind == "BatchSpanProcessor":
        dropped = turns - delivered  # no persistence: whatever was not delivered by now is gone
    threading.Thread(target=provider.shutdown, daemon=True).start()  # the BSP's shutdown may wait out its timeout
    if sink is not None:
        sink.shutdown()
    return {
        "path": kind,
        "collector": "paused" if paused else "up",
        "end_p50": statistics.median(latencies),
        "end_p99": sorted(latencies)[int(0.99 * len(latencies))],
        "cpu": cpu,
        "delivered": delivered,
        "spilled": spilled,
        "dropped": dropped,
        "flush": flush_wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=2048)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for paused in (False, True):
            for kind in ("BatchSpanProcessor", "spool"):
                rows.append(run(kind, paused, args.turns, args.tokens, Path(tmp)))
    print(f"machine: {describe()}; {args.turns} turns of {args.tokens} new tokens (packed)")
    print()
    header = "| path | collector | span.end() p50 µs | p99 µs | CPU per turn µs | delivered | to disk | lost "
    header += "| exit flush s |"
    print(header)
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['path']} | {r['collector']} | {r['end_p50']:.1f} | {r['end_p99']:.1f} | {r['cpu']:.0f} | "
            f"{r['delivered']} | {r['spilled']} | {r['dropped']} | {r['flush']:.2f} |"
        )


if __name__ == "__main__":
    main()
