"""The spool processor's in-memory queue: finished strands-tito spans waiting for the sender.

:class:`SpanQueue` holds spans with their estimated sizes, oldest first, and decides when a batch is worth sending
(a full batch, an end signal or reward waiting, a flush, or the oldest span past the schedule delay). Its condition,
:attr:`SpanQueue.cond`, is the one lock of the spool processor: the queue, the sender's batch in flight and its
flush and stop requests change under it, and both sides wait on it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan

BATCH_SPANS = 256
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


class SpanQueue:
    """Spans waiting to be sent, oldest first. Every method but :meth:`after_fork` wants :attr:`cond` held.

    Args:
        schedule_delay: Longest a turn span waits before a (partial) batch is sent.

    Attributes:
        cond: The processor's one lock, notified whenever there is something new to send or the queue changed.
        bytes: The estimated size of the spans queued.
    """

    def __init__(self, schedule_delay: float) -> None:
        self.cond = threading.Condition()
        self.schedule_delay = schedule_delay
        self.bytes = 0
        self._spans: deque[tuple[ReadableSpan, int]] = deque()
        self._first_queued = 0.0  # when the oldest span in the queue came (reset as each batch is taken)
        self._urgent = False  # an end signal or reward is queued: send without waiting for the schedule

    def __len__(self) -> int:
        return len(self._spans)

    def put(self, span: ReadableSpan, size: int, *, urgent: bool) -> None:
        """Queue a span; ``urgent`` (an end signal or reward) sends it with everything before it at once."""
        if not self._spans:
            self._first_queued = time.monotonic()
            self.cond.notify_all()
        self._spans.append((span, size))
        self.bytes += size
        if urgent and not self._urgent:
            self._urgent = True
            self.cond.notify_all()
        elif len(self._spans) == BATCH_SPANS or self.bytes >= BATCH_BYTES:
            self.cond.notify_all()

    def put_back(self, spans: Sequence[ReadableSpan]) -> None:
        """Return spans to the front of the queue, in order, to be sent first (end signals and rewards the spool
        could not take)."""
        for span in reversed(spans):
            size = estimate_size(span)
            self._spans.appendleft((span, size))
            self.bytes += size
        self._urgent = self._urgent or bool(spans)

    def take_batch(self) -> list[ReadableSpan]:
        """The oldest spans, up to a batch (:data:`BATCH_SPANS`, :data:`BATCH_BYTES`; at least one)."""
        batch: list[ReadableSpan] = []
        size = 0
        while self._spans and len(batch) < BATCH_SPANS and (not batch or size + self._spans[0][1] <= BATCH_BYTES):
            span, span_size = self._spans.popleft()
            self.bytes -= span_size
            size += span_size
            batch.append(span)
        self._urgent = self._urgent and bool(self._spans)  # the rest of the queue (batch limits) goes next
        self._first_queued = time.monotonic()
        return batch

    def take_oldest(self, keep: int) -> list[ReadableSpan]:
        """The oldest spans, until at most ``keep`` are left (for the disk spool)."""
        taken: list[ReadableSpan] = []
        while len(self._spans) > keep:
            span, size = self._spans.popleft()
            self.bytes -= size
            taken.append(span)
        self._urgent = self._urgent and bool(self._spans)
        return taken

    def ready(self, now: float, *, flushing: bool) -> bool:
        """Whether a batch should be sent now."""
        if not self._spans:
            return False
        return bool(
            flushing
            or self._urgent
            or len(self._spans) >= BATCH_SPANS
            or self.bytes >= BATCH_BYTES
            or now - self._first_queued >= self.schedule_delay
        )

    def wait_for_spans(self, now: float) -> None:
        """Wait until the oldest span is due (or, with none queued, until notified)."""
        self.cond.wait(max(self._first_queued + self.schedule_delay - now, 0.01) if self._spans else None)

    def after_fork(self) -> None:
        """In a forked child: empty, with a fresh lock (the parent's may have been held by a thread that is gone)."""
        self.cond = threading.Condition()
        self._spans.clear()
        self.bytes = 0
