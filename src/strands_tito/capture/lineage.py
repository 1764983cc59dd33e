"""Multi-agent lineage from span parentage: which episode a trajectory belongs to and which agent started it.

An agent called as a tool runs inside its caller's ``execute_tool`` span, so the caller's ``invoke_agent`` span is
an ancestor of every span of the sub-agent; a Strands Swarm or Graph runs its agents under one multi-agent span. At a
trajectory's first model call all of its ancestors are still open, and :class:`SpanTree` (a span processor that
keeps the open spans) lets capture walk them:

- the agent is the nearest ``invoke_agent`` ancestor (its ``gen_ai.agent.name``);
- the parent trajectory is the one recorded under the next ``invoke_agent`` ancestor up (the calling agent);
- the episode is the parent's episode, else the Agent Lightning rollout, else the trace the trajectory started in
  (shared by an orchestrator and its sub-agents, and by the agents of one swarm or graph).

The tree must be on the tracer provider before the agents run (capture attaches it to the global SDK provider when
a model is built and at every model call); without it a trajectory still gets its trace as its episode, no parent.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from strands_tito.span_lineage import Lineage

_INVOKE_AGENT = "invoke_agent"


@dataclass(frozen=True)
class _Open:
    parent: int | None
    agent_name: str | None  # set on invoke_agent spans only


class SpanTree(SpanProcessor):
    """Keeps every open span's parent (and, for ``invoke_agent`` spans, the agent's name) by span id."""

    def __init__(self) -> None:
        self._open: dict[int, _Open] = {}
        self._agents: dict[int, str] = {}  # invoke_agent span id -> the trajectory recorded under it
        # Re-entrant: a trajectory's end signal is a span, and it can start on this thread from a garbage-collection
        # finalizer (an agent released) while this thread holds the lock; a plain lock deadlocks the process there.
        self._lock = threading.RLock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        attributes = span.attributes or {}
        is_agent = attributes.get("gen_ai.operation.name") == _INVOKE_AGENT or span.name.startswith(_INVOKE_AGENT)
        name = attributes.get("gen_ai.agent.name") if is_agent else None
        with self._lock:
            self._open[span.context.span_id] = _Open(
                span.parent.span_id if span.parent is not None else None,
                str(name) if is_agent and name is not None else ("" if is_agent else None),
            )

    def on_end(self, span: ReadableSpan) -> None:
        span_id = span.context.span_id if span.context is not None else None
        with self._lock:
            self._open.pop(span_id, None)  # type: ignore[arg-type]
            self._agents.pop(span_id, None)  # type: ignore[arg-type]

    def shutdown(self) -> None:
        with self._lock:
            self._open.clear()
            self._agents.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def place(self, span_id: int, trajectory_id: str) -> tuple[str | None, str | None]:
        """For a trajectory's first span: ``(agent name, parent trajectory id)`` from its open ancestors; registers
        the trajectory under its agent's ``invoke_agent`` span so the agents it calls find it."""
        with self._lock:
            own: int | None = None
            current = self._open.get(span_id)
            ancestor = span_id
            while current is not None:
                if current.agent_name is not None:
                    if own is None:
                        own = ancestor
                        self._agents.setdefault(ancestor, trajectory_id)
                    elif ancestor in self._agents:
                        return self._name(own), self._agents[ancestor]
                if current.parent is None:
                    break
                ancestor = current.parent
                current = self._open.get(ancestor)
            return (self._name(own) if own is not None else None), None

    def _name(self, span_id: int) -> str | None:
        entry = self._open.get(span_id)
        return entry.agent_name or None if entry is not None else None


_tree = SpanTree()
_attached: set[int] = set()
_attach_lock = threading.Lock()


def attach_span_tree(provider: Any = None) -> None:
    """Add the span tree to ``provider`` (default: the global tracer provider) if it is an SDK provider (once)."""
    provider = provider if provider is not None else trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        return
    with _attach_lock:
        if id(provider) in _attached:
            return
        _attached.add(id(provider))
    provider.add_span_processor(_tree)


def lineage_of(
    span: Any,
    trajectory_id: str,
    *,
    agent_id: str | None,
    agent_name: str | None,
    episode_of: dict[str, Lineage],
    rollout_id: str | None,
) -> Lineage:
    """The lineage of a trajectory whose first model call is ``span`` (the current chat span).

    Args:
        span: The current span.
        trajectory_id: The trajectory.
        agent_id: The agent's id when the provider knows the agent.
        agent_name: The agent's name when the provider knows the agent (else the ``invoke_agent`` span's).
        episode_of: The lineage of the trajectories recorded so far (the parent's episode is the child's).
        rollout_id: The Agent Lightning rollout, when running under one.
    """
    context = span.get_span_context()
    found_name, parent = _tree.place(context.span_id, trajectory_id) if context.is_valid else (None, None)
    known = episode_of.get(parent) if parent is not None else None
    if known is not None and known.episode_id is not None:
        episode = known.episode_id
    else:
        episode = rollout_id or (f"{context.trace_id:032x}" if context.is_valid else trajectory_id)
    return Lineage(episode, parent, agent_id, agent_name or found_name)
