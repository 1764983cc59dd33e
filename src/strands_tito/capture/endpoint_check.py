"""Say once, within seconds, what is wrong with the OTLP endpoint capture sends to, and how to fix it.

Without this, a mistyped collector address shows only as the OTLP exporter's warnings, repeated for every batch (raw
404s, or binary junk when HTTP reaches a gRPC port), and a wait at exit; the spans are safe in the spool, but nothing
says why they do not arrive, or how to get them out. When capture starts exporting, a background thread looks at the
endpoint the way the exporter will use it:

* a TCP connection that does not open: the endpoint cannot be reached (a closed port, an unknown host);
* OTLP/HTTP: an empty export request (what the spool's sender probes with) to the URL the exporter posts to. A
  receiver answers 2xx. A reply that is not HTTP/1 is a gRPC (HTTP/2) port; a 404 at a URL whose base variable ends in
  a signal path (the exporter adds ``/v1/traces`` to ``OTEL_EXPORTER_OTLP_ENDPOINT``), or whose traces variable has
  no path (that one is used as is), is named as that; any other refusal (404, 405, 415, an HTML page, ...) is a URL
  that answers but is not an OTLP receiver;
* OTLP/gRPC: the HTTP/2 preface; an HTTP/1 reply is an OTLP/HTTP port. An HTTP/2 server is then sent an empty
  ``TraceService/Export``; ``UNIMPLEMENTED`` is a gRPC server that receives no traces.

A mistake found is one line on stderr naming it, the fix, and the spool that keeps every trajectory for
``strands-tito spool resend``. The exporters' own warnings are silenced from then on (the spool keeps retrying
quietly), and at exit, while the endpoint still fails, capture's exports give up at once: the exit flush writes what
is left to the spool instead of waiting out the exporter's retries. Answers the check cannot read (TLS it cannot
verify, a 5xx, a 429) are left to the exporter: only a mistake that is certain is named.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import sys
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.util.re import parse_env_headers

from strands_tito.upstream.opentelemetry_sdk import BATCH_EXPORT_LOGGER

__all__ = [
    "ExportTarget",
    "GivingUpExporter",
    "endpoint_answers",
    "endpoint_reported",
    "endpoint_still_failing",
    "export_target",
    "find_endpoint_mistake",
    "report_endpoint_mistake",
    "report_unreachable_endpoint",
    "watch_endpoint",
]

#: Loggers of the OTLP exporters whose per-retry warnings repeat what the one line already said.
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.proto.grpc.exporter",
    BATCH_EXPORT_LOGGER,
)
_CONNECT_TIMEOUT = 3.0
_EXIT_TIMEOUT = 0.5  # the check again at exit, when a mistake was reported
BASE_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_VARIABLE = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
TRACES_PATH = "/v1/traces"
_SIGNAL_PATHS = ("/v1/traces", "/v1/metrics", "/v1/logs")
_GRPC_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
# The HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113 §3.4, §6.5).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
_H2_FRAME_TYPES = range(0x00, 0x0A)


@dataclass(frozen=True)
class ExportTarget:
    """Where the OTLP trace exporter sends, as the standard variables say.

    Attributes:
        protocol: ``http/protobuf`` or ``grpc``.
        variable: The variable that names the endpoint (None: the SDK's default).
        value: Its value (or the default endpoint).
        url: What the exporter uses: for HTTP the URL it posts to (the base variable plus ``/v1/traces``, the traces
            variable as is); for gRPC the endpoint (its path is ignored).
    """

    protocol: str
    variable: str | None
    value: str
    url: str


def export_target(protocol: str, environ: Mapping[str, str] | None = None) -> ExportTarget:
    """The :class:`ExportTarget` of ``protocol`` under the standard variables (of ``environ`` when given)."""
    env = os.environ if environ is None else environ
    named = [(name, env.get(name, "").strip()) for name in (TRACES_VARIABLE, BASE_VARIABLE)]
    variable, value = next(((n, v) for n, v in named if v), (None, ""))
    if variable is None:
        value = "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"
    url = value
    if protocol != "grpc" and variable != TRACES_VARIABLE:  # the HTTP exporter's _resolve_endpoint
        url = f"{value.removesuffix('/')}{TRACES_PATH}"
    return ExportTarget(protocol, variable, value, url)


# -- what the check found, process-wide ------------------------------------------------------------------------------


@dataclass
class _Found:
    target: ExportTarget | None = None
    spool_dir: Path | None = None
    unreachable: bool = False
    mistake: bool = False
    giving_up: bool = False  # at exit, the endpoint still fails: exports fail at once


_found = _Found()


class _WhileReported(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (_found.unreachable or _found.mistake)


def _silence_exporters() -> None:
    for name in _EXPORTER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _WhileReported) for f in logger.filters):
            logger.addFilter(_WhileReported())


def _spool_advice(spool_dir: Path) -> str:
    return (
        f"trajectories are kept in the spool {spool_dir} (`strands-tito spool list` shows them, "
        "`strands-tito spool resend --endpoint URL` sends them elsewhere)"
    )


# -- reachability -----------------------------------------------------------------------------------------------------


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


def report_unreachable_endpoint(endpoint: str, reason: str, spool_dir: Path) -> None:
    """The one line, and quiet exporter loggers from now on."""
    sys.stderr.write(
        f"strands-tito: cannot reach the OTLP endpoint {endpoint} ({reason}); trajectories are kept in the spool "
        f"{spool_dir} and sent when it answers (`strands-tito spool list` shows them, `strands-tito spool resend "
        "--endpoint URL` sends them elsewhere)\n"
    )
    sys.stderr.flush()
    _found.unreachable = True
    _silence_exporters()


# -- what answers there ------------------------------------------------------------------------------------------------


def _exchange(target: ExportTarget, request: bytes, timeout: float) -> bytes | None:
    """Send ``request`` to the target's host and port and read the start of the reply (None: nothing can be said)."""
    parts = urlsplit(target.url if "://" in target.url else f"//{target.url}")
    host, port = _address(target.url, target.protocol)
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            conn: socket.socket = raw
            if parts.scheme == "https":
                context = ssl.create_default_context(cafile=_certificate() or None)
                conn = context.wrap_socket(raw, server_hostname=host)
            conn.sendall(request)
            reply = b""
            while b"\r\n\r\n" not in reply and len(reply) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
                if reply[:5] != b"HTTP/"[: len(reply[:5])]:
                    break  # not HTTP/1: the first bytes say enough
            return reply
    except (OSError, ssl.SSLError):
        return None


def _certificate() -> str:
    for name in ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return ""


def _headers() -> dict[str, str]:
    value = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or os.environ.get("OTEL_EXPORTER_OTLP_HEADERS", "")
    return dict(parse_env_headers(value, liberal=True))


def _looks_like_http2(reply: bytes) -> bool:
    return len(reply) >= 9 and reply[3] in _H2_FRAME_TYPES and not reply.startswith(b"HTTP/")


def _status_of(reply: bytes) -> tuple[int, str] | None:
    """Status code and content type of an HTTP/1 reply."""
    head = reply.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    lines = head.split("\r\n")
    fields = lines[0].split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].isdigit():
        return None
    content_type = next(
        (line.split(":", 1)[1].strip() for line in lines[1:] if line.lower().startswith("content-type:")), ""
    )
    return int(fields[1]), content_type


def _http_mistake(target: ExportTarget, timeout: float) -> str | None:
    parts = urlsplit(target.url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {"Host": parts.netloc, "Content-Type": "application/x-protobuf", "Content-Length": "0"}
    headers.update(_headers())
    headers["Connection"] = "close"
    request = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    reply = _exchange(target, request.encode("latin-1"), timeout)
    if not reply:
        return None
    if _looks_like_http2(reply):
        return (
            f"the OTLP endpoint {target.value} speaks gRPC (HTTP/2), but capture sends OTLP/HTTP "
            f"(http/protobuf): set OTEL_EXPORTER_OTLP_PROTOCOL=grpc, or point {target.variable or BASE_VARIABLE} at "
            "the collector's HTTP port (strands-tito collect: 4318)"
        )
    status = _status_of(reply)
    if status is None:
        return None
    code, content_type = status
    if 200 <= code < 300 and not content_type.startswith("text/html"):
        return None
    if code in (408, 429) or code >= 500:  # busy or broken for now: the exporter retries, the spool keeps the rest
        return None
    answer = f"HTTP {code}" + (f", {content_type.split(';')[0]}" if content_type else "")
    base = urlsplit(target.value)
    if target.variable == TRACES_VARIABLE and base.path in ("", "/"):
        return (
            f"{TRACES_VARIABLE}={target.value} is used as is, without {TRACES_PATH} ({answer} there): set "
            f"{TRACES_VARIABLE}={target.value.removesuffix('/')}{TRACES_PATH}, or {BASE_VARIABLE}={target.value} "
            "instead (the exporter adds the path to that one)"
        )
    if target.variable == BASE_VARIABLE and base.path.removesuffix("/").endswith(_SIGNAL_PATHS):
        root = target.value.removesuffix("/")
        for signal in _SIGNAL_PATHS:
            root = root.removesuffix(signal)
        return (
            f"{BASE_VARIABLE}={target.value} ends in a signal path, and the exporter adds {TRACES_PATH} to it "
            f"({target.url} answers {answer}): set {BASE_VARIABLE}={root}, or {TRACES_VARIABLE}="
            f"{root}{TRACES_PATH} (used as is)"
        )
    if code in (401, 403):
        return (
            f"the OTLP endpoint {target.url} refuses the export ({answer}): give its credentials in "
            "OTEL_EXPORTER_OTLP_HEADERS (e.g. authorization=Bearer%20TOKEN)"
        )
    return (
        f"{target.url} answers ({answer}) but is not an OTLP/HTTP trace receiver: point "
        f"{target.variable or BASE_VARIABLE} at the collector (strands-tito collect: {BASE_VARIABLE}="
        "http://HOST:4318; the exporter adds /v1/traces)"
    )


def _grpc_mistake(target: ExportTarget, timeout: float) -> str | None:
    parts = urlsplit(target.url if "://" in target.url else f"//{target.url}")
    if parts.scheme == "https":
        return None  # TLS: left to the exporter
    reply = _exchange(target, _H2_PREFACE, timeout)
    if not reply:
        return None
    if reply.startswith(b"HTTP/1."):
        return (
            f"the OTLP endpoint {target.value} speaks HTTP/1 (OTLP/HTTP), but capture sends OTLP/gRPC "
            f"(OTEL_EXPORTER_OTLP_PROTOCOL=grpc): unset OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf is the default), "
            f"or point {target.variable or BASE_VARIABLE} at the collector's gRPC port (strands-tito collect: 4317)"
        )
    if not _looks_like_http2(reply):
        return None
    import grpc

    host, port = _address(target.url, target.protocol)
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        export = channel.unary_unary(_GRPC_EXPORT)
        try:
            export(b"", timeout=timeout, metadata=tuple(_headers().items()))
        except grpc.RpcError as error:
            code = error.code() if isinstance(error, grpc.Call) else None
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return (
                    f"{target.value} answers gRPC but has no OTLP trace service (UNIMPLEMENTED): point "
                    f"{target.variable or BASE_VARIABLE} at the collector (strands-tito collect: gRPC on 4317)"
                )
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                return (
                    f"the OTLP endpoint {target.value} refuses the export ({code.name}): give its credentials in "
                    "OTEL_EXPORTER_OTLP_HEADERS"
                )
    return None


def find_endpoint_mistake(target: ExportTarget, timeout: float = _CONNECT_TIMEOUT) -> str | None:
    """What is wrong with a reachable endpoint, with the fix, in one line; None when it receives OTLP traces (or when
    its answer cannot be read with certainty)."""
    if target.protocol == "grpc":
        return _grpc_mistake(target, timeout)
    return _http_mistake(target, timeout)


def report_endpoint_mistake(mistake: str, spool_dir: Path) -> None:
    """The one line for a reachable endpoint that does not receive OTLP traces, and quiet exporter loggers."""
    sys.stderr.write(f"strands-tito: {mistake}; {_spool_advice(spool_dir)}\n")
    sys.stderr.flush()
    _found.mistake = True
    _silence_exporters()


def watch_endpoint(target: ExportTarget, spool_dir: Path) -> threading.Thread:
    """Check the endpoint in the background and report once what keeps spans from reaching it."""
    _found.target, _found.spool_dir = target, spool_dir

    def check() -> None:
        reason = endpoint_answers(target.url, target.protocol)
        if reason is not None:
            report_unreachable_endpoint(target.value, reason, spool_dir)
            return
        mistake = find_endpoint_mistake(target)
        if mistake is not None:
            report_endpoint_mistake(mistake, spool_dir)

    thread = threading.Thread(target=check, name="strands-tito-endpoint-check", daemon=True)
    thread.start()
    return thread


def endpoint_reported() -> bool:
    """Whether the one line about the endpoint was written (what it says need not be said again)."""
    return _found.unreachable or _found.mistake


def endpoint_still_failing() -> bool:
    """Whether a reported endpoint still fails now (checked again, briefly); if so, capture's exports give up at once
    from now on (:class:`GivingUpExporter`), so that the exit does not wait for the exporter's retries."""
    target = _found.target
    if target is None or not (_found.unreachable or _found.mistake):
        return False
    if _found.unreachable:
        failing = endpoint_answers(target.url, target.protocol, timeout=_EXIT_TIMEOUT) is not None
    else:
        failing = find_endpoint_mistake(target, timeout=_EXIT_TIMEOUT) is not None
    if failing:
        _give_up()
    return failing


class GivingUpExporter(SpanExporter):
    """An OTLP exporter that gives up once :func:`endpoint_still_failing` said so at exit: the exporter it wraps is
    shut down (which ends a retry it is waiting in) and every export fails at once. The spool keeps capture's spans;
    the others would only be retried until the exporter's timeout (10 s) and lost anyway."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self._lock = threading.Lock()
        self._shut = False
        _exporters.add(self)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export with the wrapped exporter, unless the endpoint is known to fail at exit."""
        if _found.giving_up:
            return SpanExportResult.FAILURE
        return self.exporter.export(spans)

    def shutdown(self) -> None:
        """Shut the wrapped exporter down (once)."""
        with self._lock:
            if self._shut:
                return
            self._shut = True
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing is buffered here."""
        return self.exporter.force_flush(timeout_millis)


_exporters: weakref.WeakSet[GivingUpExporter] = weakref.WeakSet()


def _give_up() -> None:
    _found.giving_up = True
    for exporter in list(_exporters):
        exporter.shutdown()
