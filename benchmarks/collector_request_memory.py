"""Peak memory of the collector for one small request that decompresses to many tokens (the worst case per byte).

    python benchmarks/collector_request_memory.py [--tokens 1048575 8000000 ...] [-- COLLECTOR FLAGS...]

For each size, a fresh collector process (``strands-tito collect`` on 127.0.0.1, JSONL output) gets one gzip OTLP
request holding a whole one-turn trajectory: a prompt of ``tokens`` zero ids (zeros compress to almost nothing, so
a few KiB on the wire) plus its end signal (a refused turn leaves a 200 with partial success). The table gives the
HTTP status, the body sizes and the growth of the process's peak RSS (``VmHWM``) from idle to after the request was
answered and its record written.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import httpx
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.helpers
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import describe

from strands_tito import spans
from tests.helpers.otlp import make_request, make_span

PB = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}


def body_of(tokens: int) -> tuple[bytes, int]:
    """A gzip OTLP request: one turn of ``tokens`` prompt ids and one output id, then the end signal."""
    prompt = bytes(4 * tokens)
    output = (1).to_bytes(4, "little")
    trajectory_id = f"mem-{tokens}"
    turn = spans.turn_attributes(
        trajectory_id, 0, 0, 0, prompt, bytes(4 * tokens), output, b"\x00\x00\x00\x00", finish_reason="stop"
    )
    end = {
        spans.SCHEMA: spans.SCHEMA_VERSION,
        spans.KIND: "end",
        spans.TRAJECTORY_ID: trajectory_id,
        spans.END_REASON: "done",
        spans.END_TURNS: 1,
        spans.END_LENGTH: tokens + 1,
        spans.END_CRC32: zlib.crc32(output, zlib.crc32(prompt)),
    }
    request = make_request(
        [make_span("chat", {"gen_ai.operation.name": "chat", **turn}), make_span(spans.SPAN_END, end)]
    )
    raw = request.SerializeToString()
    return gzip.compress(raw, 9), len(raw)


def peak_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]


def measure(tokens: int, extra: list[str]) -> dict[str, object]:
    body, raw_size = body_of(tokens)
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "out.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-m", "strands_tito.cli", "collect", "--http", "127.0.0.1:0", "--grpc", "off",
             "--store", f"{work}/store", "--jsonl", str(out), "--progress-interval", "0", "--log-level", "ERROR",
             *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            port = None
            while port is None:
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError(proc.communicate()[1][-2000:])
                if match := re.search(r"listening on http://[\d.]+:(\d+)", line):
                    port = int(match.group(1))
            time.sleep(0.5)
            idle = peak_kib(proc.pid)
            response = httpx.post(f"http://127.0.0.1:{port}/v1/traces", content=body, headers=PB, timeout=600)
            refused = ExportTraceServiceResponse.FromString(response.content).partial_success.rejected_spans
            deadline = time.monotonic() + 600
            while response.status_code == 200 and not refused and time.monotonic() < deadline:
                if out.exists() and out.read_bytes().endswith(b"\n"):
                    break
                time.sleep(0.2)
            peak = peak_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(60)
    return {
        "tokens": tokens,
        "gzip_kib": len(body) / 1024,
        "decompressed_mib": raw_size / 2**20,
        "status": response.status_code,
        "growth_mib": (peak - idle) / 1024,
        "message": response.text[:120] if response.status_code != 200 else ("turn span refused" if refused else ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1_000_000, 2_000_000, 4_000_000, 8_000_000])
    args, extra = parser.parse_known_args()
    extra = [e for e in extra if e != "--"]
    print(describe())
    print(f"collector flags: {' '.join(extra) or '(defaults)'}\n")
    print("| tokens | gzip KiB | decompressed MiB | status | peak RSS growth MiB |")
    print("|---|---|---|---|---|")
    for tokens in args.tokens:
        row = measure(tokens, extra)
        print(
            f"| {row['tokens']:,} | {row['gzip_kib']:.0f} | {row['decompressed_mib']:.1f} | {row['status']} "
            f"| {row['growth_mib']:.0f} |" + (f" {row['message']}" if row["message"] else ""),
            flush=True,
        )


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
