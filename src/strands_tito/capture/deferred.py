"""Work that garbage-collection finalizers hand to capture's own thread instead of doing it where they fire.

A finalizer (an agent's state released) runs on whichever thread the collector interrupts, possibly one in the
middle of a span processor's or an exporter's bookkeeping with a plain lock held. An end signal emitted there starts
and ends a span, which runs every processor again and can wait on that very lock forever. So a finalizer only
queues the call (:meth:`DeferredCalls.defer`: a deque append and a ``queue.SimpleQueue.put``, neither takes a lock;
Python documents the latter as reentrant, for use in finalizers); a daemon thread of capture's runs it. Whatever is
still queued when capture needs it done runs on the caller's thread (:meth:`DeferredCalls.run_pending`): at exit
before the flush, and before :func:`~strands_tito.capture.recorder.record_reward` picks the one open trajectory.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["DeferredCalls", "call_when_released", "run_released_calls"]

logger = logging.getLogger(__name__)


class DeferredCalls:
    """Calls queued from finalizers, run in order on a thread of their own (or by :meth:`run_pending`)."""

    def __init__(self, thread_name: str) -> None:
        self.thread_name = thread_name
        # A call stays in _calls until it runs under _running, so run_pending either runs it or waits for it.
        self._calls: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._wakeup: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._running = threading.Lock()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def defer(self, function: Callable[..., Any], *args: Any) -> None:
        """Queue ``function(*args)``; safe in a finalizer (no lock is taken, nothing runs here)."""
        self._calls.append((function, args))
        self._wakeup.put(None)

    def ensure_worker(self) -> None:
        """Start the thread that runs queued calls, unless it is running (again in a forked child). Call it from
        ordinary code, before any finalizer can queue: starting a thread takes locks a finalizer must not."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            return
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self.thread_name, daemon=True)
                self._thread.start()

    def run_pending(self) -> int:
        """Run every queued call now, on this thread, after any call in progress; returns how many ran."""
        with self._running:
            return self._run_queued()

    def _work(self) -> None:
        while True:
            self._wakeup.get()
            with self._running:
                self._run_queued()

    def _run_queued(self) -> int:
        ran = 0
        while self._calls:
            function, args = self._calls.popleft()
            self._call(function, args)
            ran += 1
        return ran

    @staticmethod
    def _call(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            function(*args)
        except Exception:  # one failing call must not stop the thread that runs the others
            logger.exception("function=<%s> | a deferred capture call failed", getattr(function, "__name__", function))


#: Calls due when an agent's capture state is garbage-collected (its trajectories' end signals).
RELEASED = DeferredCalls("strands-tito-end-signals")


def call_when_released(owner: object, function: Callable[..., Any], *args: Any) -> None:
    """Have capture's thread run ``function(*args)`` after ``owner`` is garbage-collected; the finalizer only queues
    it. Not run at exit by the finalizer: :func:`run_released_calls` runs what is queued while the exporters are up."""
    RELEASED.ensure_worker()  # here, not in the finalizer: starting a thread takes locks
    finalizer = weakref.finalize(owner, RELEASED.defer, function, *args)
    finalizer.atexit = False


def run_released_calls() -> int:
    """Run the queued release calls now, on this thread (capture's shutdown, before it flushes)."""
    return RELEASED.run_pending()
