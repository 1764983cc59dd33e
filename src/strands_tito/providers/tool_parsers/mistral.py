"""Mistral calls (``mistral``): Mistral-Small, Devstral, Magistral and Ministral; Mistral-Nemo's older format.

Each call is ``[TOOL_CALLS]NAME[ARGS]{json}``; Mistral-Small-3.2 writes the call's id between name and arguments,
``[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{json}``, and its template renders that id back in the tool result, so a valid call
keeps it as :attr:`ToolCall.id` (nine letters or digits, as the template requires). The arguments run to the next
``[TOOL_CALLS]`` or the end of the output and must be one strict JSON object. Text before the first call is the
answer; reasoning is ``[THINK]...[/THINK]``; the turn ends with ``</s>``.

The older format (Mistral-Nemo-Instruct-2407, Ministral-8B-Instruct-2410: a ``[TOOL_CALLS]`` with no ``[ARGS]``) is
one strict JSON list after ``[TOOL_CALLS]``, ``[{"name": N, "arguments": {...}, "id": ID}, ...]``; the template
renders each call's ``id`` back in its result (``"call_id"``, nine letters or digits), so the model's id is kept, and a
call written without one gets a new nine-character id the template accepts. Any other key is an error.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from typing import Any, ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import ToolCall, ToolParser, new_call_id, parse_json_object, strict_json

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

    def __init__(self, think_start: str = "[THINK]", think_end: str = "[/THINK]", **kwargs: str | None) -> None:
        super().__init__(think_start, think_end, **kwargs)

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        calls: list[ToolCall] = []
        seen: set[str] = set()
        answer, *bodies = text.split(_CALLS)
        for stray in (_ARGS, _CALL_ID):
            if stray in answer:
                calls.append(self.error(len(calls), f"{stray} outside a {_CALLS} call", answer))
        for body in bodies:
            listed = _ARGS not in body and body.lstrip().startswith("[")
            found = (
                self._parse_list(len(calls), body) if listed else [self._parse_call(len(calls), body, _CALLS + body)]
            )
            for call in found:
                if call.error is None and call.id in seen:
                    call = self.error(len(calls), f"call id {call.id!r} used twice", call.raw, call.name)
                seen.add(call.id)
                calls.append(call)
        return calls

    def _parse_list(self, index: int, body: str) -> list[ToolCall]:
        """Mistral-Nemo's ``[TOOL_CALLS][{...}, ...]``: one call per entry of a strict JSON list."""
        raw = _CALLS + body
        try:
            entries = strict_json(body)
        except ValueError as e:
            return [self.error(index, f"the {_CALLS} list is not valid JSON: {e}", raw)]
        if not isinstance(entries, list) or not entries:
            return [self.error(index, f"{_CALLS} must be followed by a non-empty JSON list of calls", raw)]
        return [self._listed_call(index + k, entry, raw) for k, entry in enumerate(entries)]

    def _listed_call(self, index: int, entry: Any, raw: str) -> ToolCall:
        if not isinstance(entry, dict):
            return self.error(index, f"a listed call must be a JSON object, got {type(entry).__name__}", raw)
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            return self.error(index, 'a listed call has no "name" string', raw)
        extra = sorted(set(entry) - {"name", "arguments", "id"})
        if extra:
            return self.error(index, f"a listed call has unexpected keys {extra}", raw, name)
        arguments = entry.get("arguments", {})
        if not isinstance(arguments, dict):
            return self.error(index, f'"arguments" must be a JSON object, got {type(arguments).__name__}', raw, name)
        call_id = entry.get("id")
        if call_id is not None and (not isinstance(call_id, str) or _ID.fullmatch(call_id) is None):
            return self.error(index, f"call id {str(call_id)[:80]!r} is not nine letters or digits", raw, name)
        return ToolCall(id=call_id or _nine_character_id(), name=name, input=arguments, raw=raw)

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


def _nine_character_id() -> str:
    """A new call id of nine letters and digits, the only ids Mistral's templates render."""
    return secrets.token_hex(5)[:9]
