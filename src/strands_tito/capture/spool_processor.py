"""Exporting strands-tito spans over OTLP without ever dropping one silently.

:class:`SpoolingSpanProcessor` stands where the SDK's ``BatchSpanProcessor`` would, for strands-tito spans only
(turns, calls, rewards, end signals; :class:`OtlpCaptureProcessor` routes every other span to an ordinary
``BatchSpanProcessor``):

* ``on_end`` puts a span on a bounded in-memory queue and returns (no I/O while the collector keeps up);
* one sender thread exports batches with the configured OTLP exporter. A batch the exporter gives up on (collector
  down, paused, refusing) is appended to the disk spool (:mod:`strands_tito.capture.spool`); when the queue passes its
  high water mark (the sender is stuck in a slow export), ``on_end`` moves the oldest spans there itself;
* while the spool holds records the sender resends them, oldest first, with backoff, before anything newer. A
  record that keeps failing while the collector answers an empty export request (a probe) is one the collector
  refuses (400: invalid, a trajectory already written), not one waiting for a collector that is down: after
  :data:`REFUSALS` such rounds it is set aside and its spans reported per trajectory, so it never holds up newer data
  of this process or of the next ones that adopt the spool;
* a span is refused only past the hard limit on undelivered bytes (memory and disk together,
  ``STRANDS_TITO_SPOOL_MAX_BYTES``). End signals and rewards have a reserve on top, so that only turn and call spans
  are ever dropped; each drop is counted for its trajectory (:func:`strands_tito.capture.recorder.note_dropped`),
  reported once per trajectory on stderr, and carried by the trajectory's end signal, so the collector's record says
  exactly which turns are missing. A spool write that fails (a full disk: ``ENOSPC``) is reported with its cause;
  the turn spans it held are dropped the same way, while end signals and rewards stay in memory for the sender, so
  every trajectory still gets its record, complete or saying what is missing;
* ``force_flush`` waits until everything is acknowledged (so a collector that holds its acknowledgement, as under
  Agent Lightning, still holds the exit) or until its deadline, then writes what is left to the spool and returns;
  ``shutdown`` does the same without waiting. The next process with the same spool key resends it.

The SDK's ``BatchSpanProcessor`` cannot be reused as is: it drops a span when its queue is full and a batch when the
exporter gives up, with no hook to keep either. Its two safeguards are kept here: every export runs with
instrumentation suppressed (an instrumented HTTP library would otherwise trace our own exports), and the fork hook
holds the processor weakly (a dropped processor is not kept alive by it).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from strands_tito import spans
from strands_tito.capture.recorder import note_dropped
from strands_tito.capture.spool import Spool, SpoolError, decode_request, encode_request
from strands_tito.settings import Settings, variable

logger = logging.getLogger(__name__)

ENV_MAX_BYTES = variable("spool_max_bytes").name
_DEFAULTS = Settings()
DEFAULT_MAX_BYTES = _DEFAULTS.spool_max_bytes
DEFAULT_QUEUE_SPANS = _DEFAULTS.spool_queue_spans
DEFAULT_QUEUE_BYTES = _DEFAULTS.spool_queue_bytes
RESERVE_BYTES = 8 * 1024**2  # for end signals and rewards (a few hundred bytes each) past the hard limit
BATCH_SPANS = 256
REFUSALS = 3  # failed rounds of one spool record, each followed by a successful probe, before it counts as refused
BATCH_BYTES = 4 * 1024**2  # well under the exporter's 64 MiB and a Collector's 20 MiB (HTTP) / 4 MiB (gRPC) default


def estimate_size(span: ReadableSpan) -> int:
    """About the bytes a span takes in OTLP protobuf: its attributes and events, cheap to compute."""
    size = 128 + len(span.name)
    for mapping in (span.attributes, *(event.attributes for event in span.events)):
        for key, value in (mapping or {}).items():
            size += len(key) + 8
            if isinstance(value, bytes | str):
                size += len(value)
            elif isinstance(value, list | tuple):
                size += 11 * len(value)
    return size


class SpoolingSpanProcessor(SpanProcessor):
    """Exports strands-tito spans with ``exporter``; what cannot be delivered now waits in ``spool`` (see module).

    Args:
        exporter: The OTLP exporter (HTTP or gRPC), configured as usual.
        spool: Where undeliverable spans wait; its leftovers from dead processes are sent first.
        max_bytes: Hard limit on undelivered bytes (queue and spool); turn spans past it are dropped and counted.
        queue_spans, queue_bytes: High water mark of the in-memory queue; past it spans go to the spool.
        schedule_delay: Longest a turn span waits in the queue before a (partial) batch is sent (the SDK's
            ``BatchSpanProcessor`` default, 5 s: every export is an HTTP request, about 1 ms of client CPU). An end
            signal or a reward is sent at once, with everything queued before it, so a finished trajectory reaches
            the collector without waiting.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        spool: Spool,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        queue_spans: int = DEFAULT_QUEUE_SPANS,
        queue_bytes: int = DEFAULT_QUEUE_BYTES,
        schedule_delay: float = 5.0,
        max_backoff: float = 2.0,
    ) -> None:
        self.exporter = exporter
        self.spool = spool
        self.max_bytes = max_bytes
        self.queue_spans = queue_spans
        self.queue_bytes = queue_bytes
        self.schedule_delay = schedule_delay
        self.max_backoff = max_backoff
        self._cond = threading.Condition()
        self._queue: deque[tuple[ReadableSpan, int]] = deque()
        self._queued_bytes = 0
        self._inflight: list[ReadableSpan] | None = None  # a memory batch being exported
        self._inflight_saved = False  # ... and already written to the spool (shutdown, flush deadline)
        self._first_queued = 0.0  # when the oldest span in the queue came
        self._urgent = False  # an end signal or reward is queued: send without waiting for the schedule
        self._flushes = 0
        self._stopped = False
        self._spill_lock = threading.Lock()
        self._forked = False
        self.dropped = 0
        self.spilled = 0
        self.exported = 0
        self.refused = 0
        self._reported: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="strands-tito-spool", daemon=True)
        self._thread.start()
        # A fork gets a copy of the queue but no sender thread (and must not share the spool's lock): it starts
        # clean, with a spool of its own, the way BatchSpanProcessor re-inits its worker. The hook holds the processor
        # weakly: os.register_at_fork cannot unregister, so a strong one would keep it (and its queue) alive for good.
        if hasattr(os, "register_at_fork"):
            after_fork = weakref.WeakMethod(self._after_fork)
            os.register_at_fork(after_in_child=lambda: _call_if_alive(after_fork))

    # -- SpanProcessor -----------------------------------------------------------------------------------------------

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do when a span starts."""

    def on_end(self, span: ReadableSpan) -> None:
        """Queue a finished strands-tito span (other spans are ignored); never blocks on the network."""
        attributes = span.attributes or {}
        if not spans.is_tito_span(attributes):
            return
        size = estimate_size(span)
        small = attributes.get(spans.KIND) in ("end", "reward")
        with self._cond:
            held = self._queued_bytes + self.spool.pending_bytes
            if self._forked or held + size > self.max_bytes + (RESERVE_BYTES if small else 0):
                self._drop(
                    span,
                    attributes,
                    f"{held} bytes of spans are waiting for the collector (limit {ENV_MAX_BYTES}={self.max_bytes})",
                )
                return
            if self._stopped:  # after shutdown: straight to disk, for the next process
                self._queue.append((span, size))
                self._queued_bytes += size
                over = True
            else:
                if not self._queue:
                    self._first_queued = time.monotonic()
                    self._cond.notify_all()
                self._queue.append((span, size))
                self._queued_bytes += size
                over = len(self._queue) > self.queue_spans or self._queued_bytes > self.queue_bytes
                if small and not self._urgent:
                    self._urgent = True
                    self._cond.notify_all()
                elif len(self._queue) == BATCH_SPANS or self._queued_bytes >= BATCH_BYTES:
                    self._cond.notify_all()
        if over:
            self._spill(keep=0 if self._stopped else self.queue_spans // 2)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every span so far is acknowledged, at most ``timeout_millis``; past it, write the rest to the
        spool (for the next process) and return False."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            self._flushes += 1
            self._cond.notify_all()
            try:
                while not self._idle():
                    left = deadline - time.monotonic()
                    if left <= 0 or self._stopped:
                        break
                    self._cond.wait(min(left, 0.05))
                done = self._idle()
            finally:
                self._flushes -= 1
        if not done:
            self._save_everything()
        return done

    def shutdown(self) -> None:
        """Write whatever is not delivered to the spool and close it (bounded: no network wait)."""
        with self._cond:
            if self._stopped:
                return
            self._stopped = True
            self._cond.notify_all()
        self._save_everything()
        self._thread.join(0.2)
        self.spool.close()
        if self.spool.pending_bytes:
            logger.warning(
                "bytes=<%d>, spool=<%s> | undelivered strands-tito spans stay in the spool for the next process",
                self.spool.pending_bytes,
                self.spool.dir,
            )
        self.exporter.shutdown()

    # -- internals ---------------------------------------------------------------------------------------------------

    def _idle(self) -> bool:
        return not self._queue and self._inflight is None and self.spool.pending_bytes == 0

    def _drop(self, span: ReadableSpan, attributes: Any, why: str) -> None:
        self.dropped += 1
        trajectory_id = str(attributes.get(spans.TRAJECTORY_ID, ""))
        index = attributes.get(spans.TURN_INDEX, attributes.get(spans.CALL_INDEX))
        note_dropped(trajectory_id, index if isinstance(index, int) else None)
        if trajectory_id not in self._reported:
            self._reported.add(trajectory_id)
            sys.stderr.write(
                f"strands-tito: dropped a {attributes.get(spans.KIND)} span of trajectory {trajectory_id}: {why}; "
                "its end signal will name what is missing\n"
            )
            sys.stderr.flush()

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

    def _spill(self, keep: int) -> None:
        """Move the oldest queued spans to the spool until at most ``keep`` are left in memory."""
        with self._spill_lock:
            with self._cond:
                batch: list[ReadableSpan] = []
                while len(self._queue) > keep:
                    span, size = self._queue.popleft()
                    self._queued_bytes -= size
                    batch.append(span)
                self._urgent = self._urgent and bool(self._queue)
            self._write(batch)

    def _save_everything(self) -> None:
        """Queue and in-flight batch to the spool (the in-flight one may still arrive too: resends are dropped)."""
        with self._cond:
            inflight = self._inflight if self._inflight is not None and not self._inflight_saved else None
            self._inflight_saved = True
        if inflight:
            self._write(inflight)
        self._spill(keep=0)

    def _write(self, batch: Sequence[ReadableSpan]) -> None:
        for start in range(0, len(batch), BATCH_SPANS):
            chunk = batch[start : start + BATCH_SPANS]
            try:
                self.spool.append(encode_request(chunk))
                self.spilled += len(chunk)
            except (OSError, SpoolError, ValueError) as e:
                # The disk failed us (ENOSPC, EIO, ...): turn and call spans are lost and reported per trajectory
                # with the cause; end signals and rewards (small) go back to the front of the queue, so that every
                # trajectory still ends, with a record that names what is missing.
                logger.error("error=<%s> | strands-tito spans could not be written to the spool", e)
                kept = [s for s in chunk if (s.attributes or {}).get(spans.KIND) in ("end", "reward")]
                with self._cond:
                    for span in chunk:
                        if span not in kept:
                            self._drop(span, span.attributes or {}, f"the spool could not be written ({e})")
                    for span in reversed(kept):
                        size = estimate_size(span)
                        self._queue.appendleft((span, size))
                        self._queued_bytes += size
                    self._urgent = self._urgent or bool(kept)
        with self._cond:
            self._cond.notify_all()

    def _take_batch(self) -> list[ReadableSpan]:
        batch: list[ReadableSpan] = []
        size = 0
        while self._queue and len(batch) < BATCH_SPANS and (not batch or size + self._queue[0][1] <= BATCH_BYTES):
            span, span_size = self._queue.popleft()
            self._queued_bytes -= span_size
            size += span_size
            batch.append(span)
        self._urgent = self._urgent and bool(self._queue)  # the rest of the queue (batch limits) goes next
        return batch

    def _export(self, spans: list[ReadableSpan]) -> bool:
        try:
            with suppress_instrumentation():  # our own exports must not be traced (and exported, and traced, ...)
                return self.exporter.export(spans) is SpanExportResult.SUCCESS
        except Exception as e:  # an exporter bug must not kill the sender
            logger.exception("error=<%s> | exporter raised", e)
            return False

    def _ready(self, now: float) -> bool:
        if self.spool.pending_bytes:
            return True
        if not self._queue:
            return False
        return bool(
            self._flushes
            or self._urgent
            or len(self._queue) >= BATCH_SPANS
            or self._queued_bytes >= BATCH_BYTES
            or now - self._first_queued >= self.schedule_delay
        )

    def _run(self) -> None:
        backoff, retry_at = 0.0, 0.0
        refusals: tuple[Any, int, int] | None = None  # (segment, end, rounds) of a record the collector refuses
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if now < retry_at:
                        self._cond.wait(retry_at - now)
                    elif self._ready(now):
                        break
                    else:
                        self._cond.wait(
                            max(self._first_queued + self.schedule_delay - now, 0.01) if self._queue else None
                        )
                if self._stopped:
                    return
                batch: list[ReadableSpan] = []
                if not self.spool.pending_bytes:
                    batch = self._take_batch()
                    self._inflight, self._inflight_saved = batch, False
                    self._first_queued = time.monotonic()
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
                with self._cond:
                    saved = self._inflight_saved
                if not ok and not saved:
                    self._write(batch)
            with self._cond:
                if batch:
                    self._inflight = None
                    if ok:
                        self.exported += len(batch)
                backoff = 0.0 if ok else min(max(backoff * 2, 0.1), self.max_backoff)
                retry_at = 0.0 if ok else time.monotonic() + backoff
                self._cond.notify_all()

    def _after_fork(self) -> None:
        self._cond = threading.Condition()
        self._queue.clear()
        self._queued_bytes = 0
        self._inflight = None
        self._stopped = True  # a forked child exports nothing through this instance ...
        self._forked = True  # ... and must not write into the parent's spool files: its spans count as dropped


def _call_if_alive(method: weakref.WeakMethod[Any]) -> None:
    bound = method()
    if bound is not None:
        bound()


class OtlpCaptureProcessor(SpanProcessor):
    """strands-tito spans to a :class:`SpoolingSpanProcessor`, every other span to an ordinary processor."""

    def __init__(self, tito: SpoolingSpanProcessor, others: SpanProcessor) -> None:
        self.tito = tito
        self.others = others

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Other processors may want to see starts."""
        self.others.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        """Route by whether the span carries strands-tito data."""
        if spans.is_tito_span(span.attributes or {}):
            self.tito.on_end(span)
        else:
            self.others.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """strands-tito's spans first, then the rest with the time left."""
        deadline = time.monotonic() + timeout_millis / 1000
        done = self.tito.force_flush(timeout_millis)
        left = int((deadline - time.monotonic()) * 1000)
        return self.others.force_flush(max(left, 0)) and done

    def shutdown(self) -> None:
        """Spool what is left, then shut the other processor down."""
        self.tito.shutdown()
        self.others.shutdown()


__all__ = [
    "ENV_MAX_BYTES",
    "OtlpCaptureProcessor",
    "SpoolingSpanProcessor",
    "estimate_size",
]
