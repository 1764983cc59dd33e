"""``strands-tito collect``: run the collector."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from pathlib import Path

from .service import CollectorConfig, serve


def _address(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{option} wants HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


def parse_args(argv: list[str]) -> CollectorConfig:
    """Command-line options to a :class:`CollectorConfig`."""
    p = argparse.ArgumentParser(prog="strands-tito collect", description="Receive OTLP spans, write trajectories.")
    p.add_argument("--http", default="127.0.0.1:4318", help="OTLP/HTTP address (default 127.0.0.1:4318; port 0 = any)")
    p.add_argument("--grpc", default="127.0.0.1:4317", help="OTLP/gRPC address (default 127.0.0.1:4317; 'off' = none)")
    p.add_argument("--store", type=Path, default=Path(".strands-tito/collector"), help="store directory (SQLite, WAL)")
    p.add_argument("--jsonl", type=Path, help="write trajectories to this JSONL file (default trajectories.jsonl)")
    p.add_argument("--parquet", type=Path, help="also (or instead) write Parquet parts into this directory")
    p.add_argument("--token", default=os.environ.get("STRANDS_TITO_COLLECTOR_TOKEN"), help="required bearer token")
    p.add_argument("--tls-cert", type=Path, help="TLS certificate (PEM) for both ports")
    p.add_argument("--tls-key", type=Path, help="TLS private key (PEM)")
    p.add_argument("--idle-timeout", type=float, default=600, help="seconds before an unended trajectory is written")
    p.add_argument("--max-body-mb", type=float, default=64, help="largest request body, compressed (default 64)")
    p.add_argument("--max-decompressed-mb", type=float, default=256, help="largest body after decompression")
    p.add_argument("--max-store-mb", type=float, default=10240, help="refuse new data (503) above this store size")
    p.add_argument("--max-inflight", type=int, default=64, help="requests processed at once before answering 503")
    p.add_argument("--progress-interval", type=float, default=10, help="seconds between progress lines (0 = off)")
    p.add_argument("--log-level", default="INFO")
    a = p.parse_args(argv)
    if (a.tls_cert is None) != (a.tls_key is None):
        p.error("--tls-cert and --tls-key go together")
    try:
        host, http_port = _address(a.http, "--http")
        grpc_host, grpc_port = (None, None) if a.grpc == "off" else _address(a.grpc, "--grpc")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    outputs = []
    if a.jsonl is not None or a.parquet is None:
        outputs.append(f"jsonl:{a.jsonl or Path('trajectories.jsonl')}")
    if a.parquet is not None:
        outputs.append(f"parquet:{a.parquet}")
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    return CollectorConfig(
        store=a.store / "collector.db",
        outputs=outputs,
        host=host,
        http_port=http_port,
        grpc_host=grpc_host,
        grpc_port=grpc_port,
        token=a.token,
        tls_cert=a.tls_cert,
        tls_key=a.tls_key,
        max_body_bytes=int(a.max_body_mb * 1024 * 1024),
        max_decompressed_bytes=int(a.max_decompressed_mb * 1024 * 1024),
        max_store_bytes=int(a.max_store_mb * 1024 * 1024),
        max_inflight=a.max_inflight,
        idle_timeout=a.idle_timeout,
        progress_interval=a.progress_interval,
    )


def collect_main(argv: list[str]) -> int:
    """Run until SIGINT/SIGTERM, then shut down gracefully."""
    config = parse_args(argv)

    async def run() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            if task is not None:
                loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(config)

    asyncio.run(run())
    return 0
