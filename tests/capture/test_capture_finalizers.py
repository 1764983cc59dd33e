"""A trajectory's end signal may come from a garbage-collection finalizer (an agent released), on whatever thread the
collector runs on, possibly one in the middle of capture's or an exporter's bookkeeping: it must never deadlock that
thread. The finalizer only queues it; capture's thread sends it, or whoever needs it sent first (the exit shutdown,
a reward that must know which trajectories are still open)."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import ClassVar

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from strands_tito import spans
from strands_tito.capture import deferred, recorder
from strands_tito.capture.deferred import DeferredCalls
from strands_tito.capture.recorder import AgentState
from strands_tito.trajectory import Trajectory

from ..helpers.capture import make_trajectory


def finishes(work: Callable[[], None], timeout: float = 10.0) -> bool:
    """Whether ``work`` returns on a daemon thread within ``timeout`` (a deadlocked thread is left behind)."""
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()


class Released:
    """Stands in for an agent's state: in a reference cycle, so only the garbage collector frees it (and runs its
    finalizers), wherever it happens to run."""

    def __init__(self) -> None:
        self.cycle = self


class CollectsWhenHashed:
    """A key whose hash runs the garbage collector. Looked up by a public operation under one of capture's locks, it
    is the moment garbage collection interrupts that bookkeeping (as any allocation there may); :attr:`inside` tells
    a finalizer whether it runs there."""

    inside: ClassVar[bool] = False

    def __hash__(self) -> int:
        CollectsWhenHashed.inside = True
        try:
            gc.collect()
        finally:
            CollectsWhenHashed.inside = False
        return super().__hash__()


class CollectingTrajectoryId(CollectsWhenHashed, str):
    """A trajectory id whose lookup collects garbage."""


@contextlib.contextmanager
def collection_only_where_asked() -> Iterator[None]:
    """No automatic collection meanwhile: the released state is freed where the test collects, not a line earlier."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def test_an_end_signal_from_a_finalizer_inside_the_recorder_does_not_deadlock() -> None:
    ended: list[bool] = []

    def work() -> None:
        state: Released | None = Released()
        trajectory = Trajectory()
        weakref.finalize(
            state, lambda: (recorder.end_trajectory(trajectory, "released"), ended.append(CollectsWhenHashed.inside))
        )
        del state
        # collects while the recorder holds its lock
        recorder.lineage_of_trajectory(CollectingTrajectoryId(trajectory.trajectory_id))

    with collection_only_where_asked():
        assert finishes(work)
    assert ended == [True]


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


@pytest.fixture
def open_trajectories(provider: TracerProvider) -> Iterator[Callable[[int], list[Trajectory]]]:
    """Makes trajectories with a turn recorded on a span and no end signal yet, each its own agent's; ends what is
    still open after the test."""
    made: list[Trajectory] = []

    def make(count: int) -> list[Trajectory]:
        gc.collect()  # earlier tests' released agents end their trajectories: these are the ones open
        tracer = trace.get_tracer("test")
        for _ in range(count):
            trajectory = make_trajectory(turns=1, tokens=4)
            with tracer.start_as_current_span("chat"):
                recorder.record_turn(trajectory, trajectory.turns[-1], model_id=None)
            made.append(trajectory)
        return made[-count:]

    yield make
    for trajectory in made:
        recorder.end_trajectory(trajectory, "test over")


def test_an_agent_released_inside_a_processors_lock_does_not_deadlock(
    plug: Callable[[SpanProcessor], None], open_trajectories: Callable[[int], list[Trajectory]]
) -> None:
    processor = HeldDuringEnd()
    plug(processor)
    [trajectory] = open_trajectories(1)
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
    plug: Callable[[SpanProcessor], None],
    monkeypatch: pytest.MonkeyPatch,
    open_trajectories: Callable[[int], list[Trajectory]],
) -> None:
    processor = HeldDuringEnd()
    plug(processor)
    never_sent_by_the_thread(monkeypatch)  # the process exits before capture's thread gets to the queue
    [trajectory] = open_trajectories(1)
    state: AgentState | None = AgentState(trajectory)
    del state
    gc.collect()
    assert processor.end_signals(trajectory) == []  # queued, not sent
    recorder.shutdown_capture(timeout=1)
    assert processor.end_signals(trajectory) == ["released"]  # sent, and as what it was: not as an "exit"


def test_a_reward_without_agent_does_not_count_a_released_agent_whose_end_is_queued(
    plug: Callable[[SpanProcessor], None],
    monkeypatch: pytest.MonkeyPatch,
    open_trajectories: Callable[[int], list[Trajectory]],
) -> None:
    processor = HeldDuringEnd()
    plug(processor)
    never_sent_by_the_thread(monkeypatch)
    released, running = open_trajectories(2)
    state: AgentState | None = AgentState(released)
    del state
    gc.collect()
    recorder.record_reward(1.0)  # the one agent still open: not "2 agents have open trajectories"
    rewarded = [dict(span.attributes or {}) for span in processor.ended if span.name == spans.SPAN_REWARD]
    assert [reward[spans.TRAJECTORY_ID] for reward in rewarded] == [running.trajectory_id]
    assert processor.end_signals(released) == ["released"]
