"""The Strands stream events of one recorded turn: reasoning, answer text, tool uses, stop reason, usage.

:class:`~strands_tito.providers.token_model.TokenModel` records the turn first; what Strands then sees of it is
built here, from the validated reply and the tool calls parsed from its text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import cast

from strands.types.event_loop import StopReason
from strands.types.streaming import StreamEvent

from strands_tito.providers.generation import Generation
from strands_tito.providers.tool_parsers import UNKNOWN_TOOL_NAME, ToolCall

__all__ = ["tool_use_name", "turn_events"]

#: Tool names Strands accepts (``strands.tools.tools.validate_tool_use_name``).
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_\-]{1,64}")


def tool_use_name(call: ToolCall) -> str:
    """The name a tool use is reported under: the one the model wrote, so per-tool metrics (Strands' and
    strands-env's parse_errors) count a malformed call under that tool, or ``UNKNOWN_TOOL_NAME`` for a name Strands
    would refuse before any hook runs."""
    return call.name if _TOOL_NAME.fullmatch(call.name) else UNKNOWN_TOOL_NAME


def turn_events(
    reply: Generation, input_tokens: int, calls: Sequence[ToolCall], reasoning: str, answer: str
) -> list[StreamEvent]:
    """Strands' events of a recorded turn (after ``messageStart``): reasoning, answer, tool uses, stop, usage."""
    events: list[StreamEvent] = []
    if reasoning:
        # Reasoning reaches Strands as reasoning content, so the agent's answer text excludes it; the trajectory
        # keeps the generated tokens as they are.
        events.append({"contentBlockStart": {"start": {}}})
        events.append({"contentBlockDelta": {"delta": {"reasoningContent": {"text": reasoning}}}})
        events.append({"contentBlockStop": {}})
    if answer:
        events.append({"contentBlockStart": {"start": {}}})
        events.append({"contentBlockDelta": {"delta": {"text": answer}}})
        events.append({"contentBlockStop": {}})
    for call in calls:
        events.append(
            {"contentBlockStart": {"start": {"toolUse": {"toolUseId": call.id, "name": tool_use_name(call)}}}}
        )
        events.append({"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(call.input)}}}})
        events.append({"contentBlockStop": {}})

    stop_reason: StopReason = "end_turn"
    if reply.finish_reason == "length":
        stop_reason = "max_tokens"
    elif calls:
        stop_reason = "tool_use"
    events.append({"messageStop": {"stopReason": stop_reason}})
    usage = {
        "inputTokens": input_tokens,
        "outputTokens": len(reply.output_ids),
        "totalTokens": input_tokens + len(reply.output_ids),
    }
    if reply.cached_tokens is not None:  # unknown is not zero: Strands' usage leaves the key out
        usage["cacheReadInputTokens"] = reply.cached_tokens
    metrics = {"latencyMs": round((reply.latency_s or 0.0) * 1000)}
    events.append(cast(StreamEvent, {"metadata": {"usage": usage, "metrics": metrics}}))
    return events
