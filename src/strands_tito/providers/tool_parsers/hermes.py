"""Hermes-style JSON calls: ``<tool_call>\\n{"name": N, "arguments": {...}}\\n</tool_call>`` (Qwen3, QwQ, Qwen2.5)."""

from __future__ import annotations

import re
from typing import ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import TaggedCallParser, ToolCall, new_call_id, parse_json_object

# The name of a call whose JSON is broken, so its error is counted under the tool the model meant.
_NAME = re.compile(r'"name"\s*:\s*"([^"\\]+)"')

__all__ = ["HermesToolParser"]


class HermesToolParser(TaggedCallParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call.

    The JSON must be an object with a non-empty string ``name`` and, optionally, an ``arguments`` object; any other
    key, a duplicated key or a non-object ``arguments`` is an error.
    """

    name = "hermes"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<|im_end|>", "<|endoftext|>")
    markup: ClassVar[re.Pattern[str]] = re.compile(r"<tool_call>\s*\{")

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        payload = parse_json_object(body, "tool call")
        if isinstance(payload, str):
            found = _NAME.search(body)
            return self.error(index, payload, raw, found.group(1) if found else "")
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            return self.error(index, 'tool call has no "name" string', raw)
        extra = sorted(set(payload) - {"name", "arguments"})
        if extra:
            return self.error(index, f"tool call has unexpected keys {extra}", raw, name)
        arguments = payload.get("arguments", {})
        if not isinstance(arguments, dict):
            return self.error(index, f'"arguments" must be a JSON object, got {type(arguments).__name__}', raw, name)
        return ToolCall(id=new_call_id(index), name=name, input=arguments, raw=raw)
