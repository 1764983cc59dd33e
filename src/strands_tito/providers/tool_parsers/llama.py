"""Llama 3.1 / 3.2 / 3.3 JSON calls: the whole output is ``{"name": N, "parameters": {...}}``.

The template renders one call per assistant message (it refuses several) as exactly that JSON object, with nothing
before or after it; the model may also prefix it with ``<|python_tag|>``.

What is a call and what is a plain answer, decided on the output alone (outside reasoning, before the stop token),
with surrounding whitespace ignored:

* it starts with ``<|python_tag|>``: a call; what follows must be the JSON call (the built-in tools' Python-call
  syntax, ``brave_search.call(query="...")``, is not supported and is an error);
* it starts with ``{``: a call attempt; it must be one strict JSON object with exactly the keys ``name`` (a non-empty
  string) and ``parameters`` (an object). Anything else (invalid or truncated JSON, two objects, extra text after the
  object, other keys) is an error the model sees. So a plain answer that is itself a JSON object is read as a
  malformed call: with tools given, this format has no way to tell the two apart, and reading it as an answer would
  silently drop any malformed call;
* ``<|python_tag|>`` anywhere else is an error;
* anything else is a plain answer (prose that quotes a call in the middle is not a call).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

from strands.types.tools import ToolSpec

from strands_tito.providers.tool_parsers.base import ToolCall, ToolParser, new_call_id, parse_json_object

__all__ = ["Llama3JsonToolParser"]

_PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(ToolParser):
    """The Llama-3 JSON call as the whole output; see the module docstring for what is a call."""

    name = "llama3_json"
    stop_tokens: ClassVar[tuple[str, ...]] = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
    markup: ClassVar[re.Pattern[str]] = re.compile(r'\A\s*(?:<\|python_tag\|>\s*)?\{\s*"name"\s*:|<\|python_tag\|>')

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        body = text.strip()
        if body.startswith(_PYTHON_TAG):
            body = body.removeprefix(_PYTHON_TAG).strip()
            if not body.startswith("{"):
                return [self.error(0, "only JSON calls are supported after <|python_tag|> (no built-in tools)", text)]
        elif _PYTHON_TAG in body:
            return [self.error(0, "<|python_tag|> must start the output", text)]
        elif not body.startswith("{"):
            return []
        payload = parse_json_object(body, "tool call")
        if isinstance(payload, str):
            return [self.error(0, payload, text)]
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            return [self.error(0, 'tool call has no "name" string', text)]
        if set(payload) != {"name", "parameters"}:
            keys = sorted(payload)
            return [
                self.error(0, f'tool call must have exactly the keys "name" and "parameters", got {keys}', text, name)
            ]
        parameters = payload["parameters"]
        if not isinstance(parameters, dict):
            reason = f'"parameters" must be a JSON object, got {type(parameters).__name__}'
            return [self.error(0, reason, text, name)]
        return [ToolCall(id=new_call_id(0), name=name, input=parameters, raw=text)]
