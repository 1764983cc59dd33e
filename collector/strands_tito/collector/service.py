"""The collector service: wires the seams together and runs them.

receivers (:mod:`.receivers.http`, :mod:`.receivers.grpc`) → one accept path (:mod:`.accept`: auth, limits,
decompress, decode, validate, partial success, ack) → ingest and assembly (:mod:`.ingest`) → the durable store
(:mod:`.store`) → delivery to the exporters (:mod:`.delivery`, supervised threads). :mod:`.telemetry` holds the
counters and the health of background tasks.

Lifecycle: :meth:`Collector.start` binds both receivers *before* any background work starts, so a port in use fails
at once with :class:`BindError`; :meth:`Collector.stop` is bounded by ``shutdown_timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import ssl
import time
from pathlib import Path
from typing import Any

from strands_tito.errors import StrandsTitoError
from strands_tito.exporters import (
    CheckedExporter,
    ExporterSettings,
    TrajectoryExporter,
    checked_exporter,
    make_exporter,
)

from .accept import AcceptPath, Limits
from .config import CollectorConfig
from .delivery import Delivery
from .ingest import Ingestor
from .receivers.grpc import GrpcReceiver
from .receivers.http import HttpReceiver
from .store import Store
from .telemetry import Health, Metrics, prometheus

logger = logging.getLogger(__name__)


class BindError(StrandsTitoError, OSError):
    """A receiver's address cannot be bound (in use, not local, no permission)."""


class Collector:
    """Receives OTLP, keeps spans durable, assembles trajectories and feeds the exporters."""

    def __init__(self, config: CollectorConfig, exporters: list[TrajectoryExporter] | None = None) -> None:
        """Build the seams; ``exporters`` (default: those ``config`` names, built by the exporter registry) are
        checked against the exporter contract.

        Raises:
            ExporterConfigError: an exporter cannot work with its settings or does not follow the contract.
        """
        self.config = config
        self.exporters = [checked_exporter(e) for e in exporters] if exporters is not None else _exporters(config)
        self.store = Store(config.store)
        self.metrics = Metrics()
        self.health = Health(self.metrics)
        self.delivery = Delivery(self.store, self.exporters, self.metrics, self.health, config.batch_size)
        self.ingestor = Ingestor(
            self.store, [e.name for e in self.exporters], self.delivery.wake, config.max_open_trajectories,
            max_request_tokens=config.max_request_tokens, max_request_spans=config.max_request_spans,
        )  # fmt: skip
        limits = Limits(
            config.token, config.max_body_bytes, config.max_decompressed_bytes, config.max_inflight,
            config.max_store_bytes,
        )  # fmt: skip
        self.accept = AcceptPath(limits, self.ingestor.ingest, self.store.size_bytes, self.delivery.hold, self.metrics)
        self._http = HttpReceiver(
            self.accept,
            self.health_report,
            self.prometheus,
            max_body=config.max_body_bytes,
            head_timeout=config.head_timeout,
            body_timeout=config.body_timeout,
            max_connections=config.max_connections or MAX_AUTO_CONNECTIONS,
            max_requests=config.max_inflight,
            keepalive_timeout=config.keepalive_timeout,
            max_connections_per_peer=config.max_connections_per_peer,
        )
        self.file_limit = 0
        self._grpc: GrpcReceiver | None = None
        self._stopped = False
        self.http_port = 0
        self.grpc_port: int | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Check the exporters, recover open trajectories, bind the receivers, then start the export threads.

        Raises:
            ExporterConfigError: an exporter cannot work with its settings (e.g. a refused key).
            BindError: an address cannot be bound (nothing is left running).
        """
        for exporter in self.exporters:
            if isinstance(exporter, CheckedExporter):
                await asyncio.to_thread(exporter.check)
        self.file_limit = raise_file_limit()
        if not self.config.max_connections:
            self._http.max_connections = auto_connections(self.file_limit)
        logger.info(
            "file_limit=<%d>, max_connections=<%d>, max_requests=<%d> | HTTP admission",
            self.file_limit, self._http.max_connections, self._http.max_requests,
        )  # fmt: skip
        replayed = await asyncio.to_thread(self.ingestor.recover)
        logger.info("replayed=<%d>, store=<%s> | recovered open trajectories", replayed, self.config.store)
        try:
            await self._bind()
        except BaseException:
            await self._http.close()
            if self._grpc is not None:
                await self._grpc.close(0)
            self._close_store()
            raise
        self.delivery.start()
        logger.info(
            "http=<%s:%d>, grpc=<%s>, outputs=<%s> | collector listening",
            self.config.host,
            self.http_port,
            self.grpc_port,
            ",".join(e.name for e in self.exporters),
        )

    async def _bind(self) -> None:
        config = self.config
        context = None
        if config.tls_cert is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(config.tls_cert, config.tls_key)
        try:
            self.http_port = await self._http.start(config.host, config.http_port, context)
        except OSError as e:
            raise BindError(f"cannot listen on {config.host}:{config.http_port} (HTTP): {e.strerror or e}") from e
        if config.grpc_port is None:
            return
        self._grpc = GrpcReceiver(self.accept, config.max_decompressed_bytes, max(config.keepalive_timeout, 1.0) * 10)
        address = f"{config.grpc_host or config.host}:{config.grpc_port}"
        tls = (config.tls_cert, config.tls_key) if config.tls_cert is not None and config.tls_key is not None else None
        try:
            self.grpc_port = await self._grpc.start(address, context, tls)
        except OSError as e:
            raise BindError(f"cannot listen on {address} (gRPC): {e}") from e

    async def stop(self) -> None:
        """Stop receiving, let running export batches finish (bounded), close the store. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        budget = self.config.shutdown_timeout
        started = time.monotonic()
        await self._http.close()
        if self._grpc is not None:
            await self._grpc.close(min(2.0, budget / 4))
        remaining = max(0.5, budget - (time.monotonic() - started))
        await asyncio.to_thread(self.delivery.stop, remaining)
        for exporter in self.exporters:
            try:
                exporter.close()
            except Exception:
                logger.exception("exporter=<%s> | close failed", exporter.name)
        self._close_store()

    def _close_store(self) -> None:
        with contextlib.suppress(Exception):
            self.store.close()

    async def run_background(self) -> None:
        """Idle sweeps and the console progress line, until cancelled; a failing round is logged and retried."""
        last_progress = time.monotonic()
        while True:
            await asyncio.sleep(min(1.0, self.config.idle_timeout / 4))
            try:
                await asyncio.to_thread(self.ingestor.sweep, self.config.idle_timeout)
            except Exception as e:
                self.health.failed("sweeper", e)
            else:
                self.health.ok("sweeper")
            if self.config.progress_interval and time.monotonic() - last_progress >= self.config.progress_interval:
                last_progress = time.monotonic()
                print(self.progress_line(), flush=True)

    # -- reporting ---------------------------------------------------------------------------------------------------

    def health_report(self) -> dict[str, Any]:
        """``/health``: ``ok``, or ``degraded`` with the failing background tasks (the service keeps running)."""
        failing = self.health.failing
        report: dict[str, Any] = {
            "status": "degraded" if failing else "ok",
            "open_trajectories": self.ingestor.open_trajectories,
        }
        if failing:
            report["failing"] = failing
        return report

    def prometheus(self) -> str:
        """Metrics in the Prometheus text exposition format."""
        counts = self.store.counts()
        gauges = {
            "open_trajectories": self.ingestor.open_trajectories,
            "export_queue_depth": counts["outbox"],
            "store_bytes": self.store.size_bytes(),
            "store_disk_bytes": self.store.disk_bytes(),
            "degraded_tasks": len(self.health.failing),
            "http_connections": self._http.connections,
            "http_connection_limit": self._http.max_connections,
            "file_limit": self.file_limit,
        }
        finished = {"complete": self.ingestor.finished_complete, "incomplete": self.ingestor.finished_incomplete}
        return prometheus(self.metrics, gauges, finished)

    def progress_line(self) -> str:
        """One line for the console (counts kept in memory: safe after the store is closed)."""
        return (
            f"collector: {self.metrics.spans_received} spans, {self.ingestor.finished_complete} complete / "
            f"{self.ingestor.finished_incomplete} incomplete trajectories, {self.ingestor.open_trajectories} "
            f"open, {sum(self.metrics.exported.values())} exported"
        )


MAX_AUTO_CONNECTIONS = 65536
"""The most connections ``max_connections=0`` holds, however high the file descriptor limit (memory: about
``docs/collector-faults.md``'s bytes per idle connection times this)."""


def raise_file_limit() -> int:
    """Raise this process's file descriptor limit (``RLIMIT_NOFILE``) to its hard limit; returns the limit in force
    (a limit that cannot be raised is logged, and kept)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            logger.warning(
                "file_limit=<%d>, hard=<%d>, error=<%s> | cannot raise the file descriptor limit", soft, hard, e
            )
            return int(soft)
        logger.info("file_limit=<%d>, was=<%d> | raised the file descriptor limit to the hard limit", target, soft)
        return int(target)
    return int(soft if soft != resource.RLIM_INFINITY else target)


def auto_connections(file_limit: int) -> int:
    """``max_connections=0``: the file descriptor limit less a quarter (the store, exporters, gRPC and connections
    being closed use the rest), at most :data:`MAX_AUTO_CONNECTIONS`."""
    return max(16, min(MAX_AUTO_CONNECTIONS, file_limit - file_limit // 4))


def _exporters(config: CollectorConfig) -> list[TrajectoryExporter]:
    """The exporters ``config`` names (its outputs, then Agent Lightning's when ``agl_url`` is set)."""
    settings = ExporterSettings(
        parquet_rows=config.parquet_rows_per_part,
        parquet_linger=config.parquet_linger,
        agl_key=config.agl_key,
        agl_journal=Path(config.store).with_name("agentlightning.db"),
        agl_ack_timeout=config.agl_ack_timeout,
        agl_model=config.agl_model,
    )
    specs = [*config.outputs, *([f"agentlightning:{config.agl_url}"] if config.agl_url else [])]
    return [make_exporter(spec, settings) for spec in specs]


async def serve(config: CollectorConfig, ready: asyncio.Event | None = None) -> None:
    """Run a collector until cancelled (SIGINT/SIGTERM in the CLI), then shut down within ``shutdown_timeout``."""
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
