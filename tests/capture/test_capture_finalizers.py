"""A trajectory's end signal may come from a garbage-collection finalizer (an agent released), on whatever thread the
collector runs on, possibly one in the middle of capture's own bookkeeping: it must never deadlock that thread."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable

from opentelemetry.sdk.trace import TracerProvider

from strands_tito.capture import recorder
from strands_tito.capture.lineage import SpanTree
from strands_tito.trajectory import Trajectory


def finishes(work: Callable[[], None], timeout: float = 10.0) -> bool:
    """Whether ``work`` returns on a daemon thread within ``timeout`` (a deadlocked thread is left behind)."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()


class Released:
    """Stands in for an agent's state, whose finalizer starts a span."""


def test_a_finalizer_starting_a_span_inside_the_span_tree_does_not_deadlock() -> None:
    provider = TracerProvider()
    tree = SpanTree()
    provider.add_span_processor(tree)
    tracer = provider.get_tracer("test")
    ended: list[bool] = []

    def work() -> None:
        state = Released()
        weakref.finalize(state, lambda: (tracer.start_span("end").end(), ended.append(True)))
        with tree._lock:  # the moment garbage collection interrupts the tree's own bookkeeping
            del state
            gc.collect()

    assert finishes(work)
    assert ended == [True]


def test_an_end_signal_from_a_finalizer_inside_the_recorder_does_not_deadlock() -> None:
    def work() -> None:
        with recorder._lock:  # the moment garbage collection interrupts the recorder's own bookkeeping
            recorder.end_trajectory(Trajectory(), "released")

    assert finishes(work)
