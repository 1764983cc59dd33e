"""Exporting strands-tito spans over OTLP without ever dropping one silently.

:class:`SpoolingSpanProcessor` stands where the SDK's ``BatchSpanProcessor`` would, for strands-tito spans only
(turns, calls, rewards, end signals; :class:`OtlpCaptureProcessor` routes every other span to an ordinary
``BatchSpanProcessor``). It is this module's surface over three small parts: the in-memory queue
(:mod:`~strands_tito.capture.spool_queue`), the sender thread (:mod:`~strands_tito.capture.spool_sender`) and the disk
spool (:mod:`~strands_tito.capture.spool`).

* ``on_end`` puts a span on the bounded in-memory queue and returns (no I/O while the collector keeps up);
* the sender exports batches with the configured OTLP exporter. A batch the exporter gives up on (collector down,
  paused, refusing) is appended to the disk spool; when the queue passes its high water mark (the sender is stuck in
  a slow export), ``on_end`` moves the oldest spans there itself;
* while the spool holds records the sender resends them, oldest first, with backoff, before anything newer, and sets
  aside a record the collector keeps refusing (see :mod:`~strands_tito.capture.spool_sender`);
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

Why not the SDK's ``BatchSpanProcessor`` (opentelemetry-sdk 1.45, its ``BatchProcessor`` in
``opentelemetry/sdk/_shared_internal/__init__.py``): ``emit`` appends to a ``deque(maxlen=max_queue_size)``, which
evicts the oldest span when full with only a log line; ``_export`` pops a batch off the queue, then calls
``exporter.export`` and ignores its result, so a batch the exporter gives up on is gone; ``force_flush`` ignores its
timeout and returns True whatever happened. None of these has a hook to keep the span or the batch, and they are
private methods of a private module. Its two safeguards are kept here: exports run with instrumentation suppressed,
and the fork hook holds the processor weakly (a dropped processor is not kept alive by it).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from strands_tito import spans
from strands_tito.capture.endpoint_check import endpoint_reported
from strands_tito.capture.recorder import note_dropped
from strands_tito.capture.spool import Spool, SpoolError, encode_request
from strands_tito.capture.spool_queue import BATCH_SPANS, SpanQueue, estimate_size
from strands_tito.capture.spool_sender import Sender
from strands_tito.settings import Settings, variable

logger = logging.getLogger(__name__)

ENV_MAX_BYTES = variable("spool_max_bytes").name
_DEFAULTS = Settings()
DEFAULT_MAX_BYTES = _DEFAULTS.spool_max_bytes
DEFAULT_QUEUE_SPANS = _DEFAULTS.spool_queue_spans
DEFAULT_QUEUE_BYTES = _DEFAULTS.spool_queue_bytes
RESERVE_BYTES = 8 * 1024**2  # for end signals and rewards (a few hundred bytes each) past the hard limit


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
        max_backoff: Longest wait between failed export rounds, in seconds.

    Attributes:
        dropped: Spans dropped (past the hard limit, or lost with a failed spool write).
        spilled: Spans written to the spool.
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
        self.dropped = 0
        self.spilled = 0
        self._queue = SpanQueue(schedule_delay)
        self._spill_lock = threading.Lock()
        self._forked = False
        self._reported: set[str] = set()
        self._sender = Sender(exporter, spool, self._queue, self._write, max_backoff=max_backoff)
        # A fork gets a copy of the queue but no sender thread (and must not share the spool's lock): it starts
        # clean, with a spool of its own, the way BatchSpanProcessor re-inits its worker. The hook holds the processor
        # weakly: os.register_at_fork cannot unregister, so a strong one would keep it (and its queue) alive for good.
        if hasattr(os, "register_at_fork"):
            after_fork = weakref.WeakMethod(self._after_fork)
            os.register_at_fork(after_in_child=lambda: _call_if_alive(after_fork))

    @property
    def exported(self) -> int:
        """Spans of queued batches the collector acknowledged."""
        return self._sender.exported

    @property
    def refused(self) -> int:
        """Spans set aside because the collector kept refusing them."""
        return self._sender.refused

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
        queue = self._queue
        with queue.cond:
            held = queue.bytes + self.spool.pending_bytes
            if self._forked or held + size > self.max_bytes + (RESERVE_BYTES if small else 0):
                self._drop(
                    span,
                    attributes,
                    f"{held} bytes of spans are waiting for the collector (limit {ENV_MAX_BYTES}={self.max_bytes})",
                )
                return
            queue.put(span, size, urgent=small)
            stopped = self._sender.stopped  # after shutdown: straight to disk, for the next process
            over = stopped or len(queue) > self.queue_spans or queue.bytes > self.queue_bytes
        if over:
            self._spill(keep=0 if stopped else self.queue_spans // 2)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Wait until every span so far is acknowledged, at most ``timeout_millis``; past it, write the rest to the
        spool (for the next process) and return False."""
        done = self._sender.flush(time.monotonic() + timeout_millis / 1000)
        if not done:
            self._save_everything()
        return done

    def shutdown(self) -> None:
        """Write whatever is not delivered to the spool and close it (bounded: no network wait)."""
        if not self._sender.stop():
            return
        self._save_everything()
        self._sender.join(0.2)
        self.spool.close()
        if self.spool.pending_bytes and not endpoint_reported():  # else the endpoint's line named the spool
            logger.warning(
                "bytes=<%d>, spool=<%s> | undelivered strands-tito spans stay in the spool for the next process",
                self.spool.pending_bytes,
                self.spool.dir,
            )
        self.exporter.shutdown()

    # -- internals ---------------------------------------------------------------------------------------------------

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

    def _spill(self, keep: int) -> None:
        """Move the oldest queued spans to the spool until at most ``keep`` are left in memory."""
        with self._spill_lock:
            with self._queue.cond:
                batch = self._queue.take_oldest(keep)
            self._write(batch)

    def _save_everything(self) -> None:
        """Queue and in-flight batch to the spool (the in-flight one may still arrive too: resends are dropped)."""
        inflight = self._sender.take_unsaved()
        if inflight:
            self._write(inflight)
        self._spill(keep=0)

    def _write(self, batch: Sequence[ReadableSpan]) -> None:
        """Append spans to the spool; on a disk failure, drop the turn and call spans (reported) and put the end
        signals and rewards back at the front of the queue."""
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
                with self._queue.cond:
                    for span in chunk:
                        if span not in kept:
                            self._drop(span, span.attributes or {}, f"the spool could not be written ({e})")
                    self._queue.put_back(kept)
        with self._queue.cond:
            self._queue.cond.notify_all()

    def _after_fork(self) -> None:
        self._queue.after_fork()
        self._sender.after_fork()  # a forked child exports nothing through this instance ...
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
