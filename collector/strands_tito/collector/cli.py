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
from pathlib import Path

from strands_tito.exporters import ExporterConfigError

from .config import CollectorConfig, Option, declared_options, shown_default
from .service import BindError, serve
from .store import StoreError

#: The fields the command reads from options of its own (an address gives two fields; outputs and secrets come from
#: several options); every other field's option is built from its declaration in :class:`CollectorConfig`.
OWN_FIELDS = frozenset({"host", "http_port", "grpc_host", "grpc_port", "outputs", "token", "agl_key"})
#: The command's options that set no field.
COMMAND_ONLY = frozenset({"--allow-no-token", "--log-level"})
_OPTIONS = {item.name: option for item, option in declared_options()}
TOKEN_ENV = _OPTIONS["token"].environment


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
    """The collector's options: its own, then one per declared :class:`CollectorConfig` field (:func:`parse_args`
    checks how they combine)."""
    p = _Parser(prog=prog, description="Receive OTLP spans, write trajectories.")
    defaults = CollectorConfig()
    http = f"{defaults.host}:{defaults.http_port}"
    grpc = f"{defaults.grpc_host or defaults.host}:{defaults.grpc_port}"
    p.add_argument("--http", default=http, help=f"OTLP/HTTP address (default {http}; port 0 = any)")
    p.add_argument("--grpc", default=grpc, help=f"OTLP/gRPC address (default {grpc}; 'off' = none)")
    p.add_argument("--jsonl", type=Path, help="write trajectories to this JSONL file (default trajectories.jsonl)")
    p.add_argument("--parquet", type=Path, help="also (or instead) write Parquet parts into this directory")
    p.add_argument(
        "--token-file", type=Path, help=f"file holding the required bearer token (or set ${TOKEN_ENV}; not --token)"
    )
    p.add_argument("--token", help=f"required bearer token (visible in ps: prefer --token-file or ${TOKEN_ENV})")
    p.add_argument(
        "--allow-no-token",
        action="store_true",
        help="listen on a non-loopback address without a bearer token (anyone who reaches it can send spans)",
    )
    agl = p.add_argument_group("Agent Lightning", "post each model call of a rollout's trajectories as events")
    agl.add_argument("--agl-key-file", type=Path, help="file holding the server's key (or set $AGL_KEY)")
    agl.add_argument("--agl-key", help="the server's key (visible in ps: prefer --agl-key-file or $AGL_KEY)")
    for item, option in declared_options():
        if item.name in OWN_FIELDS or not option.flags:
            continue
        shown = shown_default(item, option)
        (agl if item.name.startswith("agl_") else p).add_argument(
            *option.flags,
            dest=item.name,
            metavar=option.flags[0].lstrip("-").replace("-", "_").upper(),
            type=option.read or (str if item.default is None else type(item.default)),
            default=item.default,
            help=f"{option.meaning} (default {shown})" if shown else option.meaning,
        )
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def options_table() -> str:
    """Every :class:`CollectorConfig` field with its options, environment fallback, default and meaning, then the
    command's own options, as the Markdown table in ``docs/settings.md`` (a test keeps the two equal)."""
    rows = ["| setting | option | environment | default | meaning |", "|---|---|---|---|---|"]
    for item, option in declared_options():
        flags = ", ".join(f"`{flag}`" for flag in option.flags) or "(Python only)"
        environment = f"`{option.environment}`" if option.environment else ""
        shown = shown_default(item, option)
        rows.append(
            f"| `{item.name}` | {flags} | {environment} | {f'`{shown}`' if shown else ''} | {_cell(option.meaning)} |"
        )
    for action in _parser().options():
        if action.option_strings[0] in COMMAND_ONLY:
            default = f"`{action.default}`" if action.default not in (None, False) else ""
            rows.append(f"| (command only) | `{action.option_strings[0]}` | | {default} | {_cell(action.help or '')} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def parse_args(argv: list[str], prog: str = "strands-tito collect") -> CollectorConfig:
    """Command-line options to a :class:`CollectorConfig` (``prog``: the command's name in usage and errors)."""
    p = _parser(prog)
    a = p.parse_args(argv)
    _check_ranges(p, a, argv)
    token = _secret(p, a.token, a.token_file, "--token", _OPTIONS["token"])
    agl_key = _secret(p, a.agl_key, a.agl_key_file, "--agl-key", _OPTIONS["agl_key"])
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
        **{name: getattr(a, name) for name, option in _OPTIONS.items() if name not in OWN_FIELDS and option.flags},
        host=host,
        http_port=http_port,
        grpc_host=None if grpc_host == host else grpc_host,  # None: the HTTP host, as in CollectorConfig()
        grpc_port=grpc_port,
        outputs=outputs,
        token=token,
        agl_key=agl_key,
    )


def _check_ranges(p: argparse.ArgumentParser, a: argparse.Namespace, argv: list[str]) -> None:
    """Options that go together, and numbers in range."""
    if (a.tls_cert is None) != (a.tls_key is None):
        p.error("--tls-cert and --tls-key go together")
    if a.agl_url is None and (a.agl_model is not None or any(x.startswith("--agl-key") for x in argv)):
        p.error("--agl-key and --agl-model need --agl-url")
    if a.agl_ack_timeout < 0:
        p.error("--agl-ack-timeout must be >= 0")
    if min(a.max_open_trajectories, a.max_request_tokens, a.max_request_spans) < 1:
        p.error("--max-open-trajectories, --max-request-tokens and --max-request-spans must be >= 1")
    if min(a.max_connections, a.max_connections_per_peer) < 0:
        p.error("--max-connections and --max-connections-per-peer must be >= 0 (0: see --help)")
    if a.parquet_rows_per_part < 1 or a.parquet_linger < 0:
        p.error("--parquet-part-rows must be >= 1 and --parquet-linger >= 0")
    if min(a.head_timeout, a.keepalive_timeout, a.body_timeout, a.shutdown_timeout) <= 0:
        p.error("--head-timeout, --keepalive-timeout, --body-timeout and --shutdown-timeout must be > 0")


def _secret(
    p: argparse.ArgumentParser, given: str | None, path: Path | None, option: str, declared: Option
) -> str | None:
    """A secret from ``OPTION-file``, ``OPTION`` or the declared environment variable (one source; never echoed)."""
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
    return os.environ.get(declared.environment or "") or None


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
