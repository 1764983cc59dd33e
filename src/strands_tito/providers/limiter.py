"""`LoopLimiter`: a Strands hook that bounds the agent loop and stops it on a message boundary.

:class:`ToolLimiter` (the seed API) is the same hook with only the two tool limits.
"""

from __future__ import annotations

from typing import Any

from strands.hooks import BeforeToolCallEvent, HookProvider, HookRegistry, MessageAddedEvent
from strands.types.exceptions import EventLoopException

from strands_tito.errors import StrandsTitoError


class LoopLimitReachedError(EventLoopException, StrandsTitoError):
    """Base class: the agent loop was stopped by :class:`LoopLimiter` (or :class:`ToolLimiter`).

    It derives from Strands' ``EventLoopException`` so the agent re-raises it as it is instead of wrapping it.

    Attributes:
        count: The counter that reached the limit.
        limit: The limit.
    """

    def __init__(self, message: str, count: int | None = None, limit: int | None = None) -> None:
        super().__init__(RuntimeError(message))
        self.count = count
        self.limit = limit


#: The seed API's name for :class:`LoopLimitReachedError`.
ToolLimitReachedError = LoopLimitReachedError


class MaxToolIterationsReachedError(LoopLimitReachedError):
    """The model made ``max_tool_iters`` tool-calling turns."""


class MaxToolCallsReachedError(LoopLimitReachedError):
    """The model made ``max_tool_calls`` tool calls in total."""


class MaxMessagesReachedError(LoopLimitReachedError):
    """The conversation reached ``max_messages`` messages (checked when a user-role message lands)."""


class LoopLimiter(HookProvider):
    """Bound the agent loop: tool-calling turns, tool calls, parallel calls per turn, and messages.

    Counting: every message added to the agent counts toward ``message_count``; a model message with tool calls
    adds one to ``tool_iter_count`` and its number of calls (malformed ones included) to ``tool_call_count``.
    Counters accumulate across invocations of the agent until :meth:`reset`.

    Stopping happens only when a user-role message lands: a tool-result message checks ``max_tool_iters`` and then
    ``max_tool_calls``; any user message (tool results, or the prompt of a later invocation) then checks
    ``max_messages``. The error is raised before the next model call, so the trajectory ends on the model's last
    whole message and nothing needs truncating. Counts can overshoot a limit when the last turn made several calls.

    ``max_parallel_tool_calls`` caps the calls run per model message: calls after the first N (in the order the
    model wrote them) are not run, and the model gets a tool error saying so; they are counted in
    ``cancelled_tool_call_count``.

    Args:
        max_tool_iters: Most tool-calling turns; None for no limit.
        max_tool_calls: Most tool calls in total; None for no limit.
        max_parallel_tool_calls: Most calls run per model message; None for no limit.
        max_messages: Most messages in the conversation (all roles); None for no limit.
    """

    def __init__(
        self,
        max_tool_iters: int | None = None,
        max_tool_calls: int | None = None,
        max_parallel_tool_calls: int | None = None,
        max_messages: int | None = None,
    ) -> None:
        self.max_tool_iters = max_tool_iters
        self.max_tool_calls = max_tool_calls
        self.max_parallel_tool_calls = max_parallel_tool_calls
        self.max_messages = max_messages
        self.reset()

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Register with the agent's hook registry."""
        registry.add_callback(MessageAddedEvent, self._on_message_added)
        registry.add_callback(BeforeToolCallEvent, self._on_before_tool_call)

    def reset(self) -> None:
        """Zero the counters (for reuse across episodes)."""
        self.tool_iter_count = 0
        self.tool_call_count = 0
        self.message_count = 0
        self.cancelled_tool_call_count = 0
        self._over_parallel_limit: set[str] = set()

    def _on_message_added(self, event: MessageAddedEvent) -> None:
        message = event.message
        self.message_count += 1
        if message["role"] == "assistant":
            ids = [str(block["toolUse"].get("toolUseId")) for block in message["content"] if "toolUse" in block]
            if ids:
                self.tool_iter_count += 1
                self.tool_call_count += len(ids)
            limit = self.max_parallel_tool_calls
            self._over_parallel_limit = set(ids[limit:]) if limit is not None else set()
            return
        if message["role"] != "user":
            return
        if any("toolResult" in block for block in message["content"]):
            if self.max_tool_iters is not None and self.tool_iter_count >= self.max_tool_iters:
                raise MaxToolIterationsReachedError(
                    f"reached max_tool_iters={self.max_tool_iters}", self.tool_iter_count, self.max_tool_iters
                )
            if self.max_tool_calls is not None and self.tool_call_count >= self.max_tool_calls:
                raise MaxToolCallsReachedError(
                    f"reached max_tool_calls={self.max_tool_calls}", self.tool_call_count, self.max_tool_calls
                )
        if self.max_messages is not None and self.message_count >= self.max_messages:
            raise MaxMessagesReachedError(
                f"reached max_messages={self.max_messages}", self.message_count, self.max_messages
            )

    def _on_before_tool_call(self, event: BeforeToolCallEvent) -> None:
        tool_use_id = str(event.tool_use.get("toolUseId"))
        if tool_use_id in self._over_parallel_limit:
            self._over_parallel_limit.discard(tool_use_id)
            self.cancelled_tool_call_count += 1
            event.cancel_tool = (
                f"Max parallel tool calls ({self.max_parallel_tool_calls}) reached. This tool call was not executed."
            )


class ToolLimiter(LoopLimiter):
    """The seed API's limiter: :class:`LoopLimiter` with only ``max_tool_iters`` and ``max_tool_calls``.

    It raises :class:`MaxToolIterationsReachedError` / :class:`MaxToolCallsReachedError` when the tool results of
    the turn that reached a limit are added, before the next model call; its counters are ``tool_iter_count`` and
    ``tool_call_count``.

    Args:
        max_tool_iters: Most tool-calling turns; None for no limit.
        max_tool_calls: Most tool calls in total; None for no limit.
    """

    def __init__(self, max_tool_iters: int | None = None, max_tool_calls: int | None = None) -> None:
        super().__init__(max_tool_iters=max_tool_iters, max_tool_calls=max_tool_calls)
