"""OTLP/HTTP receiver throughput: the collector's h11 receiver vs the hand-written parser it replaced.

Both servers run the same handler work (the collector's real accept path: limits, decode of the OTLP body, a
no-op ingest), so the difference is the HTTP/1.1 layer. Each server runs in its own process; the load comes from
this process: ``--connections`` keep-alive connections, each posting one request after the other, for ``--seconds``
per body size. Prints a Markdown table (requests/s and MB/s of request bodies).

    python benchmarks/http_receiver.py --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import time
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

SIZES = {"1 KiB": 1024, "64 KiB": 64 * 1024, "1 MiB": 1024 * 1024}


def otlp_body(size: int) -> bytes:
    """One span (not a strands-tito one: the no-op ingest ignores it) whose attribute makes the body ``size``."""
    span = Span(name="chat", trace_id=os.urandom(16), span_id=os.urandom(8))
    span.attributes.append(KeyValue(key="x", value=AnyValue(bytes_value=os.urandom(max(size - 60, 0)))))
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
    return request.SerializeToString()


def serve(kind: str, ready: Any) -> None:
    """Run one server until killed; sends its port through ``ready``."""
    from strands_tito.collector.accept import AcceptPath, Limits
    from strands_tito.collector.ingest import IngestResult
    from strands_tito.collector.telemetry import Metrics

    async def main() -> None:
        async def hold(result: IngestResult) -> None:
            return None

        limits = Limits(None, 64 << 20, 256 << 20, 1 << 20, 1 << 62)
        accept = AcceptPath(limits, lambda request: IngestResult(), lambda: 0, hold, Metrics())
        if kind == "h11":
            from strands_tito.collector.receivers.http import HttpReceiver

            receiver = HttpReceiver(accept, dict, str, max_body=64 << 20, head_timeout=30, body_timeout=60)
            port = await receiver.start("127.0.0.1", 0, None)
        else:
            from strands_tito.collector.accept import Submission
            from strands_tito.testing.http_server import HttpServer, Request, Response

            async def handle(request: Request, connection: Any) -> Response:
                outcome = await accept.accept(
                    Submission("http", request.body, content_type=request.header("content-type") or "")
                )
                return Response(200, outcome.response().SerializeToString(), "application/x-protobuf")

            server = HttpServer(handle, max_body=64 << 20, head_timeout=30, body_timeout=60)
            _, port = await server.start("127.0.0.1", 0)
        ready.send(port)
        await asyncio.Event().wait()

    asyncio.run(main())


async def load(port: int, body: bytes, connections: int, seconds: float) -> int:
    """Requests answered 200 in ``seconds`` over ``connections`` keep-alive connections."""
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    deadline = time.monotonic() + seconds
    done = 0

    async def one() -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while time.monotonic() < deadline:
            writer.write(head + body)
            await writer.drain()
            status = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            assert status.startswith(b"HTTP/1.1 200"), status
            done += 1
        writer.close()

    await asyncio.gather(*(one() for _ in range(connections)))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    rows = []
    for kind in ("hand-written", "h11"):
        receive, send = multiprocessing.Pipe(duplex=False)
        process = multiprocessing.Process(target=serve, args=(kind, send), daemon=True)
        process.start()
        port = receive.recv()
        try:
            for label, size in SIZES.items():
                body = otlp_body(size)
                asyncio.run(load(port, body, args.connections, 0.5))  # warm-up
                count = asyncio.run(load(port, body, args.connections, args.seconds))
                rate = count / args.seconds
                rows.append((label, kind, rate, rate * len(body) / 1e6))
        finally:
            process.kill()
            process.join()
    print(f"| body | parser | requests/s | MB/s | ({args.connections} connections, {args.seconds:g} s each) |")
    print("|---|---|---|---|---|")
    for label, kind, rate, mbps in sorted(rows, key=lambda r: (SIZES[r[0]], r[1])):
        print(f"| {label} | {kind} | {rate:,.0f} | {mbps:,.1f} | |")


if __name__ == "__main__":
    main()
