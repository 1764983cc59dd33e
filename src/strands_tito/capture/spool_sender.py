"""The spool processor's sender: the one thread that exports, the disk spool first, then the in-memory queue.

While the spool holds records the sender resends them, oldest first, with backoff, before anything newer. A record
that keeps failing while the collector answers an empty export request (a probe) is one the collector refuses (400:
invalid, a trajectory already written), not one waiting for a collector that is down: after :data:`REFUSALS` such
rounds it is set aside and its spans reported per trajectory, so it never holds up newer data of this process or of
the next ones that adopt the spool. A queued batch the exporter gives up on goes to the spool (the processor's
``save``). Every export runs with instrumentation suppressed: an instrumented HTTP library would otherwise trace our
own exports (and export those spans, and trace that, ...).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from strands_tito import spans
from strands_tito.capture.spool import Spool, decode_request
from strands_tito.capture.spool_queue import SpanQueue

logger = logging.getLogger(__name__)

REFUSALS = 3  # failed rounds of one spool record, each followed by a successful probe, before it counts as refused


class Sender:
    """Exports the spool's records and the queue's batches on a daemon thread (started at once).

    Args:
        exporter: The OTLP exporter.
        spool: The disk spool, sent first.
        queue: The in-memory queue (its condition guards this sender's state too).
        save: Writes a batch the exporter gave up on to the spool.
        max_backoff: Longest wait between failed rounds, in seconds.

    Attributes:
        exported: Spans of queued batches the collector acknowledged.
        refused: Spans set aside because the collector refused them (see module).
    """

    def __init__(
        self,
        exporter: SpanExporter,
        spool: Spool,
        queue: SpanQueue,
        save: Callable[[Sequence[ReadableSpan]], None],
        *,
        max_backoff: float,
    ) -> None:
        self.exporter = exporter
        self.spool = spool
        self.queue = queue
        self.save = save
        self.max_backoff = max_backoff
        self.exported = 0
        self.refused = 0
        self.stopped = False
        self._inflight: list[ReadableSpan] | None = None  # a queued batch being exported
        self._inflight_saved = False  # ... and already written to the spool (shutdown, flush deadline)
        self._flushes = 0
        self._thread = threading.Thread(target=self._run, name="strands-tito-spool", daemon=True)
        self._thread.start()

    # -- what the processor asks of it ------------------------------------------------------------------------------

    def flush(self, deadline: float) -> bool:
        """Wait until everything queued or spooled so far is acknowledged, until ``deadline`` (monotonic) at most;
        whether it was."""
        with self.queue.cond:
            self._flushes += 1
            self.queue.cond.notify_all()
            try:
                while not self._idle():
                    left = deadline - time.monotonic()
                    if left <= 0 or self.stopped:
                        break
                    self.queue.cond.wait(min(left, 0.05))
                return self._idle()
            finally:
                self._flushes -= 1

    def stop(self) -> bool:
        """Stop sending (the thread ends at its next wait); False when it was stopped already."""
        with self.queue.cond:
            if self.stopped:
                return False
            self.stopped = True
            self.queue.cond.notify_all()
        return True

    def join(self, timeout: float) -> None:
        """Wait for the thread to end, at most ``timeout`` seconds."""
        self._thread.join(timeout)

    def take_unsaved(self) -> list[ReadableSpan] | None:
        """The batch in flight, if it is not in the spool yet; from now on it counts as saved (it may still arrive
        too: the collector drops resent spans)."""
        with self.queue.cond:
            inflight = self._inflight if self._inflight is not None and not self._inflight_saved else None
            self._inflight_saved = True
        return inflight

    def after_fork(self) -> None:
        """In a forked child (no sender thread there): stopped, nothing in flight."""
        self._inflight = None
        self.stopped = True

    # -- the thread ---------------------------------------------------------------------------------------------------

    def _idle(self) -> bool:
        return not self.queue and self._inflight is None and self.spool.pending_bytes == 0

    def _export(self, batch: list[ReadableSpan]) -> bool:
        try:
            with suppress_instrumentation():
                return self.exporter.export(batch) is SpanExportResult.SUCCESS
        except Exception as e:  # an exporter bug must not kill the sender
            logger.exception("error=<%s> | exporter raised", e)
            return False

    def _next_batch(self, retry_at: float) -> list[ReadableSpan] | None:
        """Wait for work; the queued batch to send (empty: the spool's turn), or None when stopped."""
        queue = self.queue
        with queue.cond:
            while not self.stopped:
                now = time.monotonic()
                if now < retry_at:
                    queue.cond.wait(retry_at - now)
                elif self.spool.pending_bytes or queue.ready(now, flushing=self._flushes > 0):
                    break
                else:
                    queue.wait_for_spans(now)
            if self.stopped:
                return None
            if self.spool.pending_bytes:
                return []
            batch = queue.take_batch()
            self._inflight, self._inflight_saved = batch, False
            return batch

    def _run(self) -> None:
        backoff, retry_at = 0.0, 0.0
        refusals: tuple[Any, int, int] | None = None  # (segment, end, rounds) of a record the collector refuses
        while (batch := self._next_batch(retry_at)) is not None:
            ok = True
            record = self.spool.peek() if not batch else None
            if record is not None:
                segment, end, payload = record
                spooled = decode_request(payload)
                ok = self._export(spooled)
                if not ok and self._export([]):  # the collector is up: it refuses this record
                    rounds = (
                        refusals[2] + 1 if refusals is not None and refusals[0] is segment and refusals[1] == end else 1
                    )
                    refusals = (segment, end, rounds)
                    if rounds >= REFUSALS:
                        self._report_refused(spooled)
                        ok, refusals = True, None
                if ok:
                    self.spool.ack(segment, end)
            elif batch:
                ok = self._export(batch)
                with self.queue.cond:
                    saved = self._inflight_saved
                if not ok and not saved:
                    self.save(batch)
            with self.queue.cond:
                if batch:
                    self._inflight = None
                    if ok:
                        self.exported += len(batch)
                backoff = 0.0 if ok else min(max(backoff * 2, 0.1), self.max_backoff)
                retry_at = 0.0 if ok else time.monotonic() + backoff
                self.queue.cond.notify_all()

    def _report_refused(self, refused: Sequence[ReadableSpan]) -> None:
        """Report, once per trajectory, spans the collector refuses; they are not sent again."""
        self.refused += len(refused)
        counts: dict[str, int] = {}
        for span in refused:
            trajectory_id = str((span.attributes or {}).get(spans.TRAJECTORY_ID, ""))
            counts[trajectory_id] = counts.get(trajectory_id, 0) + 1
        for trajectory_id, count in counts.items():
            sys.stderr.write(
                f"strands-tito: the collector refused {count} span(s) of trajectory {trajectory_id} {REFUSALS} times "
                "while it accepted other requests (invalid, or the trajectory was already written: see the "
                "collector's log); not sent again\n"
            )
        sys.stderr.flush()
