"""The collector's settings: :class:`CollectorConfig`, one field per setting, each declaring its command-line option,
environment fallback, default and meaning (:class:`Option`, in the field's metadata).

``strands-tito collect`` builds its options from these declarations (:mod:`.cli`), so the command and
``CollectorConfig()`` share one set of defaults, and ``docs/settings.md``'s collector table is generated from them
(a test keeps the two equal). The environment is read once, by the command, and only for the two secrets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any

from .ingest import MAX_REQUEST_SPANS, MAX_REQUEST_TOKENS

__all__ = ["CollectorConfig", "Option", "declared_options", "shown_default"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class Option:
    """How ``strands-tito collect`` sets a :class:`CollectorConfig` field."""

    #: The command-line options that set the field (none: only from Python).
    flags: tuple[str, ...]
    meaning: str
    #: The variable read when no option gives the field (the secrets, so that they need not appear in ``ps``).
    environment: str | None = None
    #: The option's text to the field's value, where that is not the field's type (e.g. MiB to bytes).
    read: Callable[[str], Any] | None = None
    #: A value as the option spells it, where that is not ``str(value)`` (the inverse of ``read``).
    show: Callable[[Any], str] | None = None


def _declared(
    flags: str,
    meaning: str,
    *,
    environment: str | None = None,
    read: Callable[[str], Any] | None = None,
    show: Callable[[Any], str] | None = None,
) -> dict[str, Option]:
    """A field's metadata: its :class:`Option` (``flags``: space-separated, ``""`` for none)."""
    return {"option": Option(tuple(flags.split()), meaning, environment, read, show)}


def _mebibytes(text: str) -> int:
    return int(float(text) * MIB)


def _in_mebibytes(value: int) -> str:
    return f"{value / MIB:g}"


def _store_file(directory: str) -> Path:
    return Path(directory) / "collector.db"


def _store_directory(store: Path) -> str:
    return str(store.parent)


@dataclass
class CollectorConfig:
    """Settings of :class:`~strands_tito.collector.Collector`: the fields below, or ``strands-tito collect``'s options
    (``docs/settings.md`` lists both)."""

    store: Path = field(
        default=Path(".strands-tito/collector/collector.db"),
        metadata=_declared(
            "--store", "the store (SQLite, WAL): `collector.db` in the `--store` directory",
            read=_store_file, show=_store_directory,
        ),
    )  # fmt: skip
    outputs: list[str] = field(
        default_factory=lambda: ["jsonl:trajectories.jsonl"],
        metadata=_declared(
            "--jsonl --parquet",
            "where trajectories go: `--jsonl FILE` (default trajectories.jsonl), `--parquet DIR` (also or instead)",
            show=",".join,
        ),
    )
    parquet_rows_per_part: int = field(
        default=1000, metadata=_declared("--parquet-part-rows", "records per Parquet part")
    )
    parquet_linger: float = field(
        default=30.0,
        metadata=_declared(
            "--parquet-linger",
            "seconds a finished trajectory may wait (in the store) for others to share its Parquet part",
        ),
    )
    host: str = field(
        default="127.0.0.1", metadata=_declared("--http", "address the receivers listen on (`--http HOST:PORT`)")
    )
    http_port: int = field(default=4318, metadata=_declared("--http", "OTLP/HTTP port (`--http HOST:PORT`; 0 = any)"))
    grpc_port: int | None = field(
        default=4317, metadata=_declared("--grpc", "OTLP/gRPC port (`--grpc HOST:PORT`; None or `off`: no gRPC)")
    )
    grpc_host: str | None = field(default=None, metadata=_declared("--grpc", "OTLP/gRPC address (None: `host`)"))
    token: str | None = field(
        default=None,
        repr=False,
        metadata=_declared(
            "--token-file --token", "required bearer token (`--token` is visible in ps: prefer the file or variable)",
            environment="STRANDS_TITO_COLLECTOR_TOKEN",
        ),
    )  # fmt: skip
    tls_cert: Path | None = field(
        default=None, metadata=_declared("--tls-cert", "TLS certificate (PEM) for both ports", read=Path)
    )
    tls_key: Path | None = field(default=None, metadata=_declared("--tls-key", "TLS private key (PEM)", read=Path))
    max_body_bytes: int = field(
        default=64 * MIB,
        metadata=_declared(
            "--max-body-mb", "largest request body, compressed (the option: MiB)", read=_mebibytes, show=_in_mebibytes
        ),
    )
    max_decompressed_bytes: int = field(
        default=64 * MIB,
        metadata=_declared(
            "--max-decompressed-mb",
            "largest body after decompression (the option: MiB)",
            read=_mebibytes,
            show=_in_mebibytes,
        ),
    )
    max_inflight: int = field(
        default=64, metadata=_declared("--max-inflight", "requests processed at once before answering 503")
    )
    max_connections: int = field(
        default=0,
        metadata=_declared(
            "--max-connections",
            "HTTP connections held at once (0: the file descriptor limit, raised to its hard limit at start, less a "
            "quarter, at most 65536); when full, the connection idle longest, else the slowest request head, is "
            "answered 503 and closed to make room",
        ),
    )
    max_connections_per_peer: int = field(
        default=0,
        metadata=_declared(
            "--max-connections-per-peer",
            "HTTP connections one client address may hold (0 = no bound); past it, 429 with Retry-After",
        ),
    )
    max_open_trajectories: int = field(
        default=100_000,
        metadata=_declared(
            "--max-open-trajectories", "open trajectories at once; requests starting more get 503 until some finish"
        ),
    )
    max_request_tokens: int = field(
        default=MAX_REQUEST_TOKENS,
        metadata=_declared("--max-request-tokens", "token ids one request may carry; spans past it are refused"),
    )
    max_request_spans: int = field(
        default=MAX_REQUEST_SPANS,
        metadata=_declared("--max-request-spans", "spans one request may carry; those past it are refused unread"),
    )
    max_store_bytes: int = field(
        default=10 * 1024 * MIB,
        metadata=_declared(
            "--max-store-mb", "refuse new data (503) above this store size (the option: MiB)", read=_mebibytes,
            show=_in_mebibytes,
        ),
    )  # fmt: skip
    idle_timeout: float = field(
        default=600.0, metadata=_declared("--idle-timeout", "seconds before an unended trajectory is written")
    )
    batch_size: int = field(default=64, metadata=_declared("", "records per export batch"))
    progress_interval: float = field(
        default=10.0, metadata=_declared("--progress-interval", "seconds between progress lines (0 = off)")
    )
    head_timeout: float = field(
        default=5.0,
        metadata=_declared(
            "--head-timeout",
            "seconds for a complete HTTP request head, from the connection's accept or a later request's first byte "
            "(408 and close after it; a new connection that sent nothing is closed quietly)",
        ),
    )
    keepalive_timeout: float = field(
        default=30.0,
        metadata=_declared("--keepalive-timeout", "seconds an HTTP connection may stay idle between requests"),
    )
    body_timeout: float = field(
        default=60.0, metadata=_declared("--body-timeout", "seconds for an HTTP request body (408 and close after it)")
    )
    shutdown_timeout: float = field(
        default=8.0,
        metadata=_declared(
            "--shutdown-timeout",
            "longest graceful stop in seconds: calls in progress, then export batches; what is left stays in the store",
        ),
    )
    agl_url: str | None = field(
        default=None,
        metadata=_declared(
            "--agl-url", "Agent Lightning server base URL (e.g. http://127.0.0.1:8080): turns its exporter on"
        ),
    )
    agl_key: str | None = field(
        default=None,
        repr=False,
        metadata=_declared(
            "--agl-key-file --agl-key",
            "the Agent Lightning server's key (`--agl-key` is visible in ps: prefer the file or variable)",
            environment="AGL_KEY",
        ),
    )
    agl_ack_timeout: float = field(
        default=8.0,
        metadata=_declared(
            "--agl-ack-timeout",
            "hold an agent's OTLP acknowledgement at most this long until its rollout's events are on the server, so "
            "the rollout's events are complete when the agent exits (keep it below the agent's "
            "OTEL_EXPORTER_OTLP_TIMEOUT, 10 by default; 0 = no holding)",
        ),
    )
    agl_model: str | None = field(
        default=None,
        metadata=_declared("--agl-model", "model name to report in the events (default: the agent model's model_id)"),
    )


def declared_options() -> Iterator[tuple[Field[Any], Option]]:
    """Every :class:`CollectorConfig` field with its declaration, in the class's order."""
    for item in fields(CollectorConfig):
        yield item, item.metadata["option"]


def shown_default(item: Field[Any], option: Option) -> str:
    """``item``'s default as the command spells it (``""``: none)."""
    factory = item.default_factory
    default = item.default if factory is MISSING else factory()
    if default is None:
        return ""
    if option.show is not None:
        return option.show(default)
    return f"{default:g}" if isinstance(default, float) else str(default)
