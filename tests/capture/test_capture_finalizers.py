"""A trajectory's end signal may come from a garbage-collection finalizer (an agent released), on whatever thread the
collector runs on, possibly one in the middle of capture's or an exporter's bookkeeping: it must never deadlock that
thread. The finalizer only queues it; capture's thread sends it, or whoever needs it sent first (the exit shutdown,
a reward that must know which trajectories are still open)."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from strands_tito import spans
from strands_tito.capture import deferred, recorder
from strands_tito.capture.deferred import DeferredCalls
from strands_tito.capture.lineage import SpanTree
from strands_tito.capture.recorder import AgentState
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


class HeldDuringEnd(SpanProcessor):
    """A span processor whose ``on_end`` holds a plain lock (as an exporter's bookkeeping does); while it holds it,
    ``during`` runs once: the moment garbage collection releases an agent's state on that thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.during: Callable[[], None] | None = None
        self.ended: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        with self.lock:
            self.ended.append(span)
            during, self.during = self.during, None
            if during is not None:
                during()

    def end_signals(self, trajectory: Trajectory) -> list[str]:
        """The reasons of the end signals of ``trajectory`` this processor has seen."""
        with self.lock:
            ends = [dict(span.attributes or {}) for span in self.ended if span.name == spans.SPAN_END]
        return [str(end[spans.END_REASON]) for end in ends if end[spans.TRAJECTORY_ID] == trajectory.trajectory_id]


def never_sent_by_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queued end signals stay queued until capture itself runs them (its thread never gets to them)."""
    idle = DeferredCalls("never started")
    monkeypatch.setattr(idle, "ensure_worker", lambda: None)
    monkeypatch.setattr(deferred, "RELEASED", idle)


def open_trajectories(monkeypatch: pytest.MonkeyPatch, count: int = 1) -> list[Trajectory]:
    """Trajectories with turns on spans and no end signal yet, each its own agent's (the only ones open here)."""
    trajectories = [Trajectory() for _ in range(count)]
    monkeypatch.setattr(recorder, "_open", {t.trajectory_id: t for t in trajectories})
    monkeypatch.setattr(recorder, "_active", {t.trajectory_id: (t, id(t)) for t in trajectories})
    return trajectories


def test_an_agent_released_inside_a_processors_lock_does_not_deadlock(
    plug: Callable[[SpanProcessor], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    processor = HeldDuringEnd()
    plug(processor)
    [trajectory] = open_trajectories(monkeypatch)
    states = [AgentState(trajectory)]

    def release() -> None:
        states.clear()
        gc.collect()

    processor.during = release
    # Sent inline from the finalizer, the end signal would wait for the lock its own thread holds.
    assert finishes(lambda: trace.get_tracer("test").start_span("work").end())
    deadline = time.monotonic() + 10
    while not processor.end_signals(trajectory) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert processor.end_signals(trajectory) == ["released"]  # sent by capture's thread once the lock was free


def test_an_end_signal_still_queued_at_exit_is_sent_by_the_shutdown(
    plug: Callable[[SpanProcessor], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    processor = HeldDuringEnd()
    plug(processor)
    never_sent_by_the_thread(monkeypatch)  # the process exits before capture's thread gets to the queue
    [trajectory] = open_trajectories(monkeypatch)
    state: AgentState | None = AgentState(trajectory)
    del state
    gc.collect()
    assert processor.end_signals(trajectory) == []  # queued, not sent
    recorder.shutdown_capture(timeout=1)
    assert processor.end_signals(trajectory) == ["released"]  # sent, and as what it was: not as an "exit"


def test_a_reward_without_agent_does_not_count_a_released_agent_whose_end_is_queued(
    plug: Callable[[SpanProcessor], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    processor = HeldDuringEnd()
    plug(processor)
    never_sent_by_the_thread(monkeypatch)
    released, running = open_trajectories(monkeypatch, 2)
    state: AgentState | None = AgentState(released)
    del state
    gc.collect()
    recorder.record_reward(1.0)  # the one agent still open: not "2 agents have open trajectories"
    rewarded = [dict(span.attributes or {}) for span in processor.ended if span.name == spans.SPAN_REWARD]
    assert [reward[spans.TRAJECTORY_ID] for reward in rewarded] == [running.trajectory_id]
    assert processor.end_signals(released) == ["released"]
