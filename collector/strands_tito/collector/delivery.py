"""Delivery: finished trajectories from the store's outbox to the exporters, one supervised thread per exporter.

Each loop takes a batch from the store (position recorded first, so a crash rewrites the same batch in place),
writes it, and marks it done; a failed write is retried with backoff from the store. Anything else a round raises
(the store, an exporter bug) is logged, counted and reported by :class:`~.telemetry.Health`, and the loop goes on.

What an exporter can do more is read from the protocols it satisfies (:mod:`strands_tito.exporters.base`): a
:class:`~strands_tito.exporters.GatheringExporter` gets bigger batches, and an
:class:`~strands_tito.exporters.AcknowledgingExporter` gates the OTLP acknowledgement on delivery (Agent Lightning: the
trainer reads a rollout as soon as its agent exits, and the agent's exit waits for the acknowledgement):
:meth:`Delivery.hold` waits for what its :meth:`~strands_tito.exporters.AcknowledgingExporter.deliver` yields, bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import OrderedDict

from strands_tito.exporters import AcknowledgingExporter, GatheringExporter, TrajectoryExporter

from .ingest import IngestResult
from .store import Store
from .telemetry import Health, Metrics

logger = logging.getLogger(__name__)
# Jitter from the operating system's generator, never the `random` module's global state (the host application's).
_JITTER = random.SystemRandom()

Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class Delivery:
    """Export threads and acknowledgement holds.

    Args:
        store: The durable store (outbox and batches).
        exporters: Where finished trajectories go.
        metrics: Counters.
        health: Where the loops report failures.
        batch_size: Records per export batch.
    """

    def __init__(
        self, store: Store, exporters: list[TrajectoryExporter], metrics: Metrics, health: Health, batch_size: int
    ) -> None:
        self.store = store
        self.exporters = exporters
        self.metrics = metrics
        self.health = health
        self.batch_size = batch_size
        self._wakeups = {e.name: threading.Event() for e in exporters}
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._gathering: dict[str, float] = {}  # exporter -> when its oldest waiting trajectory was first seen
        self._ack_exporters = [e for e in exporters if isinstance(e, AcknowledgingExporter) and e.ack_timeout > 0]
        self._ack_lock = threading.Lock()
        self._ack_waiters: dict[tuple[str, str], list[Waiter]] = {}
        self._recently_delivered: OrderedDict[tuple[str, str], None] = OrderedDict()

    # -- threads -----------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start one export thread per exporter (daemons: a stuck exporter cannot keep the process alive)."""
        for exporter in self.exporters:
            thread = threading.Thread(target=self._loop, args=(exporter,), name=f"export-{exporter.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def wake(self) -> None:
        """Trajectories were finished: look at the outbox now."""
        for wakeup in self._wakeups.values():
            wakeup.set()

    def stop(self, timeout: float) -> None:
        """Let running batches finish for at most ``timeout`` seconds in all; what is left stays in the store."""
        self._stopping.set()
        self.wake()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for thread in self._threads:
            if thread.is_alive():
                logger.warning("thread=<%s> | still exporting at shutdown; its batch is redone on restart", thread.name)

    def _loop(self, exporter: TrajectoryExporter) -> None:
        task = f"export-{exporter.name}"
        failures = 0
        while True:
            try:
                if not self._round(exporter):
                    return
                failures = 0
            except Exception as e:
                failures += 1
                self.health.failed(task, e)
                if self._stopping.wait(min(30.0, 0.5 * 2 ** min(failures, 6))):
                    return

    def _round(self, exporter: TrajectoryExporter) -> bool:  # noqa: C901  one export step: stop, idle, backoff and acknowledgement, in order
        """One step of an export loop; False when the loop should end (stopping and nothing left to do).

        The exporter is reported failing (``/health`` degraded) from a failed write until a batch is written again.
        """
        task = f"export-{exporter.name}"
        wakeup = self._wakeups[exporter.name]
        stopping = self._stopping.is_set()
        batch = self.store.pending_batch(exporter.name)
        if stopping and batch is None and not self._has_waiting(exporter):
            return False
        if batch is not None and batch.attempts and time.time() < self.store.retry_at(batch.batch_id):
            if stopping:
                return False  # a failing exporter must not hold up shutdown; the batch stays in the store
            time.sleep(min(0.5, max(0.0, self.store.retry_at(batch.batch_id) - time.time())))
            return True
        rows = exporter.batch_rows if isinstance(exporter, GatheringExporter) else self.batch_size
        if batch is None and not stopping and self._lingers(exporter, rows):
            return True
        if batch is None:
            wakeup.clear()  # before looking: a trajectory finished from now on sets it again
            batch = self.store.start_batch(exporter.name, exporter.next_position(), rows)
        if batch is None:
            self.health.ok(task)
            if stopping:
                return False
            wakeup.wait(1.0)
            return True
        try:
            if isinstance(exporter, AcknowledgingExporter) and exporter in self._ack_exporters:
                for trajectory_id in exporter.deliver(batch.records, batch.position):
                    self.delivered(exporter.name, trajectory_id)
            else:
                exporter.write(batch.records, batch.position)
        except Exception as e:
            delay = min(60.0, 2.0 ** min(batch.attempts, 6)) * _JITTER.uniform(0.5, 1.0)
            self.metrics.export_failures[exporter.name] = self.metrics.export_failures.get(exporter.name, 0) + 1
            logger.error("exporter=<%s>, retry_in=<%.1f>, error=<%s> | export failed", exporter.name, delay, e)
            self.health.failed(task, e, logged=True)
            self.store.batch_failed(batch.batch_id, delay)
            return True
        self.store.batch_done(batch.batch_id)
        self.health.ok(task)
        self.metrics.exported[exporter.name] = self.metrics.exported.get(exporter.name, 0) + len(batch.records)
        if exporter in self._ack_exporters:
            for record in batch.records:
                self.delivered(exporter.name, record["trajectory_id"])
        return True

    def _lingers(self, exporter: TrajectoryExporter, rows: int) -> bool:
        """Whether to let finished trajectories gather for a bigger batch (a gathering exporter), after waiting a
        little for more."""
        linger = exporter.linger_seconds if isinstance(exporter, GatheringExporter) else 0.0
        if linger <= 0:
            return False
        wakeup = self._wakeups[exporter.name]
        wakeup.clear()
        waiting = self.store.waiting(exporter.name, rows)
        if waiting == 0 or waiting >= rows:
            self._gathering.pop(exporter.name, None)
            return False  # nothing to gather (the round waits as usual), or a full batch
        since = self._gathering.setdefault(exporter.name, time.monotonic())
        left = since + linger - time.monotonic()
        if left <= 0:
            self._gathering.pop(exporter.name, None)
            return False
        self.health.ok(f"export-{exporter.name}")
        wakeup.wait(min(left, 1.0))
        return True

    def _has_waiting(self, exporter: TrajectoryExporter) -> bool:
        return self.store.queued_any(exporter.name)

    # -- acknowledgement after delivery ------------------------------------------------------------------------------

    async def hold(self, result: IngestResult) -> None:
        """Wait until the trajectories this request finished (or re-sent) are delivered by the exporters that ask
        for it, for at most each exporter's ``ack_timeout``.

        The spans are already committed, so the acknowledgement is given on timeout too; delivery goes on.
        """
        if not self._ack_exporters or not result.trajectories:
            return
        wanted = [
            (exporter, tid)
            for tid, resource in result.trajectories.items()
            for exporter in self._ack_exporters
            if exporter.acknowledges(resource)
        ]
        if not wanted:
            return
        finished = await asyncio.to_thread(self.store.finished, {tid for _, tid in wanted})
        wanted = [(exporter, tid) for exporter, tid in wanted if tid in finished]
        if wanted:
            await self._wait_delivered(wanted)

    async def _wait_delivered(self, wanted: list[tuple[AcknowledgingExporter, str]]) -> None:
        loop = asyncio.get_running_loop()
        waits: list[tuple[AcknowledgingExporter, str, asyncio.Future[None]]] = []
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
                timeout = max(exporter.ack_timeout for exporter, _, _ in waits)
                started = time.monotonic()
                await asyncio.wait(pending, timeout=timeout)
                late = [(e.name, tid) for e, tid, future in waits if not future.done()]
                if late:
                    logger.warning(
                        "waited=<%.1f>, late=<%d> | not delivered in time; acknowledged anyway, delivery goes on",
                        time.monotonic() - started,
                        len(late),
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

    def delivered(self, exporter: str, trajectory_id: str) -> None:
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


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
