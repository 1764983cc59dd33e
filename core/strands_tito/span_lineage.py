"""Where a trajectory sits in a multi-agent episode, on its turn and call spans (``docs/span-schema.md``).

Revision 3 of span schema 1 (revision 3 added the invocation index, the purpose of a call outside an agent
turn and the place in a Graph or Swarm; a reader of revision 2 ignores them). ``tito.episode.id`` and
``tito.parent.trajectory_id`` are strands-tito's own; the agent's id and name and the conversation go under the
OpenTelemetry GenAI names (``gen_ai.agent.id``, ``gen_ai.agent.name``, ``gen_ai.conversation.id``), so trace
backends group a rollout's calls without knowing strands-tito.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strands_tito import checks
from strands_tito.errors import StrandsTitoError

EPISODE_ID = "tito.episode.id"
PARENT_TRAJECTORY_ID = "tito.parent.trajectory_id"
SAMPLE_INDEX = "tito.sample.index"
INVOCATION_INDEX = "tito.invocation.index"
PURPOSE = "tito.purpose"
NODE = "tito.node"  # JSON text: the NodePlace
#: What a trajectory recorded outside an agent's turns served (``tito.purpose``; absent: the agent's own turns).
PURPOSES = ("summary", "outside_turn")
NODE_KINDS = ("graph", "swarm")
MAX_NODE_INPUTS = 1024
MAX_NODE_TEXT = 64 * 1024
GENAI_CONVERSATION_ID = "gen_ai.conversation.id"
GENAI_AGENT_ID = "gen_ai.agent.id"
GENAI_AGENT_NAME = "gen_ai.agent.name"
MAX_LENGTH = 1024

__all__ = ["Lineage", "LineageSchemaError", "NodePlace", "decode_lineage", "lineage_attributes"]


class LineageSchemaError(StrandsTitoError, ValueError):
    """A lineage attribute that is not a string of at most :data:`MAX_LENGTH` characters."""


@dataclass(frozen=True)
class NodePlace:
    """Where in a Strands Graph or Swarm run an agent ran (the record's ``node``).

    Attributes:
        kind: ``"graph"`` or ``"swarm"``.
        run_id: The run (one Graph or Swarm invocation; unique within the episode).
        node_id: The node (a Swarm's nodes are its agents' names).
        step: The node's position among the nodes the run started, from 0 (a Swarm: the handoff count so far).
        inputs: The nodes whose results fed this node's input: a Graph node's satisfied dependencies, in the order
            its input lists them; a Swarm node's the agent that handed off to it (empty for the first).
    """

    kind: str
    run_id: str
    node_id: str
    step: int = 0
    inputs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON form (the record's ``node`` and the span attribute)."""
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "node_id": self.node_id,
            "step": self.step,
            "inputs": list(self.inputs),
        }

    @classmethod
    def from_dict(cls, value: Any) -> NodePlace:
        """Read the plain-JSON form, checking every part.

        Raises:
            LineageSchemaError: a part missing or of the wrong type or size.
        """
        problem = f"attribute {NODE} must be a JSON object with kind, run_id, node_id, step and inputs"
        if not isinstance(value, dict):
            raise LineageSchemaError(problem)
        kind, run_id, node_id = value.get("kind"), value.get("run_id"), value.get("node_id")
        step, inputs = value.get("step", 0), value.get("inputs", [])
        texts = [kind, run_id, node_id, *(inputs if isinstance(inputs, list) else [None])]
        if (
            not isinstance(kind, str)
            or not isinstance(run_id, str)
            or not isinstance(node_id, str)
            or kind not in NODE_KINDS
            or not all(isinstance(t, str) and len(t) <= MAX_LENGTH for t in texts)
            or isinstance(step, bool)
            or not isinstance(step, int)
            or not 0 <= step <= checks.MAX_INT32
            or len(inputs) > MAX_NODE_INPUTS
        ):
            raise LineageSchemaError(problem)
        return cls(kind, run_id, node_id, step, tuple(inputs))


@dataclass(frozen=True)
class Lineage:
    """A trajectory's place among the agents of one task.

    Attributes:
        episode_id: The episode (every agent of one task: an orchestrator and its sub-agents, a swarm, a graph).
        parent_trajectory_id: The trajectory of the agent that started this one (agent as a tool); None at the top.
        agent_id: The agent's ``agent_id`` (``gen_ai.agent.id``).
        agent_name: The agent's ``name`` (``gen_ai.agent.name``).
        sample_index: Which sample of its agent's episode this trajectory is (0: the first; a rewritten history or a
            re-rendered user turn starts the next, see ``docs/samples.md``). Later samples share the first's episode,
            parent and agent.
        invocation_index: Which trajectory of its agent (``agent_id``, else ``agent_name``) in the episode this is,
            from 0 in the order of their first model calls: a Swarm agent starts afresh at each handoff, an agent
            built inside a tool at each call. With the sample index it makes ``(episode_id, agent_id,
            invocation_index, sample_index)`` unique.
        purpose: None for an agent's own turns; ``"summary"`` for the summary a conversation manager asked the
            model for, ``"outside_turn"`` for any other model call made outside the agent's turns while it ran.
            Such a trajectory's parent is the trajectory of the agent it served.
        node: Where in a Graph or Swarm run the agent ran (None: not in one).
    """

    episode_id: str | None = None
    parent_trajectory_id: str | None = None
    agent_id: str | None = None
    agent_name: str | None = None
    sample_index: int = 0
    invocation_index: int = 0
    purpose: str | None = None
    node: NodePlace | None = field(default=None)


def lineage_attributes(lineage: Lineage, conversation_id: str) -> dict[str, Any]:
    """The lineage and GenAI attributes of a chat span (``conversation_id``: the trajectory or the rollout)."""
    attributes: dict[str, Any] = {GENAI_CONVERSATION_ID: conversation_id}
    for key, value in (
        (EPISODE_ID, lineage.episode_id),
        (PARENT_TRAJECTORY_ID, lineage.parent_trajectory_id),
        (GENAI_AGENT_ID, lineage.agent_id),
        (GENAI_AGENT_NAME, lineage.agent_name),
    ):
        if value is not None:
            attributes[key] = value
    if lineage.sample_index:
        attributes[SAMPLE_INDEX] = lineage.sample_index
    if lineage.invocation_index:
        attributes[INVOCATION_INDEX] = lineage.invocation_index
    if lineage.purpose is not None:
        attributes[PURPOSE] = lineage.purpose
    if lineage.node is not None:
        attributes[NODE] = json.dumps(lineage.node.to_dict(), separators=(",", ":"))
    return attributes


def _optional(attributes: Mapping[str, Any], key: str) -> str | None:
    value = attributes.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_LENGTH:
        raise LineageSchemaError(f"attribute {key} must be a string of at most {MAX_LENGTH} characters")
    return value


def _index(attributes: Mapping[str, Any], key: str) -> int:
    index = attributes.get(key, 0)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= checks.MAX_INT32:
        raise LineageSchemaError(f"attribute {key} must be an integer from 0 to 2**31-1")
    return index


def _node(attributes: Mapping[str, Any]) -> NodePlace | None:
    text = attributes.get(NODE)
    if text is None:
        return None
    if not isinstance(text, str) or len(text) > MAX_NODE_TEXT:
        raise LineageSchemaError(f"attribute {NODE} must be JSON text of at most {MAX_NODE_TEXT} characters")
    try:
        value = json.loads(text)
    except ValueError as e:
        raise LineageSchemaError(f"attribute {NODE} is not JSON: {e}") from e
    return NodePlace.from_dict(value)


def decode_lineage(attributes: Mapping[str, Any]) -> Lineage:
    """The lineage a span's attributes carry (every part optional)."""
    purpose = _optional(attributes, PURPOSE)
    if purpose is not None and purpose not in PURPOSES:
        raise LineageSchemaError(f"attribute {PURPOSE} must be one of {', '.join(PURPOSES)}")
    return Lineage(
        _optional(attributes, EPISODE_ID),
        _optional(attributes, PARENT_TRAJECTORY_ID),
        _optional(attributes, GENAI_AGENT_ID),
        _optional(attributes, GENAI_AGENT_NAME),
        _index(attributes, SAMPLE_INDEX),
        _index(attributes, INVOCATION_INDEX),
        purpose,
        _node(attributes),
    )
