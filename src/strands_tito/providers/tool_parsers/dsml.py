"""DeepSeek's DSML calls: DeepSeek-V3.2 (``deepseek_v32``) and DeepSeek-V4 (``deepseek_v4``).

``<｜DSML｜function_calls>\\n<｜DSML｜invoke name="N">\\n<｜DSML｜parameter name="P" string="true">V
</｜DSML｜parameter>\\n...</｜DSML｜invoke>\\n</｜DSML｜function_calls>``; V4 names the section ``tool_calls``.
``｜DSML｜`` is one special token. ``string="true"`` marks a string value written as it is; ``string="false"`` a value
written as JSON (numbers, booleans, null, arrays, objects), which must then be strict JSON. Only whitespace may stand
between elements; a parameter given twice, an unclosed element or any other ``string`` attribute is an error.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import SectionParser, ToolCall, new_call_id, strict_json

__all__ = ["DeepSeekV4ToolParser", "DeepSeekV32ToolParser"]

_DSML = "｜DSML｜"
_INVOKE_NAME = re.compile(r' name="([^"<>\n]+)">')
_PARAMETER = re.compile(r"\s*<" + _DSML + r'parameter name="([^"<>\n]+)" string="([^"<>\n]*)">')
_PARAMETER_END = f"</{_DSML}parameter>"


class DeepSeekV32ToolParser(SectionParser):
    """DeepSeek-V3.2 DSML calls in a ``<｜DSML｜function_calls>`` section."""

    name = "deepseek_v32"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<｜end▁of▁sentence｜>",)
    markup: ClassVar[re.Pattern[str]] = re.compile(f"<{_DSML}(?:function_calls|invoke )")
    section_start = f"<{_DSML}function_calls>"
    section_end = f"</{_DSML}function_calls>"
    call_start = f"<{_DSML}invoke"
    call_end = f"</{_DSML}invoke>"

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        match = _INVOKE_NAME.match(body)
        if match is None:
            return self.error(index, f'{self.call_start} must start as {self.call_start} name="NAME">', raw)
        name = match.group(1)
        arguments: dict[str, Any] = {}
        pos = match.end()
        while body[pos:].strip():
            parameter = _PARAMETER.match(body, pos)
            if parameter is None:
                return self.error(index, f"unexpected text in the call: {body[pos:].strip()[:80]!r}", raw, name)
            key, kind = parameter.groups()
            end = body.find(_PARAMETER_END, parameter.end())
            nested = body.find(f"<{_DSML}parameter", parameter.end())
            if end == -1 or (nested != -1 and nested < end):
                return self.error(index, f"parameter {key!r} is not closed by {_PARAMETER_END}", raw, name)
            if key in arguments:
                return self.error(index, f"parameter {key!r} given twice", raw, name)
            text = body[parameter.end() : end]
            if kind == "true":
                arguments[key] = text
            elif kind == "false":
                try:
                    arguments[key] = strict_json(text)
                except ValueError as e:
                    return self.error(index, f'parameter {key!r} (string="false") is not valid JSON: {e}', raw, name)
            else:
                reason = f'parameter {key!r} has string="{kind}"; expected "true" or "false"'
                return self.error(index, reason, raw, name)
            pos = end + len(_PARAMETER_END)
        return ToolCall(id=new_call_id(index), name=name, input=arguments, raw=raw)


class DeepSeekV4ToolParser(DeepSeekV32ToolParser):
    """DeepSeek-V4 DSML calls: as V3.2, in a ``<｜DSML｜tool_calls>`` section."""

    name = "deepseek_v4"
    markup: ClassVar[re.Pattern[str]] = re.compile(f"<{_DSML}(?:tool_calls|invoke )")
    section_start = f"<{_DSML}tool_calls>"
    section_end = f"</{_DSML}tool_calls>"
