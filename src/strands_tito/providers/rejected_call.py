"""The stand-in tool that answers a malformed tool call, so the model sees why and the named tool never runs."""

from __future__ import annotations

from typing import Any

from strands.types.tools import AgentTool, ToolGenerator, ToolSpec, ToolUse

__all__ = ["RejectedToolCall"]


class RejectedToolCall(AgentTool):
    """A malformed tool call's stand-in: its result is the error the model sees; the real tool never runs.

    Args:
        name: The tool the model named (Strands records the failed call under it).
        message: The error result's text: why the call was rejected, and its raw text.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__()
        self._name = name
        self._message = message

    @property
    def tool_name(self) -> str:
        return self._name

    @property
    def tool_spec(self) -> ToolSpec:
        return {"name": self._name, "description": "a malformed call", "inputSchema": {"json": {"type": "object"}}}

    @property
    def tool_type(self) -> str:
        return "rejected"

    async def stream(self, tool_use: ToolUse, invocation_state: dict[str, Any], **kwargs: Any) -> ToolGenerator:
        yield {"toolUseId": str(tool_use["toolUseId"]), "status": "error", "content": [{"text": self._message}]}
