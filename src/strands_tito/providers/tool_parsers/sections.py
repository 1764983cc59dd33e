"""Special-token sections of JSON calls: Kimi-K2 and DeepSeek-V3.1.

* ``kimi_k2`` (Kimi-K2 Instruct and Thinking): ``<|tool_calls_section_begin|><|tool_call_begin|>functions.N:IDX
  <|tool_call_argument_begin|>{json}<|tool_call_end|>...<|tool_calls_section_end|>``
* ``deepseek_v31`` (DeepSeek-V3.1): ``<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>{json}
  <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>``

The templates write no whitespace between these tokens; whitespace between calls is tolerated (it carries no
meaning), anything else is an error. Arguments are strict JSON objects (duplicate keys, ``NaN`` and non-objects are
errors).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import SectionParser, ToolCall, new_call_id, parse_json_object

__all__ = ["DeepSeekV31ToolParser", "KimiK2ToolParser"]

_KIMI_ID = re.compile(r"functions\.([^\s:<>]+):(\d+)")


class KimiK2ToolParser(SectionParser):
    """Kimi-K2 tool-call sections.

    The call id ``functions.NAME:IDX`` is written by the model (IDX counts the calls of the conversation) and the
    template renders it back in the tool result's header, so a valid call keeps the model's own id as
    :attr:`ToolCall.id`; the tool name is the id's ``NAME``. A malformed id, or an id used twice in one output, is an
    error (Strands needs unique tool-use ids).
    """

    name = "kimi_k2"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<|im_end|>",)
    markup: ClassVar[re.Pattern[str]] = re.compile(r"<\|tool_calls_section_begin\|>|<\|tool_call_begin\|>")
    section_start = "<|tool_calls_section_begin|>"
    section_end = "<|tool_calls_section_end|>"
    call_start = "<|tool_call_begin|>"
    call_end = "<|tool_call_end|>"
    argument_start: ClassVar[str] = "<|tool_call_argument_begin|>"

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        calls = super().parse_calls(text, tool_specs)
        seen: set[str] = set()
        checked: list[ToolCall] = []
        for call in calls:
            if call.error is None and call.id in seen:
                call = self.error(len(checked), f"call id {call.id!r} used twice", call.raw, call.name)
            seen.add(call.id)
            checked.append(call)
        return checked

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        if body.count(self.argument_start) != 1:
            return self.error(index, f"a call needs exactly one {self.argument_start}", raw)
        call_id, arguments = body.split(self.argument_start)
        match = _KIMI_ID.fullmatch(call_id)
        if match is None:
            return self.error(index, f"call id {call_id[:80]!r} is not functions.NAME:INDEX", raw)
        name = match.group(1)
        payload = parse_json_object(arguments, "arguments")
        if isinstance(payload, str):
            return self.error(index, payload, raw, name)
        return ToolCall(id=call_id, name=name, input=payload, raw=raw)


class DeepSeekV31ToolParser(SectionParser):
    """DeepSeek-V3.1 tool-call sections (fullwidth bars and ``▁`` are part of the special tokens).

    The template renders no tools list: the tool schemas must reach the model another way (a system prompt).
    """

    name = "deepseek_v31"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<｜end▁of▁sentence｜>",)
    markup: ClassVar[re.Pattern[str]] = re.compile("<｜tool▁calls▁begin｜>|<｜tool▁call▁begin｜>")
    section_start = "<｜tool▁calls▁begin｜>"
    section_end = "<｜tool▁calls▁end｜>"
    call_start = "<｜tool▁call▁begin｜>"
    call_end = "<｜tool▁call▁end｜>"
    separator: ClassVar[str] = "<｜tool▁sep｜>"

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        if body.count(self.separator) != 1:
            return self.error(index, f"a call needs exactly one {self.separator}", raw)
        name, arguments = body.split(self.separator)
        if not name or name != name.strip() or any(c.isspace() or c in "<>" for c in name):
            return self.error(index, f"tool name {name[:80]!r} is empty or contains whitespace or markup", raw)
        payload = parse_json_object(arguments, "arguments")
        if isinstance(payload, str):
            return self.error(index, payload, raw, name)
        return ToolCall(id=new_call_id(index), name=name, input=payload, raw=raw)
