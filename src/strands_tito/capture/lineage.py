"""Multi-agent lineage: which episode a trajectory belongs to, which agent started it, and where in a graph or swarm.

Every agent invocation and every Graph or Swarm run opens a *frame* when its span starts (Strands' ``invoke_agent``,
``invoke_graph`` and ``invoke_swarm`` spans, seen by :class:`SpanTree`, a span processor) and closes it when the span
ends. The frame goes into a context variable in the context that started the span; the agent's loop, its tools and the
sub-agents they call run in that context or copies of it (asyncio tasks, Strands' threads copy it), so at a
trajectory's first model call the frames around it are found there, not by span parentage: the spans between an agent
and its sub-agents (cycles, tools) need not be recorded at all. Capture's own sampler records the three frame spans
without exporting them (``RECORD_ONLY``, see :mod:`~strands_tito.capture.sampler`). A frame left in a context after its
span ended (an async generator's context leaks into its consumer's) is skipped: only open frames count.

- the agent is the nearest open agent frame (its ``gen_ai.agent.name``);
- the parent trajectory is the one whose turn was recorded last under the enclosing agent frame (the calling
  agent's, the turn that called the tool);
- the episode is the parent's episode, else the Agent Lightning rollout, else the trace the trajectory started in
  (shared by an orchestrator and its sub-agents, and by the agents of one swarm or graph);
- the place in a Graph or Swarm (:class:`~strands_tito.span_lineage.NodePlace`) comes from the node Strands was
  about to run when the agent's frame opened, which :func:`watch_nodes` learns from Strands' own node-input step;
- the invocation index counts the trajectories of one agent in one episode (a swarm agent runs afresh at each
  handoff), so no two records share ``(episode_id, agent_id, invocation_index, sample_index)``.

The tree must be on the tracer provider before the first agent's span starts: capture attaches it when it attaches to
(or installs) the provider, before Strands creates its tracer; without it a trajectory still gets its trace as its
episode, no parent.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider

from strands_tito.span_lineage import Lineage, NodePlace

__all__ = [
    "MULTI_AGENT_SPANS",
    "SpanTree",
    "attach_span_tree",
    "is_frame_span",
    "lineage_of",
    "note_turn",
    "outside_turn",
    "serving_agent",
    "watch_nodes",
]

logger = logging.getLogger(__name__)

_INVOKE_AGENT = "invoke_agent"
#: Strands' span of one Graph or Swarm run, and the kind of run it is.
MULTI_AGENT_SPANS = {"invoke_graph": "graph", "invoke_swarm": "swarm"}
#: Episodes whose invocation counts are kept (least recently used dropped past it; a count is per running episode).
_EPISODES_KEPT = 4096


def is_frame_span(name: str) -> bool:
    """Whether a span of this name opens a frame (an agent invocation, a Graph or Swarm run)."""
    return name.startswith(_INVOKE_AGENT) or name in MULTI_AGENT_SPANS


@dataclass(eq=False)
class _Frame:
    kind: str  # "agent", "graph" or "swarm"
    name: str | None
    parent: _Frame | None  # the nearest open frame when this one opened
    span_id: int = 0
    place: NodePlace | None = None  # the graph or swarm node this frame runs as
    is_open: bool = True
    trajectory: str | None = None  # agent frames: the trajectory of the latest turn recorded under it
    steps: int = 0  # multi-agent frames: nodes started so far


@dataclass(frozen=True)
class _NodeStart:
    run: _Frame
    node_id: str
    inputs: tuple[str, ...]


_current: ContextVar[_Frame | None] = ContextVar("strands_tito_frame", default=None)
_node: ContextVar[_NodeStart | None] = ContextVar("strands_tito_node", default=None)
_purpose: ContextVar[str | None] = ContextVar("strands_tito_purpose", default=None)


def _open(frame: _Frame | None) -> _Frame | None:
    while frame is not None and not frame.is_open:
        frame = frame.parent
    return frame


def _agent(frame: _Frame | None) -> _Frame | None:
    frame = _open(frame)
    while frame is not None and frame.kind != "agent":
        frame = frame.parent
    return frame


class SpanTree(SpanProcessor):
    """Opens a frame when an agent, Graph or Swarm span starts, closes it when the span ends.

    Only those spans are looked at (a name test for any other); no lock is taken: the bookkeeping is one dictionary
    entry per open frame, set and removed atomically.
    """

    def __init__(self) -> None:
        self._frames: dict[int, _Frame] = {}

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        name = span.name
        if name.startswith(_INVOKE_AGENT):
            kind = "agent"
            agent_name = (span.attributes or {}).get("gen_ai.agent.name")
            label = str(agent_name) if agent_name is not None else None
        elif name in MULTI_AGENT_SPANS:
            kind, label = MULTI_AGENT_SPANS[name], None
        else:
            return
        parent = _open(_current.get())
        frame = _Frame(kind, label, parent, span.context.span_id, _place(parent))
        self._frames[frame.span_id] = frame
        _current.set(frame)

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is None:
            return
        frame = self._frames.pop(span.context.span_id, None)
        if frame is not None:
            frame.is_open = False

    def shutdown(self) -> None:
        self._frames.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _place(parent: _Frame | None) -> NodePlace | None:
    """The node a frame opening now runs as: the one its Graph or Swarm (the nearest open frame) was starting."""
    started = _node.get()
    if started is None or parent is None or started.run is not parent:
        return None
    run = started.run
    step, run.steps = run.steps, run.steps + 1
    return NodePlace(run.kind, f"{run.span_id:016x}", started.node_id, step, started.inputs)


def node_starting(node_id: str, inputs: Sequence[str]) -> None:
    """Strands is about to run node ``node_id`` of the Graph or Swarm in this context, fed by ``inputs``."""
    run = _open(_current.get())
    if run is not None and run.kind in ("graph", "swarm"):
        _node.set(_NodeStart(run, node_id, tuple(inputs)))


@contextlib.contextmanager
def outside_turn(purpose: str) -> Iterator[None]:
    """Model calls made meanwhile, outside an agent turn, serve ``purpose`` (e.g. ``"summary"``)."""
    token = _purpose.set(purpose)
    try:
        yield
    finally:
        _purpose.reset(token)


def serving_agent() -> str | None:
    """For a model call made with no agent state (outside an agent turn): what it serves (``"summary"``, else
    ``"outside_turn"``) when an agent is running in this context, else None (a model used on its own)."""
    if _agent(_current.get()) is None:
        return None
    return _purpose.get() or "outside_turn"


_tree = SpanTree()
_attached: set[int] = set()
_attach_lock = threading.Lock()
_invocations: OrderedDict[str, dict[str, int]] = OrderedDict()
_count_lock = threading.Lock()


def attach_span_tree(provider: Any = None) -> None:
    """Add the span tree to ``provider`` (default: the global tracer provider) if it is an SDK provider (once), and
    learn Strands' graph and swarm nodes from then on."""
    provider = provider if provider is not None else trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        return
    with _attach_lock:
        if id(provider) in _attached:
            return
        _attached.add(id(provider))
    provider.add_span_processor(_tree)
    watch_nodes()


def watch_nodes() -> None:
    """Have Strands' Graph and Swarm say which node they start and what fed it, and its summarizer what it calls the
    model for (once)."""
    from strands_tito.upstream import UpstreamChangedError, strands_sdk

    try:
        strands_sdk.watch_multi_agent(node_starting, outside_turn)
    except UpstreamChangedError as error:  # lineage loses graph/swarm nodes and summaries; the tokens are unaffected
        logger.warning("records will not name graph or swarm nodes, nor mark summaries: %s", error)


def note_turn(trajectory_id: str) -> None:
    """A turn of ``trajectory_id`` was recorded under the agent running here: the agents it calls from now on are
    its children (an agent invoked again continues its trajectory under a new frame; a new sample replaces it)."""
    own = _agent(_current.get())
    if own is not None:
        own.trajectory = trajectory_id


def _next_invocation(episode: str, agent: str) -> int:
    with _count_lock:
        counts = _invocations.get(episode)
        if counts is None:
            counts = _invocations[episode] = {}
            if len(_invocations) > _EPISODES_KEPT:
                _invocations.popitem(last=False)
        else:
            _invocations.move_to_end(episode)
        index = counts.get(agent, 0)
        counts[agent] = index + 1
        return index


@dataclass
class _Found:
    agent_name: str | None = None
    parent: str | None = None
    place: NodePlace | None = None
    own: _Frame | None = field(default=None, repr=False)


def _find(trajectory_id: str, purpose: str | None) -> _Found:
    own = _agent(_current.get())
    if own is None:
        return _Found()
    if purpose is not None:  # a call outside the agent's turns: a child of the agent's own trajectory
        return _Found(own.name, own.trajectory, own.place, own)
    own.trajectory = trajectory_id
    frame, parent = own.parent, None
    while frame is not None and parent is None:
        if frame.kind == "agent":
            parent = frame.trajectory
        frame = frame.parent
    return _Found(own.name, parent, own.place, own)


def lineage_of(
    span: Any,
    trajectory_id: str,
    *,
    agent_id: str | None,
    agent_name: str | None,
    episode_of: dict[str, Lineage],
    rollout_id: str | None,
    purpose: str | None = None,
) -> Lineage:
    """The lineage of a trajectory whose first model call is ``span`` (the current chat span).

    Args:
        span: The current span.
        trajectory_id: The trajectory.
        agent_id: The agent's id when the provider knows the agent.
        agent_name: The agent's name when the provider knows the agent (else the agent frame's).
        episode_of: The lineage of the trajectories recorded so far (the parent's episode is the child's).
        rollout_id: The Agent Lightning rollout, when running under one.
        purpose: What a model call outside an agent turn served (None: an agent's turn).
    """
    found = _find(trajectory_id, purpose)
    context = span.get_span_context()
    known = episode_of.get(found.parent) if found.parent is not None else None
    if known is not None and known.episode_id is not None:
        episode = known.episode_id
    else:
        episode = rollout_id or (f"{context.trace_id:032x}" if context.is_valid else trajectory_id)
    if purpose is not None and known is not None:  # the agent it served: its id and name
        agent_id, agent_name = agent_id or known.agent_id, agent_name or known.agent_name
    name = agent_name or found.agent_name
    invocation = _next_invocation(episode, agent_id or name or "")
    return Lineage(
        episode, found.parent, agent_id, name, invocation_index=invocation, purpose=purpose, node=found.place
    )
