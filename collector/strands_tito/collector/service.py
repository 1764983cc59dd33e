"""The collector service: OTLP/HTTP and OTLP/gRPC in, durable assembly, exporters out, metrics on the side."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import json
import logging
import random
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from strands_tito.exporters import TrajectoryExporter, make_exporter
from strands_tito.http_server import Connection, HttpServer, Request, Response, json_response, text_response
from strands_tito.otlp import OTLPDecodeError, parse_request

from .ingest import Ingestor, IngestResult, PayloadTooLarge, decompress
from .store import Store

logger = logging.getLogger(__name__)


@dataclass
class CollectorConfig:
    """Settings of :class:`Collector` (see ``strands-tito collect --help``)."""

    store: Path = Path(".strands-tito/collector.db")
    outputs: list[str] = field(default_factory=lambda: ["jsonl:trajectories.jsonl"])
    host: str = "127.0.0.1"
    http_port: int = 4318
    grpc_port: int | None = 4317
    grpc_host: str | None = None  # defaults to ``host``
    token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_body_bytes: int = 64 * 1024 * 1024
    max_decompressed_bytes: int = 256 * 1024 * 1024
    max_inflight: int = 64
    max_store_bytes: int = 10 * 1024**3
    idle_timeout: float = 600.0
    batch_size: int = 64
    progress_interval: float = 10.0
    agl_url: str | None = None
    """Agent Lightning server base URL: turns its exporter on (see :mod:`strands_tito.exporters.agentlightning`)."""
    agl_key: str | None = field(default=None, repr=False)
    agl_ack_timeout: float = 8.0
    """Longest hold of an agent's OTLP acknowledgement until its rollout's events are on the server (0: none)."""
    agl_model: str | None = None


@dataclass
class Metrics:
    """Counters exposed at ``/metrics`` (Prometheus text format)."""

    requests: dict[str, int] = field(default_factory=dict)
    spans_received: int = 0
    bytes_received: int = 0
    spans_rejected: int = 0
    duplicates: int = 0
    export_failures: dict[str, int] = field(default_factory=dict)
    exported: dict[str, int] = field(default_factory=dict)

    def count_request(self, protocol: str, outcome: str) -> None:
        key = f'protocol="{protocol}",outcome="{outcome}"'
        self.requests[key] = self.requests.get(key, 0) + 1


class Collector:
    """Receives OTLP, keeps spans durable, assembles trajectories and feeds the exporters."""

    def __init__(self, config: CollectorConfig, exporters: list[TrajectoryExporter] | None = None) -> None:
        self.config = config
        self.exporters = exporters if exporters is not None else [make_exporter(s) for s in config.outputs]
        if exporters is None and config.agl_url:
            from strands_tito.exporters.agentlightning import AgentLightningExporter

            self.exporters.append(
                AgentLightningExporter(
                    config.agl_url,
                    config.agl_key,
                    Path(config.store).with_name("agentlightning.db"),
                    ack_timeout=config.agl_ack_timeout,
                    model=config.agl_model,
                )
            )
        self.store = Store(config.store)
        self.metrics = Metrics()
        self._wakeups = {e.name: threading.Event() for e in self.exporters}
        self.ingestor = Ingestor(self.store, [e.name for e in self.exporters], self._wake_exporters)
        # Exporters whose delivery gates the OTLP acknowledgement (see TrajectoryExporter), and who waits on what.
        self._ack_exporters = [e for e in self.exporters if getattr(e, "ack_timeout", 0) > 0]
        for exporter in self._ack_exporters:
            if hasattr(exporter, "on_delivered"):
                exporter.on_delivered = functools.partial(self._delivered, exporter.name)  # type: ignore[attr-defined]
        self._ack_lock = threading.Lock()
        self._ack_waiters: dict[tuple[str, str], list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]] = {}
        self._recently_delivered: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._inflight = 0
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._http = HttpServer(self._handle_http, max_body=config.max_body_bytes, server_name="strands-tito-collector")
        self._grpc: grpc.aio.Server | None = None
        self.http_port = 0
        self.grpc_port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the exporters' settings, recover open trajectories from the store, then start receivers and workers.

        Raises:
            ExporterConfigError: an exporter cannot work with its settings (e.g. a refused key).
        """
        for exporter in self.exporters:
            check = getattr(exporter, "check", None)
            if check is not None:
                await asyncio.to_thread(check)
        replayed = await asyncio.to_thread(self.ingestor.recover)
        logger.info("replayed=<%d>, store=<%s> | recovered open trajectories", replayed, self.config.store)
        for exporter in self.exporters:
            thread = threading.Thread(target=self._export_loop, args=(exporter,), name=f"export-{exporter.name}")
            thread.start()
            self._threads.append(thread)
        context = None
        if self.config.tls_cert is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.config.tls_cert, self.config.tls_key)
        _, self.http_port = await self._http.start(self.config.host, self.config.http_port, ssl=context)
        if self.config.grpc_port is not None:
            await self._start_grpc(context)
        logger.info(
            "http=<%s:%d>, grpc=<%s>, outputs=<%s> | collector listening",
            self.config.host,
            self.http_port,
            self.grpc_port,
            ",".join(e.name for e in self.exporters),
        )

    async def _start_grpc(self, context: ssl.SSLContext | None) -> None:
        limit = self.config.max_decompressed_bytes
        self._grpc = grpc.aio.server(
            options=[("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(self), self._grpc)  # type: ignore[no-untyped-call]
        address = f"{self.config.grpc_host or self.config.host}:{self.config.grpc_port}"
        if context is not None and self.config.tls_cert is not None and self.config.tls_key is not None:
            credentials = grpc.ssl_server_credentials(
                [(self.config.tls_key.read_bytes(), self.config.tls_cert.read_bytes())]
            )
            self.grpc_port = self._grpc.add_secure_port(address, credentials)
        else:
            self.grpc_port = self._grpc.add_insecure_port(address)
        await self._grpc.start()

    async def stop(self, grace: float = 5.0) -> None:
        """Stop receiving, let running export batches finish, close the store."""
        await self._http.close()
        if self._grpc is not None:
            await self._grpc.stop(grace)
        self._stopping.set()
        self._wake_exporters()
        for thread in self._threads:
            await asyncio.to_thread(thread.join, grace + 30)
        for exporter in self.exporters:
            exporter.close()
        self.store.close()

    async def run_background(self) -> None:
        """Idle sweeps and the console progress line, until stopped."""
        last_progress = time.monotonic()
        while not self._stopping.is_set():
            await asyncio.sleep(min(1.0, self.config.idle_timeout / 4))
            await asyncio.to_thread(self.ingestor.sweep, self.config.idle_timeout)
            if self.config.progress_interval and time.monotonic() - last_progress >= self.config.progress_interval:
                last_progress = time.monotonic()
                print(self.progress_line(), flush=True)

    # -- ingest ------------------------------------------------------------------------------------------------------

    def overloaded(self) -> str | None:
        """Why new data must wait (the client retries on 503/UNAVAILABLE), or None."""
        if self._inflight >= self.config.max_inflight:
            return f"{self._inflight} requests in flight"
        if self.store.size_bytes() >= self.config.max_store_bytes:
            return f"store is full ({self.store.size_bytes()} bytes); exporters are behind"
        return None

    async def ingest(self, request: trace_service_pb2.ExportTraceServiceRequest) -> IngestResult:
        """Store and assemble one request off the event loop."""
        self._inflight += 1
        try:
            result = await asyncio.to_thread(self.ingestor.ingest, request)
        finally:
            self._inflight -= 1
        self.metrics.spans_received += result.accepted
        self.metrics.duplicates += result.duplicates
        self.metrics.spans_rejected += result.rejected
        for error in result.errors:
            logger.warning("error=<%s> | rejected span", error)
        return result

    def authorized(self, header: str | None) -> bool:
        """Bearer-token check (constant time); always true when no token is configured."""
        if self.config.token is None:
            return True
        return header is not None and hmac.compare_digest(header.encode(), f"Bearer {self.config.token}".encode())

    async def _handle_http(self, request: Request, connection: Connection) -> Response:
        if request.path == "/health":
            return json_response({"status": "ok", "open_trajectories": self.ingestor.assembler.open_trajectories})
        if request.path == "/metrics":
            return text_response(self.prometheus())
        if request.path != "/v1/traces":
            return json_response({"detail": "Not Found"}, 404)
        if request.method != "POST":
            return json_response({"detail": "Method Not Allowed"}, 405, {"allow": "POST"})
        outcome, response = await self._traces(request)
        self.metrics.count_request("http", outcome)
        return response

    async def _traces(self, request: Request) -> tuple[str, Response]:
        content_type = (request.header("content-type") or "").split(";")[0].strip().lower()
        as_json = content_type == "application/json"
        if not self.authorized(request.header("authorization")):
            return "unauthorized", _status_response(
                401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token", as_json
            )
        if content_type not in ("application/x-protobuf", "application/json"):
            return "bad_request", _status_response(
                415, code_pb2.INVALID_ARGUMENT, f"unsupported Content-Type {content_type!r}", as_json
            )
        busy = self.overloaded()
        if busy is not None:
            return "overloaded", _status_response(
                503,
                code_pb2.UNAVAILABLE,
                f"collector busy: {busy}",
                as_json,
                {"retry-after": str(random.randint(1, 3))},
            )
        self.metrics.bytes_received += len(request.body)
        try:
            body = decompress(
                request.body, request.header("content-encoding") or "", self.config.max_decompressed_bytes
            )
            parsed = parse_request(body, content_type)
        except PayloadTooLarge as e:
            return "too_large", _status_response(413, code_pb2.INVALID_ARGUMENT, str(e), as_json)
        except OTLPDecodeError as e:
            return "bad_request", _status_response(400, code_pb2.INVALID_ARGUMENT, str(e), as_json)
        result = await self.ingest(parsed)
        if result.errors and not result.accepted and not result.duplicates:
            return "bad_request", _status_response(400, code_pb2.INVALID_ARGUMENT, "; ".join(result.errors), as_json)
        await self.hold_acknowledgement(result)
        return "ok", _export_response(result, as_json)

    # -- acknowledgement after delivery ------------------------------------------------------------------------------

    async def hold_acknowledgement(self, result: IngestResult) -> None:
        """Wait until the trajectories this request finished (or re-sent) are delivered by the exporters that ask
        for it (Agent Lightning: the trainer reads a rollout's events as soon as its agent process exits, and the
        agent's exit waits for this acknowledgement), for at most each exporter's ``ack_timeout``.

        The spans are already committed, so the acknowledgement is given on timeout too; delivery goes on.
        """
        if not self._ack_exporters or not result.trajectories:
            return
        wanted = [
            (exporter, tid)
            for tid, resource in result.trajectories.items()
            for exporter in self._ack_exporters
            if _acknowledges(exporter, resource)
        ]
        if not wanted:
            return
        finished = await asyncio.to_thread(self.store.finished, {tid for _, tid in wanted})
        wanted = [(exporter, tid) for exporter, tid in wanted if tid in finished]
        if not wanted:
            return
        loop = asyncio.get_running_loop()
        waits: list[tuple[TrajectoryExporter, str, asyncio.Future[None]]] = []
        with self._ack_lock:
            for exporter, tid in wanted:
                key = (exporter.name, tid)
                if key in self._recently_delivered:
                    continue
                future: asyncio.Future[None] = loop.create_future()
                self._ack_waiters.setdefault(key, []).append((loop, future))
                waits.append((exporter, tid, future))
        if not waits:
            return
        try:
            # Delivered before this collector started (or before the waiter was registered, by batch): no outbox row.
            queued = await asyncio.to_thread(self._still_queued, [(e.name, tid) for e, tid, _ in waits])
            for exporter, tid, future in waits:
                if (exporter.name, tid) not in queued and not future.done():
                    future.set_result(None)
            pending = [future for _, _, future in waits if not future.done()]
            if pending:
                timeout = max(float(getattr(exporter, "ack_timeout", 0)) for exporter, _, _ in waits)
                started = time.monotonic()
                await asyncio.wait(pending, timeout=timeout)
                late = [(e.name, tid) for e, tid, future in waits if not future.done()]
                if late:
                    logger.warning(
                        "waited=<%.1f>, late=<%s> | not delivered in time; acknowledged anyway, delivery goes on",
                        time.monotonic() - started,
                        late,
                    )
        finally:
            with self._ack_lock:
                for exporter, tid, future in waits:
                    key = (exporter.name, tid)
                    entries = [w for w in self._ack_waiters.get(key, []) if w[1] is not future]
                    if entries:
                        self._ack_waiters[key] = entries
                    else:
                        self._ack_waiters.pop(key, None)

    def _still_queued(self, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        return {key for key in keys if self.store.queued(key[0], key[1])}

    def _delivered(self, exporter: str, trajectory_id: str) -> None:
        """An exporter has delivered a trajectory (called from its export thread): release who waits for it."""
        key = (exporter, trajectory_id)
        with self._ack_lock:
            self._recently_delivered[key] = None
            while len(self._recently_delivered) > 100_000:
                self._recently_delivered.popitem(last=False)
            waiters = self._ack_waiters.pop(key, [])
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_resolve, future)

    # -- export ------------------------------------------------------------------------------------------------------

    def _wake_exporters(self) -> None:
        for wakeup in self._wakeups.values():
            wakeup.set()

    def _export_loop(self, exporter: TrajectoryExporter) -> None:
        wakeup = self._wakeups[exporter.name]
        while not self._stopping.is_set() or self._has_batch(exporter):
            batch = self.store.pending_batch(exporter.name)
            if batch is not None and batch.attempts and time.time() < self.store.retry_at(batch.batch_id):
                if self._stopping.is_set():
                    return  # a failing exporter must not hold up shutdown; the batch stays in the store
                time.sleep(min(0.5, max(0.0, self.store.retry_at(batch.batch_id) - time.time())))
                continue
            if batch is None:
                wakeup.clear()  # before looking: a trajectory finished from now on sets it again
                batch = self.store.start_batch(exporter.name, exporter.next_position(), self.config.batch_size)
            if batch is None:
                if self._stopping.is_set():
                    return
                wakeup.wait(1.0)
                continue
            try:
                exporter.write(batch.records, batch.position)
            except Exception as e:
                delay = min(60.0, 2.0 ** min(batch.attempts, 6)) * random.uniform(0.5, 1.0)
                self.metrics.export_failures[exporter.name] = self.metrics.export_failures.get(exporter.name, 0) + 1
                logger.error("exporter=<%s>, retry_in=<%.1f>, error=<%s> | export failed", exporter.name, delay, e)
                self.store.batch_failed(batch.batch_id, delay)
                continue
            self.store.batch_done(batch.batch_id)
            self.metrics.exported[exporter.name] = self.metrics.exported.get(exporter.name, 0) + len(batch.records)
            if exporter in self._ack_exporters:
                for record in batch.records:
                    self._delivered(exporter.name, record["trajectory_id"])

    def _has_batch(self, exporter: TrajectoryExporter) -> bool:
        return self.store.pending_batch(exporter.name) is not None

    # -- reporting ---------------------------------------------------------------------------------------------------

    def prometheus(self) -> str:
        """Metrics in the Prometheus text exposition format."""
        counts = self.store.counts()
        lines = [
            "# TYPE strands_tito_spans_received_total counter",
            f"strands_tito_spans_received_total {self.metrics.spans_received}",
            "# TYPE strands_tito_bytes_received_total counter",
            f"strands_tito_bytes_received_total {self.metrics.bytes_received}",
            "# TYPE strands_tito_spans_rejected_total counter",
            f"strands_tito_spans_rejected_total {self.metrics.spans_rejected}",
            "# TYPE strands_tito_spans_duplicate_total counter",
            f"strands_tito_spans_duplicate_total {self.metrics.duplicates}",
            "# TYPE strands_tito_trajectories_total counter",
            f'strands_tito_trajectories_total{{complete="true"}} {self.ingestor.finished_complete}',
            f'strands_tito_trajectories_total{{complete="false"}} {self.ingestor.finished_incomplete}',
            "# TYPE strands_tito_open_trajectories gauge",
            f"strands_tito_open_trajectories {self.ingestor.assembler.open_trajectories}",
            "# TYPE strands_tito_export_queue_depth gauge",
            f"strands_tito_export_queue_depth {counts['outbox']}",
            "# TYPE strands_tito_store_bytes gauge",
            f"strands_tito_store_bytes {self.store.size_bytes()}",
            "# TYPE strands_tito_requests_total counter",
        ]
        lines += [f"strands_tito_requests_total{{{k}}} {v}" for k, v in sorted(self.metrics.requests.items())]
        lines.append("# TYPE strands_tito_export_failures_total counter")
        lines += [
            f'strands_tito_export_failures_total{{exporter="{k}"}} {v}' for k, v in self.metrics.export_failures.items()
        ]
        lines.append("# TYPE strands_tito_exported_total counter")
        lines += [f'strands_tito_exported_total{{exporter="{k}"}} {v}' for k, v in self.metrics.exported.items()]
        return "\n".join(lines) + "\n"

    def progress_line(self) -> str:
        """One line for the console."""
        counts = self.store.counts()
        return (
            f"collector: {self.metrics.spans_received} spans, {self.ingestor.finished_complete} complete / "
            f"{self.ingestor.finished_incomplete} incomplete trajectories, {self.ingestor.assembler.open_trajectories} "
            f"open, export queue {counts['outbox']}, store {self.store.size_bytes() / 1e6:.1f} MB"
        )


def _acknowledges(exporter: TrajectoryExporter, resource: Mapping[str, Any]) -> bool:
    acknowledges = getattr(exporter, "acknowledges", None)
    return bool(acknowledges(resource)) if acknowledges is not None else True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _export_response(result: IngestResult, as_json: bool) -> Response:
    response = trace_service_pb2.ExportTraceServiceResponse()
    if result.errors:
        # OTLP partial success: the client must not retry, and the good spans of the request are kept.
        response.partial_success.rejected_spans = result.rejected
        response.partial_success.error_message = "; ".join(result.errors)[:4000]
    if as_json:
        body: dict[str, Any] = {}
        if result.errors:
            body["partialSuccess"] = {
                "rejectedSpans": str(result.rejected),
                "errorMessage": response.partial_success.error_message,
            }
        return Response(200, json.dumps(body).encode(), "application/json")
    return Response(200, response.SerializeToString(), "application/x-protobuf")


def _status_response(
    status: int, code: int, message: str, as_json: bool, headers: dict[str, str] | None = None
) -> Response:
    if as_json:
        return Response(
            status, json.dumps({"code": code, "message": message}).encode(), "application/json", headers or {}
        )
    body = status_pb2.Status(code=code, message=message).SerializeToString()
    return Response(status, body, "application/x-protobuf", headers or {})


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    """OTLP/gRPC ``TraceService`` (what the OpenTelemetry Collector's load-balancing exporter speaks)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    async def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        collector = self.collector
        metadata = dict(context.invocation_metadata() or ())
        if not collector.authorized(metadata.get("authorization")):
            collector.metrics.count_request("grpc", "unauthorized")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        busy = collector.overloaded()
        if busy is not None:
            collector.metrics.count_request("grpc", "overloaded")
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"collector busy: {busy}")
        collector.metrics.bytes_received += request.ByteSize()
        result = await collector.ingest(request)
        if result.errors and not result.accepted and not result.duplicates:
            collector.metrics.count_request("grpc", "bad_request")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "; ".join(result.errors)[:4000])
        await collector.hold_acknowledgement(result)
        collector.metrics.count_request("grpc", "ok")
        response = trace_service_pb2.ExportTraceServiceResponse()
        if result.errors:
            response.partial_success.rejected_spans = result.rejected
            response.partial_success.error_message = "; ".join(result.errors)[:4000]
        return response


async def serve(config: CollectorConfig, ready: asyncio.Event | None = None) -> None:
    """Run a collector until cancelled (SIGINT/SIGTERM in the CLI), then shut down gracefully."""
    collector = Collector(config)
    await collector.start()
    if ready is not None:
        ready.set()
    print(
        f"strands-tito collector listening on http://{config.host}:{collector.http_port}"
        + (f" and grpc {config.host}:{collector.grpc_port}" if collector.grpc_port else ""),
        flush=True,
    )
    background = asyncio.create_task(collector.run_background())
    try:
        await asyncio.Event().wait()
    finally:
        background.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await background
        await collector.stop()
        print(collector.progress_line(), flush=True)
