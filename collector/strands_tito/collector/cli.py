"""Run the collector: ``strands-tito-collector`` (this distribution's command), ``python -m strands_tito.collector``,
or ``strands-tito collect`` in the full install; the same options in each."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from strands_tito.exporters import ExporterConfigError

from .ingest import MAX_REQUEST_TOKENS
from .service import BindError, CollectorConfig, serve
from .store import StoreError


@dataclass(frozen=True)
class EnvironmentFallback:
    """An option the environment may give instead: a secret, so that it need not appear in ``ps``."""

    option: str
    variable: str


#: Every environment variable the collector reads (read once, by :func:`parse_args`, into :class:`CollectorConfig`).
TOKEN = EnvironmentFallback("--token", "STRANDS_TITO_COLLECTOR_TOKEN")
AGL_KEY = EnvironmentFallback("--agl-key", "AGL_KEY")
ENVIRONMENT_FALLBACKS = (TOKEN, AGL_KEY)
TOKEN_ENV = TOKEN.variable


def _address(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{option} wants HOST:PORT, got {value!r}")
    return host or "127.0.0.1", int(port)


class _Parser(argparse.ArgumentParser):
    def options(self) -> list[argparse.Action]:
        """The options as declared, ``--help`` aside (argparse has no public list; ``_actions`` is stable since 2.7)."""
        return [a for a in self._actions if a.option_strings and a.dest != "help"]


def _parser(prog: str = "strands-tito collect") -> _Parser:
    """The collector's options (a declaration list; :func:`parse_args` checks how they combine)."""
    p = _Parser(prog=prog, description="Receive OTLP spans, write trajectories.")
    p.add_argument("--http", default="127.0.0.1:4318", help="OTLP/HTTP address (default 127.0.0.1:4318; port 0 = any)")
    p.add_argument("--grpc", default="127.0.0.1:4317", help="OTLP/gRPC address (default 127.0.0.1:4317; 'off' = none)")
    p.add_argument("--store", type=Path, default=Path(".strands-tito/collector"), help="store directory (SQLite, WAL)")
    p.add_argument("--jsonl", type=Path, help="write trajectories to this JSONL file (default trajectories.jsonl)")
    p.add_argument("--parquet", type=Path, help="also (or instead) write Parquet parts into this directory")
    p.add_argument("--parquet-part-rows", type=int, default=1000, help="records per Parquet part (default 1000)")
    p.add_argument(
        "--parquet-linger",
        type=float,
        default=30,
        help="seconds a finished trajectory may wait (in the store) for others to share its Parquet part (default 30)",
    )
    p.add_argument(
        "--token-file", type=Path, help=f"file holding the required bearer token (or set ${TOKEN_ENV}; not --token)"
    )
    p.add_argument("--token", help=f"required bearer token (visible in ps: prefer --token-file or ${TOKEN_ENV})")
    p.add_argument(
        "--allow-no-token",
        action="store_true",
        help="listen on a non-loopback address without a bearer token (anyone who reaches it can send spans)",
    )
    p.add_argument("--tls-cert", type=Path, help="TLS certificate (PEM) for both ports")
    p.add_argument("--tls-key", type=Path, help="TLS private key (PEM)")
    p.add_argument("--idle-timeout", type=float, default=600, help="seconds before an unended trajectory is written")
    p.add_argument("--max-body-mb", type=float, default=64, help="largest request body, compressed (default 64)")
    p.add_argument(
        "--max-decompressed-mb", type=float, default=64, help="largest body after decompression (default 64)"
    )
    p.add_argument("--max-store-mb", type=float, default=10240, help="refuse new data (503) above this store size")
    p.add_argument("--max-inflight", type=int, default=64, help="requests processed at once before answering 503")
    p.add_argument(
        "--max-open-trajectories",
        type=int,
        default=100_000,
        help="open trajectories at once; requests starting more get 503 until some finish (default 100000)",
    )
    p.add_argument(
        "--max-request-tokens",
        type=int,
        default=MAX_REQUEST_TOKENS,
        help=f"token ids one request may carry; spans past it are refused (default {MAX_REQUEST_TOKENS})",
    )
    p.add_argument(
        "--max-connections", type=int, default=256, help="HTTP connections at once; more get 503 (default 256)"
    )
    p.add_argument("--progress-interval", type=float, default=10, help="seconds between progress lines (0 = off)")
    p.add_argument("--head-timeout", type=float, default=30, help="seconds for an HTTP request head (default 30)")
    p.add_argument("--body-timeout", type=float, default=60, help="seconds for an HTTP request body (default 60)")
    p.add_argument("--shutdown-timeout", type=float, default=8, help="longest graceful stop in seconds (default 8)")
    agl = p.add_argument_group("Agent Lightning", "post each model call of a rollout's trajectories as events")
    agl.add_argument("--agl-url", help="Agent Lightning server base URL (e.g. http://127.0.0.1:8080): turns it on")
    agl.add_argument("--agl-key-file", type=Path, help="file holding the server's key (or set $AGL_KEY)")
    agl.add_argument("--agl-key", help="the server's key (visible in ps: prefer --agl-key-file or $AGL_KEY)")
    agl.add_argument(
        "--agl-ack-timeout",
        type=float,
        default=8.0,
        help="hold an agent's OTLP acknowledgement at most this long until its rollout's events are on the server, "
        "so the rollout's events are complete when the agent exits (default 8; keep it below the agent's "
        "OTEL_EXPORTER_OTLP_TIMEOUT, 10 by default; 0 = no holding)",
    )
    agl.add_argument("--agl-model", help="model name to report in the events (default: the agent model's model_id)")
    p.add_argument("--log-level", default="INFO")
    return p


def options_table() -> str:
    """Every option of ``strands-tito collect`` with its environment fallback, default and meaning, as the Markdown
    table in ``docs/settings.md`` (a test keeps the two equal)."""
    fallbacks = {f.option: f"`{f.variable}`" for f in ENVIRONMENT_FALLBACKS}
    rows = ["| option | environment | default | meaning |", "|---|---|---|---|"]
    for action in _parser().options():
        option = max(action.option_strings, key=len)
        default = "" if action.default in (None, False) else f"`{action.default}`"
        meaning = (action.help or "").replace("|", "\\|")
        rows.append(f"| `{option}` | {fallbacks.get(option, '')} | {default} | {meaning} |")
    return "\n".join(rows)


def parse_args(argv: list[str], prog: str = "strands-tito collect") -> CollectorConfig:
    """Command-line options to a :class:`CollectorConfig` (``prog``: the command's name in usage and errors)."""
    p = _parser(prog)
    a = p.parse_args(argv)
    _check_ranges(p, a, argv)
    token = _secret(p, a.token, a.token_file, TOKEN)
    agl_key = _secret(p, a.agl_key, a.agl_key_file, AGL_KEY)
    try:
        host, http_port = _address(a.http, "--http")
        grpc_host, grpc_port = (None, None) if a.grpc == "off" else _address(a.grpc, "--grpc")
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    exposed = [h for h in (host, grpc_host) if h is not None and not _loopback(h)]
    if exposed and token is None and not a.allow_no_token:
        p.error(
            f"{exposed[0]} is reachable from other machines and no token is set: give --token-file (or "
            f"${TOKEN_ENV}), or pass --allow-no-token to accept spans from anyone who reaches it"
        )
    outputs = []
    if a.jsonl is not None or a.parquet is None:
        outputs.append(f"jsonl:{a.jsonl or Path('trajectories.jsonl')}")
    if a.parquet is not None:
        outputs.append(f"parquet:{a.parquet}")
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # not a line per request
    return CollectorConfig(
        store=a.store / "collector.db",
        outputs=outputs,
        parquet_rows_per_part=a.parquet_part_rows,
        parquet_linger=a.parquet_linger,
        host=host,
        http_port=http_port,
        grpc_host=grpc_host,
        grpc_port=grpc_port,
        token=token,
        tls_cert=a.tls_cert,
        tls_key=a.tls_key,
        max_body_bytes=int(a.max_body_mb * 1024 * 1024),
        max_decompressed_bytes=int(a.max_decompressed_mb * 1024 * 1024),
        max_store_bytes=int(a.max_store_mb * 1024 * 1024),
        max_inflight=a.max_inflight,
        max_connections=a.max_connections,
        max_open_trajectories=a.max_open_trajectories,
        max_request_tokens=a.max_request_tokens,
        idle_timeout=a.idle_timeout,
        progress_interval=a.progress_interval,
        head_timeout=a.head_timeout,
        body_timeout=a.body_timeout,
        shutdown_timeout=a.shutdown_timeout,
        agl_url=a.agl_url,
        agl_key=agl_key,
        agl_ack_timeout=a.agl_ack_timeout,
        agl_model=a.agl_model,
    )


def _check_ranges(p: argparse.ArgumentParser, a: argparse.Namespace, argv: list[str]) -> None:
    """Options that go together, and numbers in range."""
    if (a.tls_cert is None) != (a.tls_key is None):
        p.error("--tls-cert and --tls-key go together")
    if a.agl_url is None and (a.agl_model is not None or any(x.startswith("--agl-key") for x in argv)):
        p.error("--agl-key and --agl-model need --agl-url")
    if a.agl_ack_timeout < 0:
        p.error("--agl-ack-timeout must be >= 0")
    if min(a.max_connections, a.max_open_trajectories, a.max_request_tokens) < 1:
        p.error("--max-connections, --max-open-trajectories and --max-request-tokens must be >= 1")
    if a.parquet_part_rows < 1 or a.parquet_linger < 0:
        p.error("--parquet-part-rows must be >= 1 and --parquet-linger >= 0")
    if min(a.head_timeout, a.body_timeout, a.shutdown_timeout) <= 0:
        p.error("--head-timeout, --body-timeout and --shutdown-timeout must be > 0")


def _secret(
    p: argparse.ArgumentParser, given: str | None, path: Path | None, fallback: EnvironmentFallback
) -> str | None:
    """A secret from ``OPTION-file``, ``OPTION`` or the environment (one source; never echoed)."""
    option = fallback.option
    if given is not None and path is not None:
        p.error(f"{option} and {option}-file exclude each other")
    if path is not None:
        try:
            secret = path.read_text().strip()
        except OSError as e:
            p.error(f"{option}-file {path}: {e.strerror or e}")
        if not secret:
            p.error(f"{option}-file {path} is empty")
        return secret
    if given is not None:
        logging.getLogger(__name__).warning("%s is visible to other users in ps; prefer %s-file", option, option)
        return given
    return os.environ.get(fallback.variable) or None


def _loopback(host: str) -> bool:
    """Whether only this machine can reach ``host`` (a loopback address or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def collect_main(argv: list[str], prog: str = "strands-tito collect") -> int:
    """Run until SIGINT/SIGTERM, then shut down gracefully (exit 0); 1 when an address cannot be bound or another
    collector has the store or it cannot be opened."""
    config = parse_args(argv, prog)

    async def run() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            if task is not None:
                loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(config)

    try:
        asyncio.run(run())
    except ExporterConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr, flush=True)
        return 2
    except (BindError, StoreError) as e:
        print(f"{prog}: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


def main() -> None:
    """The ``strands-tito-collector`` command, which the collector distribution installs."""
    sys.exit(collect_main(sys.argv[1:], "strands-tito-collector"))
