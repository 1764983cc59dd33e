"""`ToolLimiter`: a Strands hook that bounds the agent loop and stops it on a message boundary."""

from __future__ import annotations

from typing import Any

from strands.hooks import HookProvider, HookRegistry, MessageAddedEvent
from strands.types.exceptions import EventLoopException


class ToolLimitReachedError(EventLoopException):
    """Base class: the agent loop was stopped by :class:`ToolLimiter`.

    It derives from Strands' ``EventLoopException`` so the agent re-raises it as it is instead of wrapping it.
    """

    def __init__(self, message: str, count: int, limit: int) -> None:
        super().__init__(RuntimeError(message))
        self.count = count
        self.limit = limit


class MaxToolIterationsReachedError(ToolLimitReachedError):
    """The model made ``max_tool_iters`` tool-calling turns."""


class MaxToolCallsReachedError(ToolLimitReachedError):
    """The model made ``max_tool_calls`` tool calls in total."""


class ToolLimiter(HookProvider):
    """Stop the agent after a number of tool-calling turns or tool calls.

    Counting happens when the model's message is added (one iteration per message with tool calls, parallel calls
    counted one by one, malformed calls included). The stop happens when the tool results of the turn that reached
    a limit are added: the exception is raised before the next model call, so the trajectory ends with the model's
    last message and no tool result is left half-recorded.

    Args:
        max_tool_iters: Most tool-calling turns; None for no limit.
        max_tool_calls: Most tool calls in total; None for no limit.
    """

    def __init__(self, max_tool_iters: int | None = None, max_tool_calls: int | None = None) -> None:
        self.max_tool_iters = max_tool_iters
        self.max_tool_calls = max_tool_calls
        self.tool_iter_count = 0
        self.tool_call_count = 0

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Register with the agent's hook registry."""
        registry.add_callback(MessageAddedEvent, self._on_message_added)

    def reset(self) -> None:
        """Zero the counters (for reuse across episodes)."""
        self.tool_iter_count = 0
        self.tool_call_count = 0

    def _on_message_added(self, event: MessageAddedEvent) -> None:
        message = event.message
        if message["role"] == "assistant":
            calls = sum(1 for block in message["content"] if "toolUse" in block)
            if calls:
                self.tool_iter_count += 1
                self.tool_call_count += calls
            return
        if not any("toolResult" in block for block in message["content"]):
            return
        if self.max_tool_iters is not None and self.tool_iter_count >= self.max_tool_iters:
            raise MaxToolIterationsReachedError(
                f"reached max_tool_iters={self.max_tool_iters}", self.tool_iter_count, self.max_tool_iters
            )
        if self.max_tool_calls is not None and self.tool_call_count >= self.max_tool_calls:
            raise MaxToolCallsReachedError(
                f"reached max_tool_calls={self.max_tool_calls}", self.tool_call_count, self.max_tool_calls
            )
