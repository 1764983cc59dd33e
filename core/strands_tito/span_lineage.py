"""Where a trajectory sits in a multi-agent episode, on its turn and call spans (``docs/span-schema.md``).

Revision 2 of span schema 1. ``tito.episode.id`` and ``tito.parent.trajectory_id`` are strands-tito's own; the
agent's id and name and the conversation go under the OpenTelemetry GenAI names (``gen_ai.agent.id``,
``gen_ai.agent.name``, ``gen_ai.conversation.id``), so trace backends group a rollout's calls without knowing
strands-tito.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from strands_tito import checks
from strands_tito.errors import StrandsTitoError

EPISODE_ID = "tito.episode.id"
PARENT_TRAJECTORY_ID = "tito.parent.trajectory_id"
SAMPLE_INDEX = "tito.sample.index"
GENAI_CONVERSATION_ID = "gen_ai.conversation.id"
GENAI_AGENT_ID = "gen_ai.agent.id"
GENAI_AGENT_NAME = "gen_ai.agent.name"
MAX_LENGTH = 1024

__all__ = ["Lineage", "LineageSchemaError", "decode_lineage", "lineage_attributes"]


class LineageSchemaError(StrandsTitoError, ValueError):
    """A lineage attribute that is not a string of at most :data:`MAX_LENGTH` characters."""


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
    """

    episode_id: str | None = None
    parent_trajectory_id: str | None = None
    agent_id: str | None = None
    agent_name: str | None = None
    sample_index: int = 0


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
    return attributes


def _optional(attributes: Mapping[str, Any], key: str) -> str | None:
    value = attributes.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_LENGTH:
        raise LineageSchemaError(f"attribute {key} must be a string of at most {MAX_LENGTH} characters")
    return value


def decode_lineage(attributes: Mapping[str, Any]) -> Lineage:
    """The lineage a span's attributes carry (every part optional)."""
    index = attributes.get(SAMPLE_INDEX, 0)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= checks.MAX_INT32:
        raise LineageSchemaError(f"attribute {SAMPLE_INDEX} must be an integer from 0 to 2**31-1")
    return Lineage(
        _optional(attributes, EPISODE_ID),
        _optional(attributes, PARENT_TRAJECTORY_ID),
        _optional(attributes, GENAI_AGENT_ID),
        _optional(attributes, GENAI_AGENT_NAME),
        index,
    )
