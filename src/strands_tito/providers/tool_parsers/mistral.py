"""Mistral calls (``mistral``): Mistral-Small, Devstral, Magistral and Ministral.

Each call is ``[TOOL_CALLS]NAME[ARGS]{json}``; Mistral-Small-3.2 writes the call's id between name and arguments,
``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{json}``, and its template renders that id back in the tool result, so a valid call
keeps it as :attr:`ToolCall.id` (nine letters or digits, as the template requires). The arguments run to the next
``[TOOL_CALLS]`` or the end of the output and must be one strict JSON object. Text before the first call is the
answer; reasoning is ``[THINK]...[/THINK]``; the turn ends with ``</s>``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import ToolCall, ToolParser, new_call_id, parse_json_object

__all__ = ["MistralToolParser"]

_CALLS = "[TOOL_CALLS]"
_ARGS = "[ARGS]"
_CALL_ID = "[CALL_ID]"
_ID = re.compile(r"[A-Za-z0-9]{9}")


class MistralToolParser(ToolParser):
    """Mistral ``[TOOL_CALLS]NAME[ARGS]{json}`` calls."""

    name = "mistral"
    stop_tokens: ClassVar[tuple[str, ...]] = ("</s>",)
    markup: ClassVar[re.Pattern[str]] = re.compile(re.escape(_CALLS))

    def __init__(self, think_start: str = "[THINK]", think_end: str = "[/THINK]") -> None:
        super().__init__(think_start, think_end)

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        calls: list[ToolCall] = []
        seen: set[str] = set()
        answer, *bodies = text.split(_CALLS)
        for stray in (_ARGS, _CALL_ID):
            if stray in answer:
                calls.append(self.error(len(calls), f"{stray} outside a {_CALLS} call", answer))
        for body in bodies:
            call = self._parse_call(len(calls), body, _CALLS + body)
            if call.error is None and call.id in seen:
                call = self.error(len(calls), f"call id {call.id!r} used twice", call.raw, call.name)
            seen.add(call.id)
            calls.append(call)
        return calls

    def _parse_call(self, index: int, body: str, raw: str) -> ToolCall:
        if body.count(_ARGS) != 1:
            return self.error(index, f"a call needs exactly one {_ARGS}", raw)
        head, arguments = body.split(_ARGS)
        name, marked, call_id = head.partition(_CALL_ID)
        if not name or any(c.isspace() or c in "[]{}<>" for c in name):
            return self.error(index, f"tool name {name[:80]!r} is empty or contains whitespace or markup", raw)
        if marked and _ID.fullmatch(call_id) is None:
            return self.error(index, f"call id {call_id[:80]!r} is not nine letters or digits", raw, name)
        payload = parse_json_object(arguments, "arguments")
        if isinstance(payload, str):
            return self.error(index, payload, raw, name)
        return ToolCall(id=call_id if marked else new_call_id(index), name=name, input=payload, raw=raw)
