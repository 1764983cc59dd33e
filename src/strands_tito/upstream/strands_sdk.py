"""Everything strands-tito uses of Strands (``strands-agents``) that is not its public API, and its patches of Strands.

Checked against strands-agents 1.62.0 (``CHECKED``), read in its source:

* ``Agent._model_state`` (``strands/agent/agent.py``): the dict Strands keeps per agent and hands to
  ``Model.stream(model_state=...)``; a model keeps its per-agent state there, and :func:`model_state` reads it back
  from the agent (Strands offers no public accessor).
* ``strands.telemetry.tracer._tracer_instance`` and ``Tracer.__init__`` (``strands/telemetry/tracer.py``): the tracer
  is a process singleton that looks up the global tracer provider once, in ``__init__``, when the first agent is
  built; :func:`call_before_tracer_created` runs capture's hook just before, :func:`tracer_created` says whether that
  moment has passed.
* ``OpenAIModel.stream`` and ``OpenAIModel._get_client`` (``strands/models/openai.py``): replaced by
  :func:`wrap_openai_model` with wrappers capture supplies, restored by :func:`unwrap_openai_model`.
* ``Graph._build_node_input(node)`` (``strands/multiagent/graph.py``) and ``Swarm._build_node_input(target_node)``
  (``strands/multiagent/swarm.py``): each is called in the node's own context just before Strands runs the node's
  agent; the Graph's input names each dependency whose result it holds in a block ``"\nFrom {node_id}:"``, the
  Swarm's ``state.node_history`` lists the nodes that ran before, the last being the one that handed off.
  ``SummarizingConversationManager._generate_summary(messages, agent)``
  (``strands/agent/conversation_manager/summarizing_conversation_manager.py``): the one step both of its summary
  paths (its own agent, or the model called directly) go through. :func:`watch_multi_agent` wraps the three.

Strands is imported where it is used, not when this module loads (capture switches on at interpreter start).
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from strands_tito.upstream import UpstreamChangedError

__all__ = [
    "CHECKED",
    "DISTRIBUTION",
    "call_before_tracer_created",
    "model_state",
    "openai_model_wrapped",
    "tracer_created",
    "unwrap_openai_model",
    "verify",
    "watch_multi_agent",
    "wrap_openai_model",
]

DISTRIBUTION = "strands-agents"
#: The versions whose source this module was checked against.
CHECKED = ">=1.62.0,<1.63"

_TRACER_MODULE = "strands.telemetry.tracer"
_AGENT_MODULE = "strands.agent.agent"
_STATE_ATTRIBUTE = "_model_state"
_TRACER_INSTANCE = "_tracer_instance"
_OPENAI_METHODS = ("stream", "_get_client")

_lock = threading.Lock()
_before_tracer: list[Callable[[], None]] = []
_openai_originals: dict[str, Any] = {}
_watched: list[bool] = []
_GRAPH_MODULE = "strands.multiagent.graph"
_SWARM_MODULE = "strands.multiagent.swarm"
_SUMMARIZER_MODULE = "strands.agent.conversation_manager.summarizing_conversation_manager"
_NODE_INPUT = "_build_node_input"
_SUMMARY = "_generate_summary"


def _changed(what: str) -> UpstreamChangedError:
    return UpstreamChangedError(DISTRIBUTION, CHECKED, what)


def model_state(agent: Any) -> dict[str, Any] | None:
    """The ``model_state`` dict Strands keeps for ``agent`` (None for an object that is not a Strands agent).

    Raises:
        UpstreamChangedError: a Strands ``Agent`` without it.
    """
    state = getattr(agent, _STATE_ATTRIBUTE, None)
    if isinstance(state, dict):
        return state
    agent_module = sys.modules.get(_AGENT_MODULE)
    if agent_module is not None and isinstance(agent, agent_module.Agent):
        raise _changed(f"Agent.{_STATE_ATTRIBUTE} is {type(state).__name__}, not the dict a model keeps its state in")
    return None


def tracer_created() -> bool:
    """Whether Strands has created its tracer (its first agent was built), without importing Strands.

    Raises:
        UpstreamChangedError: the tracer module no longer keeps its singleton where it did.
    """
    module = sys.modules.get(_TRACER_MODULE)
    if module is None:
        return False
    if not hasattr(module, _TRACER_INSTANCE):
        raise _changed(f"{_TRACER_MODULE} has no {_TRACER_INSTANCE} (its tracer singleton)")
    return getattr(module, _TRACER_INSTANCE) is not None


def call_before_tracer_created(callback: Callable[[], None]) -> None:
    """Run ``callback`` whenever Strands creates a tracer, just before it looks up the global tracer provider (the
    first ``Agent``, ``Swarm`` or ``Graph``); at once too when Strands has created its tracer already.

    Raises:
        UpstreamChangedError: ``Tracer.__init__`` is not where it was, or takes arguments.
    """
    from strands.telemetry import tracer as strands_tracer

    with _lock:
        if not _before_tracer:
            original = _tracer_init(strands_tracer)

            @functools.wraps(original)
            def __init__(tracer_self: Any, *args: Any, **kwargs: Any) -> None:
                for hook in list(_before_tracer):
                    hook()
                original(tracer_self, *args, **kwargs)

            strands_tracer.Tracer.__init__ = __init__  # type: ignore[method-assign,assignment]
        _before_tracer.append(callback)
    if tracer_created():
        callback()


def _tracer_init(strands_tracer: Any) -> Callable[..., None]:
    init = strands_tracer.Tracer.__dict__.get("__init__")
    if init is None or list(inspect.signature(init).parameters) != ["self"]:
        raise _changed("Tracer.__init__ is not Tracer's own __init__(self)")
    return init  # type: ignore[no-any-return]


def wrap_openai_model(wrap_stream: Callable[[Any], Any], wrap_get_client: Callable[[Any], Any]) -> bool:
    """Replace ``OpenAIModel.stream`` and ``OpenAIModel._get_client`` with ``wrap_*(original)`` (once; later calls
    do nothing). False when Strands' OpenAI provider cannot be imported (the ``openai`` package is missing).

    Raises:
        UpstreamChangedError: ``OpenAIModel`` no longer defines both methods.
    """
    try:
        from strands.models.openai import OpenAIModel
    except ImportError:
        return False
    with _lock:
        if _openai_originals:
            return True
        originals = _openai_methods(OpenAIModel)
        _openai_originals.update(originals)
        OpenAIModel.stream = wrap_stream(originals["stream"])  # type: ignore[method-assign]
        OpenAIModel._get_client = wrap_get_client(originals["_get_client"])  # type: ignore[method-assign]
    return True


def _openai_methods(model_class: type) -> dict[str, Any]:
    found = {name: model_class.__dict__.get(name) for name in _OPENAI_METHODS}
    missing = [name for name, method in found.items() if not callable(method)]
    if missing:
        raise _changed(f"OpenAIModel defines no {', '.join(missing)} (wrapped to record token ids)")
    return found


def unwrap_openai_model() -> None:
    """Undo :func:`wrap_openai_model`."""
    try:
        from strands.models.openai import OpenAIModel
    except ImportError:
        return
    with _lock:
        for name, original in _openai_originals.items():
            setattr(OpenAIModel, name, original)
        _openai_originals.clear()


def openai_model_wrapped() -> bool:
    """Whether :func:`wrap_openai_model` is in effect."""
    return bool(_openai_originals)


def _own_method(owner: type, name: str, parameters: list[str]) -> Callable[..., Any]:
    method = owner.__dict__.get(name)
    if not callable(method) or list(inspect.signature(method).parameters) != parameters:
        raise _changed(f"{owner.__name__}.{name}({', '.join(parameters[1:])}) is not where it was")
    return method  # type: ignore[no-any-return]


def _multi_agent_methods() -> tuple[type, type, type]:
    import importlib

    graph = importlib.import_module(_GRAPH_MODULE).Graph
    swarm = importlib.import_module(_SWARM_MODULE).Swarm
    summarizer = importlib.import_module(_SUMMARIZER_MODULE).SummarizingConversationManager
    _own_method(graph, _NODE_INPUT, ["self", "node"])
    _own_method(swarm, _NODE_INPUT, ["self", "target_node"])
    _own_method(summarizer, _SUMMARY, ["self", "messages", "agent"])
    return graph, swarm, summarizer


def watch_multi_agent(
    node_starting: Callable[[str, list[str]], None], outside_turn: Callable[[str], AbstractContextManager[Any]]
) -> None:
    """Call ``node_starting(node_id, inputs)`` in a Graph or Swarm node's context just before Strands runs it
    (``inputs``: a Graph node's dependencies whose results its input holds, in that order; a Swarm node's the agent
    that handed off to it), and run a summarizing conversation manager's summary inside ``outside_turn("summary")``
    (once; later calls do nothing).

    Raises:
        UpstreamChangedError: one of the three methods is not where it was.
    """
    with _lock:
        if _watched:
            return
        graph, swarm, summarizer = _multi_agent_methods()
        graph_input, swarm_input = graph.__dict__[_NODE_INPUT], swarm.__dict__[_NODE_INPUT]
        summary = summarizer.__dict__[_SUMMARY]

        @functools.wraps(graph_input)
        def graph_node_input(graph_self: Any, node: Any) -> Any:
            built = graph_input(graph_self, node)
            texts = [block.get("text") for block in built if isinstance(block, dict)]
            sources = {e.from_node.node_id for e in graph_self.edges if e.to_node == node}
            position = {text: i for i, text in enumerate(texts) if isinstance(text, str)}
            fed = [(position[f"\nFrom {s}:"], s) for s in sources if f"\nFrom {s}:" in position]
            node_starting(node.node_id, [source for _, source in sorted(fed)])
            return built

        @functools.wraps(swarm_input)
        def swarm_node_input(swarm_self: Any, target_node: Any) -> Any:
            history = swarm_self.state.node_history
            node_starting(target_node.node_id, [history[-1].node_id] if history else [])
            return swarm_input(swarm_self, target_node)

        @functools.wraps(summary)
        def generate_summary(manager: Any, messages: Any, agent: Any) -> Any:
            with outside_turn("summary"):
                return summary(manager, messages, agent)

        graph._build_node_input = graph_node_input  # type: ignore[attr-defined]
        swarm._build_node_input = swarm_node_input  # type: ignore[attr-defined]
        summarizer._generate_summary = generate_summary  # type: ignore[attr-defined]
        _watched.append(True)


def verify() -> None:
    """Check that everything this module relies on is where it was in the checked versions.

    Raises:
        UpstreamChangedError: naming what moved.
    """
    from strands.agent import agent as strands_agent
    from strands.telemetry import tracer as strands_tracer

    if f"self.{_STATE_ATTRIBUTE}" not in inspect.getsource(strands_agent.Agent.__init__):
        raise _changed(f"Agent.__init__ no longer sets self.{_STATE_ATTRIBUTE}")
    if not hasattr(strands_tracer, _TRACER_INSTANCE):
        raise _changed(f"{_TRACER_MODULE} has no {_TRACER_INSTANCE}")
    _tracer_init(strands_tracer)
    _multi_agent_methods()
    try:
        from strands.models.openai import OpenAIModel
    except ImportError:  # the openai extra is not installed: nothing to wrap
        return
    _openai_methods(OpenAIModel)
