"""Strict, on-policy tool-call parsers.

A parser reads the model's raw output text and returns the calls exactly as written. Nothing is repaired: a call
that is not well-formed becomes a :class:`ToolCall` with ``error`` set, which the model provider turns into a tool
error the model sees (reason and raw text) instead of running anything.

Reasoning is never executed: text inside ``<think>...</think>``, text before a lone ``</think>`` (the generation
prompt opened the block), and everything after an unclosed ``<think>`` are ignored.
"""

from __future__ import annotations

import json
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from strands.types.tools import ToolSpec


@dataclass(frozen=True)
class ToolCall:
    """One tool call found in model output.

    Attributes:
        id: Tool-use id given to Strands (unique per call).
        name: Tool name as written by the model, or ``""`` if it could not be read.
        input: Arguments (empty when ``error`` is set).
        raw: The call's raw text, markup included.
        error: Why the call is malformed; None for a valid call.
    """

    id: str
    name: str
    input: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: str | None = None

    @property
    def is_error(self) -> bool:
        """True when the call is malformed and must not run."""
        return self.error is not None


def new_call_id(index: int) -> str:
    """A unique tool-use id; the index suffix records the call's position in its message."""
    return f"call_{secrets.token_hex(4)}_{index}"


class ToolParser(ABC):
    """Base class: reasoning removal plus a format-specific :meth:`parse_calls`.

    Args:
        think_start: Token that opens a reasoning block.
        think_end: Token that closes it.
    """

    name: ClassVar[str]

    def __init__(self, think_start: str = "<think>", think_end: str = "</think>") -> None:
        self.think_start = think_start
        self.think_end = think_end
        self._think_block = re.compile(re.escape(think_start) + ".*?" + re.escape(think_end), re.DOTALL)

    def visible_text(self, text: str) -> str:
        """The part of ``text`` that may contain executable calls (reasoning removed)."""
        text = self._think_block.sub("", text)
        if self.think_end in text:
            text = text.rsplit(self.think_end, 1)[1]
        if self.think_start in text:
            text = text.split(self.think_start, 1)[0]
        return text

    def parse(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        """Return every call in ``text`` outside reasoning, in the order written."""
        return self.parse_calls(self.visible_text(text), tool_specs)

    @abstractmethod
    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        """Parse calls from text that contains no reasoning."""


class _TaggedCallParser(ToolParser):
    """Shared scanning for formats that wrap each call in start/end tags."""

    call_start: ClassVar[str] = "<tool_call>"
    call_end: ClassVar[str] = "</tool_call>"

    def parse_calls(self, text: str, tool_specs: Sequence[ToolSpec] | None = None) -> list[ToolCall]:
        specs = {spec["name"]: spec for spec in tool_specs or []}
        calls: list[ToolCall] = []
        pos = 0
        while True:
            start = text.find(self.call_start, pos)
            stray_end = text.find(self.call_end, pos)
            if stray_end != -1 and (start == -1 or stray_end < start):
                calls.append(self._error(len(calls), f"{self.call_end} without a matching {self.call_start}", ""))
                pos = stray_end + len(self.call_end)
                continue
            if start == -1:
                return calls
            body_start = start + len(self.call_start)
            end = text.find(self.call_end, body_start)
            nested = text.find(self.call_start, body_start)
            if end == -1 or (nested != -1 and nested < end):
                stop = len(text) if nested == -1 else nested
                calls.append(self._error(len(calls), f"{self.call_start} is not closed", text[start:stop]))
                if nested == -1:
                    return calls
                pos = nested
                continue
            raw = text[start : end + len(self.call_end)]
            calls.append(self.parse_body(len(calls), text[body_start:end], raw, specs))
            pos = end + len(self.call_end)

    def _error(self, index: int, reason: str, raw: str, name: str = "") -> ToolCall:
        return ToolCall(id=new_call_id(index), name=name, raw=raw, error=reason)

    @abstractmethod
    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        """Parse the text between the call tags."""


class HermesToolParser(_TaggedCallParser):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen2.5, Qwen3)."""

    name = "hermes"

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as e:
            return self._error(index, f"tool call is not valid JSON: {e}", raw)
        if not isinstance(payload, dict):
            return self._error(index, f"tool call must be a JSON object, got {type(payload).__name__}", raw)
        name = payload.get("name")
        if not isinstance(name, str) or not name:
            return self._error(index, 'tool call has no "name" string', raw)
        extra = sorted(set(payload) - {"name", "arguments"})
        if extra:
            return self._error(index, f"tool call has unexpected keys {extra}", raw, name)
        arguments = payload.get("arguments", {})
        if not isinstance(arguments, dict):
            return self._error(index, f'"arguments" must be a JSON object, got {type(arguments).__name__}', raw, name)
        return ToolCall(id=new_call_id(index), name=name, input=arguments, raw=raw)


_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>(.*)</function>\s*", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)


class QwenXMLToolParser(_TaggedCallParser):
    """``<tool_call><function=NAME><parameter=P>V</parameter>...</function></tool_call>`` (Qwen3-Coder, Qwen3.5).

    Parameter values are kept as strings when the tool's schema says ``string`` (or the value is not JSON), and
    JSON-decoded otherwise, so ``42`` reaches an integer parameter as an int.
    """

    name = "qwen_xml"

    def parse_body(self, index: int, body: str, raw: str, specs: dict[str, ToolSpec]) -> ToolCall:
        match = _FUNCTION.fullmatch(body)
        if match is None:
            return self._error(index, "expected exactly one <function=NAME>...</function> inside <tool_call>", raw)
        name, inner = match.group(1).strip(), match.group(2)
        properties = _schema_properties(specs.get(name))
        arguments: dict[str, Any] = {}
        pos = 0
        for param in _PARAMETER.finditer(inner):
            between = inner[pos : param.start()]
            if between.strip():
                return self._error(index, f"unexpected text between parameters: {between.strip()[:80]!r}", raw, name)
            key = param.group(1).strip()
            if key in arguments:
                return self._error(index, f"parameter {key!r} given twice", raw, name)
            arguments[key] = _parameter_value(param.group(2), properties.get(key))
            pos = param.end()
        rest = inner[pos:]
        if rest.strip():
            return self._error(index, f"unexpected text in function body: {rest.strip()[:80]!r}", raw, name)
        return ToolCall(id=new_call_id(index), name=name, input=arguments, raw=raw)


def _schema_properties(spec: ToolSpec | None) -> dict[str, Any]:
    if spec is None:
        return {}
    schema = spec.get("inputSchema", {})
    schema = schema.get("json", schema) if isinstance(schema, dict) else {}
    properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
    return properties if isinstance(properties, dict) else {}


def _parameter_value(text: str, schema: Any) -> Any:
    # The template puts the value on its own line; those two newlines are markup, not data.
    value = text.removeprefix("\n").removesuffix("\n")
    if isinstance(schema, dict) and schema.get("type") == "string":
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


TOOL_PARSERS: dict[str, type[ToolParser]] = {
    HermesToolParser.name: HermesToolParser,
    QwenXMLToolParser.name: QwenXMLToolParser,
}


def get_tool_parser(name: str, **kwargs: Any) -> ToolParser:
    """Return a new parser by registry name (``hermes`` or ``qwen_xml``)."""
    try:
        parser_class = TOOL_PARSERS[name]
    except KeyError:
        raise ValueError(f"unknown tool parser {name!r}; known: {sorted(TOOL_PARSERS)}") from None
    return parser_class(**kwargs)


__all__ = [
    "TOOL_PARSERS",
    "HermesToolParser",
    "QwenXMLToolParser",
    "ToolCall",
    "ToolParser",
    "get_tool_parser",
]
