"""Say once, within seconds, that the OTLP endpoint capture sends to cannot be reached.

Without this, a mistyped collector address shows only as the OTLP exporter's retry warnings, repeated for every
batch, and a wait at exit; the spans are safe in the spool, but nothing says where or how to get them out. When
capture starts exporting, a background thread opens one TCP connection to the endpoint. If that fails, one line on
stderr names the endpoint, the reason and the spool, the exporter's own retry warnings are silenced (the spool keeps
retrying quietly), and the exit flush does not wait for an endpoint that still refuses connections.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from strands_tito.upstream.opentelemetry_sdk import BATCH_EXPORT_LOGGER

__all__ = ["endpoint_answers", "endpoint_unreachable", "report_unreachable_endpoint", "watch_endpoint"]

#: Loggers of the OTLP exporters whose per-retry warnings repeat what the one line already said.
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    BATCH_EXPORT_LOGGER,
)
_CONNECT_TIMEOUT = 3.0

_state: dict[str, object] = {"unreachable": False, "endpoint": None, "protocol": "http/protobuf"}


class _WhileUnreachable(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not _state["unreachable"]


def _address(endpoint: str, protocol: str) -> tuple[str, int]:
    parts = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
    default_port = 4317 if protocol == "grpc" else 4318
    if parts.port is None and parts.scheme in ("http", "https") and "://" in endpoint:
        default_port = 443 if parts.scheme == "https" else 80
    return parts.hostname or "localhost", parts.port or default_port


def endpoint_answers(endpoint: str, protocol: str = "http/protobuf", timeout: float = _CONNECT_TIMEOUT) -> str | None:
    """None when a TCP connection to the endpoint opens, else the reason it does not."""
    host, port = _address(endpoint, protocol)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as error:
        return error.strerror or type(error).__name__


def endpoint_unreachable() -> bool:
    """Whether the endpoint was found unreachable and still refuses a connection now (checked again, briefly)."""
    endpoint = _state["endpoint"]
    if not _state["unreachable"] or not isinstance(endpoint, str):
        return False
    return endpoint_answers(endpoint, str(_state["protocol"]), timeout=0.5) is not None


def report_unreachable_endpoint(endpoint: str, reason: str, spool_dir: Path) -> None:
    """The one line, and quiet exporter loggers from now on."""
    sys.stderr.write(
        f"strands-tito: cannot reach the OTLP endpoint {endpoint} ({reason}); trajectories are kept in the spool "
        f"{spool_dir} and sent when it answers (`strands-tito spool list` shows them, `strands-tito spool resend "
        "--endpoint URL` sends them elsewhere)\n"
    )
    sys.stderr.flush()
    _state["unreachable"] = True
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _WhileUnreachable) for f in logger.filters):
            logger.addFilter(_WhileUnreachable())


def watch_endpoint(endpoint: str, protocol: str, spool_dir: Path) -> threading.Thread:
    """Check the endpoint in the background and report it once if it cannot be reached."""
    _state["endpoint"], _state["protocol"] = endpoint, protocol

    def check() -> None:
        reason = endpoint_answers(endpoint, protocol)
        if reason is not None:
            report_unreachable_endpoint(endpoint, reason, spool_dir)

    thread = threading.Thread(target=check, name="strands-tito-endpoint-check", daemon=True)
    thread.start()
    return thread
